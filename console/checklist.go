package console

import (
	"context"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The heartbeat's checklist: shown on the heartbeat page, edited on its
// own page, through GET and PUT /v1/heartbeat/checklist.

func init() {
	// Registered here so the editor's code stays in this file.
	pageNames = append(pageNames, "heartbeat_checklist")
}

// checklistView is GET /v1/heartbeat/checklist as the console shows it
// (heartbeat.ChecklistView: the console does not import the triggers).
type checklistView struct {
	Source   string     `json:"source"` // file or memory
	Path     string     `json:"path"`
	Document string     `json:"document"`
	Text     string     `json:"text"`
	Bytes    int        `json:"bytes"`
	Revision string     `json:"revision"`
	Items    int        `json:"items"`
	Status   string     `json:"status"` // "", missing or empty
	Detail   string     `json:"detail"`
	Updated  *time.Time `json:"updated"`
	By       string     `json:"by"`
}

// checklistShown is the checklist on the heartbeat page: it, or why it
// could not be read.
type checklistShown struct {
	View *checklistView
	Err  string
}

// heartbeatChecklist reads the checklist for the heartbeat page.
func (h *handler) heartbeatChecklist(ctx context.Context, admin bool) checklistShown {
	var c checklistView
	if err := h.call(ctx, http.MethodGet, "/v1/heartbeat/checklist", nil, &c, nil); err != nil {
		return checklistShown{Err: err.Error()}
	}
	c.hidePath(admin)
	return checklistShown{View: &c}
}

// hidePath shows a session that is not the admin's the checklist file's
// base name only, in its path and its detail: where the server keeps its
// files is the operator's.
func (c *checklistView) hidePath(admin bool) {
	if admin || c.Path == "" {
		return
	}
	dir := filepath.Dir(c.Path)
	if dir != "." {
		c.Detail = strings.ReplaceAll(c.Detail, dir+string(filepath.Separator), "")
	}
	c.Path = filepath.Base(c.Path)
}

// checklistPage is the data of the checklist's editor: the checklist as
// it is now (theirs, after a conflicting save), and the editor's text and
// the revision its save is made at; after a conflict the text is the
// user's, kept.
type checklistPage struct {
	Checklist checklistView
	Text      string
	Revision  string
	Conflict  bool
}

func (h *handler) checklistEditor(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Heartbeat: checklist", "heartbeat"
	var p checklistPage
	if err := h.call(r.Context(), http.MethodGet, "/v1/heartbeat/checklist", nil, &p.Checklist, nil); err != nil {
		h.checklistError(w, v, err)
		return
	}
	p.Checklist.hidePath(v.Admin)
	p.Text, p.Revision = p.Checklist.Text, p.Checklist.Revision
	v.Data = p
	h.render(w, http.StatusOK, "heartbeat_checklist", v)
}

// checklistError shows a failed read of the checklist.
func (h *handler) checklistError(w http.ResponseWriter, v *view, err error) {
	v.Error = "The checklist could not be read: " + err.Error()
	code := status(err)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	h.render(w, code, "error", v)
}

// saveChecklist writes the checklist through PUT /v1/heartbeat/checklist
// at the revision the editor was opened at (If-Match; If-None-Match: *
// when there was none). When it changed meanwhile (412: someone else, or
// the agent's checklist_update) the editor comes back with the user's
// text kept and the checklist as it is now shown beside it, at its new
// revision: saving again replaces it.
func (h *handler) saveChecklist(w http.ResponseWriter, r *http.Request, ss *session) {
	text := strings.ReplaceAll(r.PostFormValue("text"), "\r\n", "\n")
	revs, ok := r.PostForm["revision"]
	if !ok {
		h.sessions.setFlash(r, "Refused: the form has no revision; open the editor again.")
		http.Redirect(w, r, "/heartbeat/checklist", http.StatusSeeOther)
		return
	}
	rev := revs[0]
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPut, "/v1/heartbeat/checklist", strings.NewReader(text))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req.Header.Set("Content-Type", "text/markdown; charset=utf-8")
	if rev == "" {
		req.Header.Set("If-None-Match", "*")
	} else {
		req.Header.Set("If-Match", strconv.Quote(rev))
	}
	var saved checklistView
	err = h.send(req, &saved, nil)
	if err == nil {
		msg := "Checklist saved: " + strconv.Itoa(saved.Items) + " item(s)."
		if saved.Status != "" {
			msg += " The heartbeat will skip it (" + saved.Status + "): " + saved.Detail
		}
		h.sessions.setFlash(r, msg)
		http.Redirect(w, r, "/heartbeat", http.StatusSeeOther)
		return
	}
	// Refused: the editor again, nothing lost.
	v := &view{Who: ss.who, Write: ss.write, Admin: ss.cred == "", CSRF: ss.csrf, Path: r.URL.Path, Nav: "heartbeat", Title: "Heartbeat: checklist"}
	p := checklistPage{Text: text, Revision: rev}
	code := status(err)
	if rerr := h.call(r.Context(), http.MethodGet, "/v1/heartbeat/checklist", nil, &p.Checklist, nil); rerr != nil {
		h.checklistError(w, v, rerr)
		return
	}
	p.Checklist.hidePath(v.Admin)
	if code == http.StatusPreconditionFailed {
		p.Conflict, p.Revision = true, p.Checklist.Revision
		v.Error = "Not saved: the checklist changed after you opened it (someone else, or the agent, saved it). Your text is kept below, next to theirs; merge them and save again (that replaces theirs)."
		code = http.StatusConflict
	} else {
		v.Error = "Not saved: " + err.Error()
		if code == 0 {
			code = http.StatusInternalServerError
		}
	}
	v.Data = p
	h.render(w, code, "heartbeat_checklist", v)
}
