package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/agentwork/usage"
	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// pageSize is the runs of one page of the runs list.
const pageSize = 50

// runRow is a run event as the pages show it.
type runRow struct {
	bus.Event
	Result agentwork.Result
}

func decodeRuns(raw []json.RawMessage) []runRow {
	out := make([]runRow, 0, len(raw))
	for _, r := range raw {
		var row runRow
		if json.Unmarshal(r, &row.Event) != nil || row.DecodeData(&row.Result) != nil {
			continue
		}
		out = append(out, row)
	}
	return out
}

func (h *handler) listRuns(ctx context.Context, q url.Values) ([]runRow, error) {
	var body struct {
		Runs []json.RawMessage `json:"runs"`
	}
	if err := h.call(ctx, http.MethodGet, "/v1/runs?"+q.Encode(), nil, &body, nil); err != nil {
		return nil, err
	}
	return decodeRuns(body.Runs), nil
}

// heartbeatStatus is the part of GET /v1/heartbeat the pages show.
type heartbeatStatus struct {
	Name        string   `json:"name"`
	Enabled     bool     `json:"enabled"`
	Every       string   `json:"every"`
	ActiveHours string   `json:"active_hours"`
	ActiveNow   bool     `json:"active_now"`
	Checklist   string   `json:"checklist"`
	OutputMode  string   `json:"output_mode"`
	Targets     []string `json:"targets"`
	Running     *struct {
		Since time.Time `json:"since"`
	} `json:"running"`
	LastFire time.Time `json:"last_fire"`
	NextFire time.Time `json:"next_fire"`
	LastRun  *struct {
		RunID   string    `json:"run_id"`
		Ended   time.Time `json:"ended"`
		Outcome string    `json:"outcome"`
		Reason  string    `json:"reason"`
		Detail  string    `json:"detail"`
		Text    string    `json:"text"`
		Manual  bool      `json:"manual"`
	} `json:"last_run"`
	ConsecutiveErrors int        `json:"consecutive_errors"`
	Paused            bool       `json:"paused"`
	PausedReason      string     `json:"paused_reason"`
	PausedUntil       *time.Time `json:"paused_until"`
}

// job is the part of a GET /v1/jobs entry the pages show.
type job struct {
	Job struct {
		ID       string     `json:"id"`
		Name     string     `json:"name"`
		Schedule string     `json:"schedule"`
		At       *time.Time `json:"at"`
		Timezone string     `json:"timezone"`
		Prompt   string     `json:"prompt"`
		Targets  []string   `json:"targets"`
		Tools    []string   `json:"tools"`
		Model    string     `json:"model"`
		Origin   string     `json:"origin"`
		Budget   struct {
			DailyTokens int64 `json:"daily_tokens"`
		} `json:"budget"`
	} `json:"job"`
	State struct {
		LastRunAt    *time.Time `json:"last_run_at"`
		LastOutcome  string     `json:"last_outcome"`
		LastReason   string     `json:"last_reason"`
		LastError    string     `json:"last_error"`
		Paused       bool       `json:"paused"`
		PausedReason string     `json:"paused_reason"`
		PausedBy     string     `json:"paused_by"`
		PausedUntil  *time.Time `json:"paused_until"`
		Spent        *struct {
			Day    string `json:"day"`
			Tokens int64  `json:"tokens"`
		} `json:"spent"`
	} `json:"state"`
	Status string     `json:"status"`
	Next   *time.Time `json:"next"`
	Error  string     `json:"error"`
}

// overview is the data of the overview page.
type overview struct {
	Ready       bool
	NotReady    string
	Parts       []part
	Heartbeat   *heartbeatStatus
	HeartbeatEr string
	Outcomes    []outcomeCount
	RunsErr     string
	Failed      int
	FailedErr   string
	Waiting     int // approvals pending; -1 when the server runs none
	// TokensToday are the model tokens of today's runs (UTC), per model.
	TokensToday []usage.Record
	TokensTotal int64
	TokensErr   string
	// Budgets counts the daily token budgets; Watch are those paused by
	// their budget or at 80% of it or more.
	Budgets    int
	Watch      []budgetRow
	BudgetsErr string
}

type part struct{ Name, State string }

type outcomeCount struct {
	Outcome string
	Count   uint64
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request, v *view) {
	ctx := r.Context()
	o := overview{}
	var ready struct {
		Status  string            `json:"status"`
		Details map[string]string `json:"details"`
	}
	if err := h.call(ctx, http.MethodGet, "/readyz", nil, &ready, nil); err != nil {
		o.NotReady = err.Error()
	} else {
		o.Ready = true
	}
	o.Parts = append(o.Parts, part{"bus", map[bool]string{true: "up", false: "down"}[o.Ready]})
	for name, st := range ready.Details {
		o.Parts = append(o.Parts, part{name, st})
	}
	sort.Slice(o.Parts[1:], func(i, j int) bool { return o.Parts[1+i].Name < o.Parts[1+j].Name })

	var hb heartbeatStatus
	switch err := h.call(ctx, http.MethodGet, "/v1/heartbeat", nil, &hb, nil); {
	case err == nil:
		o.Heartbeat = &hb
	case status(err) != http.StatusNotFound:
		o.HeartbeatEr = err.Error()
	}

	// Counted by the bus, exactly, without reading the runs.
	var counts struct {
		Counts map[string]uint64 `json:"counts"`
	}
	if err := h.call(ctx, http.MethodGet, "/v1/runs/counts?since=24h", nil, &counts, nil); err != nil {
		o.RunsErr = err.Error()
	}
	for _, out := range []string{bus.OutcomeDone, bus.OutcomeSkip, bus.OutcomeError} {
		o.Outcomes = append(o.Outcomes, outcomeCount{out, counts.Counts[out]})
	}

	var dl struct {
		Deliveries []connectors.DeadLetter `json:"deliveries"`
	}
	if err := h.call(ctx, http.MethodGet, "/v1/deliveries", nil, &dl, nil); err != nil {
		o.FailedErr = err.Error()
	}
	o.Failed = len(dl.Deliveries)
	o.Waiting = h.pendingCount(r)

	// Today's tokens against the budgets (the usage page has the detail).
	var today api.UsageReply
	if err := h.call(ctx, http.MethodGet, "/v1/usage?"+url.Values{"since": {"1d"}, "by": {"day,model"}}.Encode(), nil, &today, nil); err != nil {
		o.TokensErr = err.Error()
	}
	day := h.now().UTC().Format(time.DateOnly)
	for _, rec := range today.Usage {
		if rec.Day == day {
			o.TokensToday = append(o.TokensToday, rec)
			o.TokensTotal += rec.Total()
		}
	}
	var budgets []budgetRow
	budgets, o.BudgetsErr = h.budgets(r)
	o.Budgets = len(budgets)
	for _, b := range budgets {
		if b.Paused || b.Reason != "" || b.Percent >= 80 {
			o.Watch = append(o.Watch, b)
		}
	}
	v.Title, v.Nav, v.Data = "Overview", "overview", o
	h.render(w, http.StatusOK, "overview", v)
}

// runsPage is the data of the runs list.
type runsPage struct {
	Source, Name, Outcome, Since, Before string
	Runs                                 []runRow
	Older                                string // the next page's URL, if any
	Live                                 bool   // new runs are added as they end
	Filtered                             bool
}

var sinceChoices = map[string]bool{"": true, "1h": true, "24h": true, "7d": true}

func (h *handler) runs(w http.ResponseWriter, r *http.Request, v *view) {
	in := r.URL.Query()
	p := runsPage{Source: strings.TrimSpace(in.Get("source")), Name: strings.TrimSpace(in.Get("name")),
		Outcome: in.Get("outcome"), Since: in.Get("since"), Before: in.Get("before")}
	q := url.Values{"limit": {strconv.Itoa(pageSize)}}
	set := func(k, val string) {
		if val != "" {
			q.Set(k, val)
		}
	}
	set("source", p.Source)
	set("name", p.Name)
	set("outcome", p.Outcome)
	if p.Since == "7d" {
		set("since", "168h")
	} else if sinceChoices[p.Since] {
		set("since", p.Since)
	}
	set("before", p.Before)
	p.Filtered = p.Source != "" || p.Name != "" || p.Outcome != "" || p.Since != ""
	p.Live = p.Before == ""
	runs, err := h.listRuns(r.Context(), q)
	if err != nil {
		v.Error = "The runs could not be read: " + err.Error()
	}
	p.Runs = runs
	if len(runs) == pageSize {
		older := url.Values{}
		for _, k := range []string{"source", "name", "outcome", "since"} {
			if val := in.Get(k); val != "" {
				older.Set(k, val)
			}
		}
		older.Set("before", runs[len(runs)-1].Time.Format(time.RFC3339Nano))
		p.Older = "/runs?" + older.Encode()
	}
	v.Title, v.Nav, v.Data = "Runs", "runs", p
	code := http.StatusOK
	if status(err) == http.StatusBadRequest {
		code = http.StatusBadRequest
	}
	h.render(w, code, "runs", v)
}

// runPage is the data of one run's page.
type runPage struct {
	Run        runRow
	Deliveries []delivery
}

type delivery struct {
	bus.Event
	Outcome string
	Result  connectors.Result
}

func (h *handler) run(w http.ResponseWriter, r *http.Request, v *view) {
	var body struct {
		Run        json.RawMessage   `json:"run"`
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	v.Title, v.Nav = "Run", "runs"
	if err := h.call(r.Context(), http.MethodGet, "/v1/runs/"+url.PathEscape(r.PathValue("id")), nil, &body, nil); err != nil {
		v.Error = err.Error()
		st := status(err)
		if st == 0 {
			st = http.StatusInternalServerError
		}
		h.render(w, st, "error", v)
		return
	}
	rows := decodeRuns([]json.RawMessage{body.Run})
	if len(rows) == 0 {
		v.Error = "the run's event is not a run"
		h.render(w, http.StatusInternalServerError, "error", v)
		return
	}
	p := runPage{Run: rows[0]}
	for _, raw := range body.Deliveries {
		var d delivery
		if json.Unmarshal(raw, &d.Event) != nil || d.DecodeData(&d.Result) != nil {
			continue
		}
		d.Outcome = d.Type[strings.LastIndex(d.Type, ".")+1:]
		p.Deliveries = append(p.Deliveries, d)
	}
	v.Title, v.Data = fmt.Sprintf("Run: %s %s", p.Run.Result.Source, p.Run.Result.Name), p
	h.render(w, http.StatusOK, "run", v)
}

// jobsPage is the data of the jobs list.
type jobsPage struct {
	Jobs []job
	Next string // the next page's URL, if any
}

var nextLink = regexp.MustCompile(`<[^>]*[?&]after=([^&>]+)[^>]*>;\s*rel="next"`)

func (h *handler) jobs(w http.ResponseWriter, r *http.Request, v *view) {
	q := url.Values{"limit": {"100"}}
	if after := r.URL.Query().Get("after"); after != "" {
		q.Set("after", after)
	}
	var p jobsPage
	var hdr http.Header
	v.Title, v.Nav = "Jobs", "jobs"
	if err := h.call(r.Context(), http.MethodGet, "/v1/jobs?"+q.Encode(), nil, &p.Jobs, &hdr); err != nil {
		if status(err) == http.StatusNotFound || status(err) == http.StatusUnauthorized {
			v.Error = "Cron is not running in this server."
		} else {
			v.Error = "The jobs could not be read: " + err.Error()
		}
	}
	if m := nextLink.FindStringSubmatch(hdr.Get("Link")); m != nil {
		after, _ := url.QueryUnescape(m[1])
		p.Next = "/jobs?" + url.Values{"after": {after}}.Encode()
	}
	v.Data = p
	h.render(w, http.StatusOK, "jobs", v)
}

// jobActions are the forms of the jobs page and the API call each makes.
var jobActions = map[string]struct{ method, verb, done string }{
	"run":    {http.MethodPost, "/run", "started"},
	"pause":  {http.MethodPost, "/pause", "paused"},
	"resume": {http.MethodPost, "/resume", "resumed"},
	"delete": {http.MethodDelete, "", "deleted"},
}

func (h *handler) jobAction(w http.ResponseWriter, r *http.Request, _ *session) {
	a, ok := jobActions[r.PathValue("action")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	id := r.PathValue("id")
	err := h.call(r.Context(), a.method, "/v1/jobs/"+url.PathEscape(id)+a.verb, nil, nil, nil)
	h.flash(r, err, fmt.Sprintf("Job %s %s.", id, a.done))
	back(w, r, "/jobs")
}

// flash leaves the outcome of a change for the next page.
func (h *handler) flash(r *http.Request, err error, ok string) {
	if err != nil {
		ok = "Refused: " + err.Error()
	}
	h.sessions.setFlash(r, ok)
}

// heartbeatPage is the data of the heartbeat page.
type heartbeatPage struct {
	Status    *heartbeatStatus
	History   []agentwork.Record
	Checklist *checklistShown // checklist.go
}

func (h *handler) heartbeat(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Heartbeat", "heartbeat"
	var p heartbeatPage
	var hb heartbeatStatus
	switch err := h.call(r.Context(), http.MethodGet, "/v1/heartbeat", nil, &hb, nil); {
	case err == nil:
		p.Status = &hb
		var hist struct {
			Runs []agentwork.Record `json:"runs"`
		}
		if err := h.call(r.Context(), http.MethodGet, "/v1/heartbeat/history?limit=20", nil, &hist, nil); err != nil {
			v.Error = "The history could not be read: " + err.Error()
		}
		p.History = hist.Runs
		p.Checklist = new(h.heartbeatChecklist(r.Context(), v.Admin))
		if !v.Admin && hb.Checklist != "" {
			hb.Checklist = filepath.Base(hb.Checklist)
		}
	case status(err) != http.StatusNotFound:
		v.Error = "The heartbeat could not be read: " + err.Error()
	}
	v.Data = p
	h.render(w, http.StatusOK, "heartbeat", v)
}

var heartbeatActions = map[string]string{"wake": "woken: a run starts now", "pause": "paused", "resume": "resumed"}

func (h *handler) heartbeatAction(w http.ResponseWriter, r *http.Request, _ *session) {
	action := r.PathValue("action")
	done, ok := heartbeatActions[action]
	if !ok {
		http.NotFound(w, r)
		return
	}
	var body any
	if reason := strings.TrimSpace(r.PostFormValue("reason")); action == "pause" && reason != "" {
		body = map[string]string{"reason": reason}
	}
	err := h.call(r.Context(), http.MethodPost, "/v1/heartbeat/"+action, body, nil, nil)
	h.flash(r, err, "Heartbeat "+done+".")
	back(w, r, "/heartbeat")
}

// deliveriesPage is the data of the failed deliveries page.
type deliveriesPage struct {
	Deliveries []connectors.DeadLetter
}

func (h *handler) deliveries(w http.ResponseWriter, r *http.Request, v *view) {
	var body struct {
		Deliveries []connectors.DeadLetter `json:"deliveries"`
	}
	v.Title, v.Nav = "Failed deliveries", "deliveries"
	if err := h.call(r.Context(), http.MethodGet, "/v1/deliveries", nil, &body, nil); err != nil {
		v.Error = "The failed deliveries could not be read: " + err.Error()
	}
	v.Data = deliveriesPage{Deliveries: body.Deliveries}
	h.render(w, http.StatusOK, "deliveries", v)
}

func (h *handler) retryDelivery(w http.ResponseWriter, r *http.Request, _ *session) {
	id := r.PathValue("id")
	err := h.call(r.Context(), http.MethodPost, "/v1/deliveries/"+url.PathEscape(id)+"/retry", nil, nil, nil)
	h.flash(r, err, "Queued again: "+id+".")
	back(w, r, "/deliveries")
}

// retryAll queues every failed delivery again, one API call each; those
// whose retry is already queued are left alone.
func (h *handler) retryAll(w http.ResponseWriter, r *http.Request, _ *session) {
	var body struct {
		Deliveries []connectors.DeadLetter `json:"deliveries"`
	}
	err := h.call(r.Context(), http.MethodGet, "/v1/deliveries", nil, &body, nil)
	queued := 0
	var errs []error
	for _, d := range body.Deliveries {
		if d.Pending() {
			continue
		}
		switch e := h.call(r.Context(), http.MethodPost, "/v1/deliveries/"+url.PathEscape(d.Notification.ID)+"/retry", nil, nil, nil); {
		case e == nil:
			queued++
		case status(e) == http.StatusConflict:
			// a retry is queued already
		default:
			errs = append(errs, e)
		}
	}
	if err == nil {
		err = errors.Join(errs...)
	}
	h.flash(r, err, fmt.Sprintf("Queued again: %d failed deliveries.", queued))
	back(w, r, "/deliveries")
}
