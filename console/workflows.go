package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentwork/agentwork/workflow"
)

// workflowRunsPageSize is the runs of one page of the workflow runs list.
const workflowRunsPageSize = 25

// maxWorkflowRuns is the most runs GET /v1/workflow-runs answers: the
// list pages up to it.
const maxWorkflowRuns = 1000

// workflowsPage is the data of the workflows page: the definitions and
// their runs.
type workflowsPage struct {
	Defs            []workflow.Summary
	Workflow        string // the runs' filters
	Status          string
	Runs            []workflow.Run
	Page            int
	Newer, Older    string
	Off             bool // the server runs no workflows
	Filtered        bool
	Statuses        []string
	DefsErr, RunErr string
	// Nonces are the run forms' nonces by workflow (the one-button form
	// of a workflow without inputs).
	Nonces map[string]string
}

var workflowStatuses = []string{"pending", "running", "waiting", "done", "failed", "cancelled", "timed_out"}

func (h *handler) workflows(w http.ResponseWriter, r *http.Request, v *view) {
	in := r.URL.Query()
	p := workflowsPage{Workflow: strings.TrimSpace(in.Get("workflow")), Status: in.Get("status"), Page: 1, Statuses: workflowStatuses}
	if n, err := strconv.Atoi(in.Get("page")); err == nil && n > 1 && n*workflowRunsPageSize <= maxWorkflowRuns {
		p.Page = n
	}
	p.Filtered = p.Workflow != "" || p.Status != ""
	v.Title, v.Nav = "Workflows", "workflows"
	if err := h.call(r.Context(), http.MethodGet, "/v1/workflows", nil, &p.Defs, nil); err != nil {
		if status(err) == http.StatusNotFound {
			p.Off = true
			v.Data = p
			h.render(w, http.StatusOK, "workflows", v)
			return
		}
		p.DefsErr = "The workflows could not be read: " + err.Error()
	}
	p.Nonces = map[string]string{}
	for _, d := range p.Defs {
		if len(d.Inputs) == 0 && v.Write {
			p.Nonces[d.Name] = randomToken()
		}
	}
	q := url.Values{"limit": {strconv.Itoa(min(p.Page*workflowRunsPageSize+1, maxWorkflowRuns))}}
	if p.Workflow != "" {
		q.Set("workflow", p.Workflow)
	}
	if p.Status != "" {
		q.Set("status", p.Status)
	}
	var runs []workflow.Run
	if err := h.call(r.Context(), http.MethodGet, "/v1/workflow-runs?"+q.Encode(), nil, &runs, nil); err != nil {
		p.RunErr = "The runs could not be read: " + err.Error()
	}
	from := (p.Page - 1) * workflowRunsPageSize
	link := func(page int) string {
		l := url.Values{}
		if p.Workflow != "" {
			l.Set("workflow", p.Workflow)
		}
		if p.Status != "" {
			l.Set("status", p.Status)
		}
		if page > 1 {
			l.Set("page", strconv.Itoa(page))
		}
		return strings.TrimSuffix("/workflows?"+l.Encode(), "?")
	}
	if len(runs) > from+workflowRunsPageSize && (p.Page+1)*workflowRunsPageSize <= maxWorkflowRuns {
		p.Older = link(p.Page + 1)
	}
	if len(runs) > from+workflowRunsPageSize {
		runs = runs[:from+workflowRunsPageSize]
	}
	if from < len(runs) {
		p.Runs = runs[from:]
	}
	if p.Page > 1 {
		p.Newer = link(p.Page - 1)
	}
	v.Data = p
	h.render(w, http.StatusOK, "workflows", v)
}

// workflowRunPage is the data of a workflow run's page.
type workflowRunPage struct {
	Run      workflow.Run
	Steps    []stepRow
	Inputs   string // the inputs as JSON
	Output   string
	Ended    bool
	Retrying bool // the run may be retried (failed, cancelled, timed out)
	StepIDs  []string
	Graph    *stepGraph // the steps drawn, nil without a definition
}

// stepRow is a step of the timeline.
type stepRow struct {
	ID, Kind, Status string
	Attempts         int
	Duration         string
	Started          time.Time
	Output           string // cut to a line
	Cut              bool
	Error            *workflow.StepError
	Approval         string
	AgentRuns        []string
	Items            int
}

func (h *handler) workflowRun(w http.ResponseWriter, r *http.Request, v *view) {
	v.Title, v.Nav = "Workflow run", "workflows"
	var run workflow.Run
	if err := h.call(r.Context(), http.MethodGet, "/v1/workflow-runs/"+url.PathEscape(r.PathValue("id")), nil, &run, nil); err != nil {
		v.Error = "The workflow run could not be read: " + err.Error()
		st := status(err)
		if st == 0 {
			st = http.StatusInternalServerError
		}
		h.render(w, st, "error", v)
		return
	}
	p := workflowRunPage{Run: run, Ended: run.Status.Ended(),
		Retrying: run.Status == workflow.RunFailed || run.Status == workflow.RunCancelled || run.Status == workflow.RunTimedOut}
	if len(run.Inputs) > 0 {
		p.Inputs = jsonText(run.Inputs)
	}
	if run.Output != nil {
		p.Output = jsonText(run.Output)
	}
	var order []string
	if run.Def != nil {
		for _, s := range run.Def.Steps {
			order = append(order, s.ID)
		}
	}
	p.StepIDs = order
	if run.Def != nil {
		p.Graph = drawSteps(run.Def.Steps, run.Steps)
	}
	for _, id := range order {
		row := stepRow{ID: id, Status: "pending"}
		if st := run.Steps[id]; st != nil {
			row.Kind, row.Status, row.Attempts, row.Error = st.Kind, string(st.Status), st.Attempt, st.Error
			row.Started, row.Approval, row.AgentRuns, row.Items = st.StartedAt, st.Approval, st.AgentRuns, len(st.Items)
			if !st.StartedAt.IsZero() {
				end := st.EndedAt
				if end.IsZero() {
					end = h.now()
				}
				if d := end.Sub(st.StartedAt); d >= 0 {
					row.Duration = formatMS(float64(d.Milliseconds()))
				}
			}
			if st.Output != nil {
				row.Output = cut(jsonText(st.Output), 120)
				row.Cut = st.Cut
			}
		}
		p.Steps = append(p.Steps, row)
	}
	v.Title, v.Data = fmt.Sprintf("Workflow run: %s", run.Workflow), p
	h.render(w, http.StatusOK, "workflow_run", v)
}

// jsonText is v as JSON text (a string as itself).
func jsonText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // the template escapes; the text reads as sent
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(buf.String(), "\n")
}

// workflowRunAction cancels a run (with the form's reason) or retries it
// from a step (the form's from; "": where it failed), through the API.
func (h *handler) workflowRunAction(w http.ResponseWriter, r *http.Request, _ *session) {
	id := r.PathValue("id")
	var body map[string]string
	var done string
	switch r.PathValue("action") {
	case "cancel":
		reason := strings.TrimSpace(r.PostFormValue("reason"))
		if reason == "" {
			reason = "cancelled in the console"
		}
		body, done = map[string]string{"reason": reason}, "Cancelling the run: it ends once its steps in flight stop."
	case "retry":
		from := strings.TrimSpace(r.PostFormValue("from"))
		body, done = map[string]string{"from": from}, "Retrying the run from the step where it failed."
		if from != "" {
			done = "Retrying the run from the step " + from + "."
		}
	default:
		http.NotFound(w, r)
		return
	}
	err := h.call(r.Context(), http.MethodPost, "/v1/workflow-runs/"+url.PathEscape(id)+"/"+r.PathValue("action"), body, nil, nil)
	h.flash(r, err, done)
	http.Redirect(w, r, "/workflow-runs/"+url.PathEscape(id), http.StatusSeeOther)
}
