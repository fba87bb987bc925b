package console

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/approval"
)

// approvalsPageSize is the approvals of one page of a list.
const approvalsPageSize = 25

// approvalsPage is the data of the approvals inbox.
type approvalsPage struct {
	Decided   bool // the list of decided approvals, not the inbox
	Approvals []approvalRow
	Page      int
	Newer     string // the URLs of the pages around this one, if any
	Older     string
	Off       bool // the server runs no approvals
}

// approvalRow is an approval as the pages show it.
type approvalRow struct {
	approval.Approval
	Left string // how long until the deadline, while pending
}

// approvalPage is the data of one approval's page.
type approvalPage struct {
	A approvalRow
}

func (h *handler) approvalRow(a approval.Approval) approvalRow {
	row := approvalRow{Approval: a}
	if a.State == approval.Pending {
		row.Left = until(a.Deadline.Sub(h.now()))
	}
	return row
}

// until says how long d is, roughly ("in 3h 20m", "overdue").
func until(d time.Duration) string {
	switch {
	case d <= 0:
		return "overdue"
	case d < time.Minute:
		return "in under a minute"
	case d < time.Hour:
		return fmt.Sprintf("in %dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("in %dh %dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("in %d days", int(d.Hours())/24)
}

// approvals is the inbox (pending, the nearest deadline first) or, with
// ?decided=1, the decided ones (newest first). The API has no cursor: a
// page asks for as many as reach its end and shows the last of them.
func (h *handler) approvals(w http.ResponseWriter, r *http.Request, v *view) {
	in := r.URL.Query()
	p := approvalsPage{Decided: in.Get("decided") != "", Page: 1}
	if n, err := strconv.Atoi(in.Get("page")); err == nil && n > 1 && n <= 1000 {
		p.Page = n
	}
	q := url.Values{"limit": {strconv.Itoa(p.Page*approvalsPageSize + 1)}}
	if !p.Decided {
		q.Set("state", string(approval.Pending))
	} else {
		// Decided: every state but pending. Ask for all, the pending
		// ones too, so that the page holds its share of the others.
		q.Set("limit", strconv.Itoa(p.Page*approvalsPageSize+1+max(h.pendingCount(r), 0)))
	}
	v.Title, v.Nav = "Approvals", "approvals"
	if p.Decided {
		v.Title = "Decided approvals"
	}
	var body struct {
		Approvals []approval.Approval `json:"approvals"`
	}
	if err := h.call(r.Context(), http.MethodGet, "/v1/approvals?"+q.Encode(), nil, &body, nil); err != nil {
		if status(err) == http.StatusNotFound {
			p.Off = true
		} else {
			v.Error = "The approvals could not be read: " + err.Error()
		}
	}
	var list []approval.Approval
	for _, a := range body.Approvals {
		if (a.State == approval.Pending) != p.Decided {
			list = append(list, a)
		}
	}
	from := (p.Page - 1) * approvalsPageSize
	if len(list) > from+approvalsPageSize {
		next := url.Values{"page": {strconv.Itoa(p.Page + 1)}}
		if p.Decided {
			next.Set("decided", "1")
		}
		p.Older = "/approvals?" + next.Encode()
		list = list[:from+approvalsPageSize]
	}
	if from < len(list) {
		list = list[from:]
	} else {
		list = nil
	}
	if p.Page > 1 {
		prev := url.Values{}
		if p.Page > 2 {
			prev.Set("page", strconv.Itoa(p.Page-1))
		}
		if p.Decided {
			prev.Set("decided", "1")
		}
		p.Newer = strings.TrimSuffix("/approvals?"+prev.Encode(), "?")
	}
	if !p.Decided {
		// The inbox: what expires first comes first.
		slices.SortStableFunc(list, func(a, b approval.Approval) int { return a.Deadline.Compare(b.Deadline) })
	}
	for _, a := range list {
		p.Approvals = append(p.Approvals, h.approvalRow(a))
	}
	v.Data = p
	h.render(w, http.StatusOK, "approvals", v)
}

// pendingCount is how many approvals are pending (GET
// /v1/approvals/counts, which lists none); -1 if unknown (the server runs
// no approvals, or the count failed).
func (h *handler) pendingCount(r *http.Request) int {
	var body struct {
		Counts map[approval.State]int `json:"counts"`
	}
	if h.call(r.Context(), http.MethodGet, "/v1/approvals/counts", nil, &body, nil) != nil {
		return -1
	}
	return body.Counts[approval.Pending]
}

func (h *handler) approval(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Approval", "approvals"
	var a approval.Approval
	if err := h.call(r.Context(), http.MethodGet, "/v1/approvals/"+url.PathEscape(r.PathValue("id")), nil, &a, nil); err != nil {
		v.Error = "The approval could not be read: " + err.Error()
		st := status(err)
		if st == 0 {
			st = http.StatusInternalServerError
		}
		h.render(w, st, "error", v)
		return
	}
	v.Data = approvalPage{A: h.approvalRow(a)}
	h.render(w, http.StatusOK, "approval", v)
}

// decide approves or rejects an approval (the form's verdict) through
// POST /v1/approvals/{id}/approve|reject, as the session's user: the
// approval's approvers rules apply and the decision names the user.
func (h *handler) decide(w http.ResponseWriter, r *http.Request, _ *session) {
	id := r.PathValue("id")
	verdict := r.PostFormValue("verdict")
	if verdict != string(approval.Approve) && verdict != string(approval.Reject) {
		h.sessions.setFlash(r, "Refused: choose Approve or Reject.")
		back(w, r, "/approvals/"+url.PathEscape(id))
		return
	}
	var body any
	if c := strings.TrimSpace(r.PostFormValue("comment")); c != "" {
		body = map[string]string{"comment": c}
	}
	err := h.call(r.Context(), http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verdict, body, nil, nil)
	done := map[string]string{"approve": "Approved", "reject": "Rejected"}[verdict]
	h.flash(r, err, done+": "+id+".")
	back(w, r, "/approvals/"+url.PathEscape(id))
}
