package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/workflow"
)

// MaxWait is the longest a tool's wait_seconds may be.
const MaxWait = 300

// Inputs and outputs of the tools. Unknown fields are refused (their
// schemas do not allow additional properties).

type (
	// None is the input of a tool without arguments.
	None struct{}

	IDIn struct {
		ID string `json:"id" jsonschema:"the id"`
	}

	JobsIn struct {
		After string `json:"after,omitempty" jsonschema:"the jobs with an id after this one: the next of a previous answer"`
		Limit int    `json:"limit,omitempty" jsonschema:"at most this many, by id (default 100, at most 500)"`
	}
	JobsOut struct {
		Jobs []Job `json:"jobs"`
		// Next, when set, is the after of the next page.
		Next string `json:"next,omitempty" jsonschema:"more jobs follow: pass this as after for the next page"`
	}

	RunsIn struct {
		Source  string `json:"source,omitempty" jsonschema:"only runs of this source: heartbeat, cron, task, workflow or a task's source"`
		Name    string `json:"name,omitempty" jsonschema:"only runs of this name (a cron job's id, a task's name); a glob such as report-* works"`
		Outcome string `json:"outcome,omitempty" jsonschema:"only runs with this outcome: done, skip or error"`
		Since   string `json:"since,omitempty" jsonschema:"only runs that ended since then: a duration back from now (1h, 30m) or an RFC 3339 time"`
		Limit   int    `json:"limit,omitempty" jsonschema:"at most this many, newest first (default 20, at most 1000)"`
	}
	RunsOut struct {
		Runs []Run `json:"runs"`
	}

	RunIn struct {
		ID string `json:"id" jsonschema:"a run id, or the request id that run_job or send_task answered"`
	}
	RunOut struct {
		Run Run `json:"run"`
		// ToolCalls are the run's tool calls: name, outcome, arguments
		// and results (secrets cut out).
		ToolCalls  []map[string]any `json:"tool_calls"`
		Deliveries []Delivery       `json:"deliveries"`
	}

	HeartbeatOut struct {
		Name                string     `json:"name"`
		Enabled             bool       `json:"enabled"`
		Every               string     `json:"every"`
		ActiveHours         string     `json:"active_hours"`
		ActiveNow           bool       `json:"active_now"`
		Targets             []string   `json:"targets,omitempty"`
		Paused              bool       `json:"paused,omitempty"`
		PausedReason        string     `json:"paused_reason,omitempty"`
		NextFire            *time.Time `json:"next_fire,omitempty"`
		LastRunAt           *time.Time `json:"last_run_at,omitempty"`
		LastOutcome         string     `json:"last_outcome,omitempty"`
		LastReason          string     `json:"last_reason,omitempty"`
		LastError           string     `json:"last_error,omitempty"`
		ConsecutiveFailures int        `json:"consecutive_failures"`
	}

	WorkflowsOut struct {
		Workflows []WorkflowInfo `json:"workflows"`
	}
	WorkflowInfo struct {
		Name        string   `json:"name"`
		Description string   `json:"description,omitempty"`
		Inputs      []string `json:"inputs,omitempty" jsonschema:"the names of its inputs"`
		Triggers    []string `json:"triggers,omitempty" jsonschema:"webhook, cron, event"`
		Steps       int      `json:"steps"`
	}

	WorkflowRunOut struct {
		ID         string         `json:"id"`
		Workflow   string         `json:"workflow"`
		Status     string         `json:"status" jsonschema:"pending, running, waiting, done, failed, cancelled or timed_out"`
		Inputs     map[string]any `json:"inputs,omitempty"`
		Output     any            `json:"output,omitempty"`
		Error      string         `json:"error,omitempty"`
		FailedStep string         `json:"failed_step,omitempty"`
		Steps      []StepInfo     `json:"steps"`
		CreatedAt  time.Time      `json:"created_at"`
		EndedAt    *time.Time     `json:"ended_at,omitempty"`
	}
	StepInfo struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}

	ApprovalsIn struct {
		State string `json:"state,omitempty" jsonschema:"only approvals in this state: pending (the default), approved, rejected, expired, cancelled or all"`
		Limit int    `json:"limit,omitempty" jsonschema:"at most this many, newest first (default 50)"`
	}
	ApprovalsOut struct {
		Approvals []ApprovalInfo `json:"approvals"`
	}
	ApprovalInfo struct {
		ID        string     `json:"id"`
		State     string     `json:"state"`
		Question  string     `json:"question"`
		Tool      string     `json:"tool,omitempty"`
		Args      string     `json:"args,omitempty"`
		Run       string     `json:"run,omitempty"`
		Source    string     `json:"source,omitempty"`
		Name      string     `json:"name,omitempty"`
		Approvers []string   `json:"approvers,omitempty" jsonschema:"who may decide (token:<name> for an MCP token); empty: anyone who may decide approvals"`
		Deadline  time.Time  `json:"deadline"`
		OnTimeout string     `json:"on_timeout"`
		DecidedBy string     `json:"decided_by,omitempty"`
		Verdict   string     `json:"verdict,omitempty"`
		DecidedAt *time.Time `json:"decided_at,omitempty"`
	}

	MemoryIn struct {
		Doc string `json:"doc,omitempty" jsonschema:"long (long-term memory), today, yesterday, a day as YYYY-MM-DD, or checklist (the heartbeat's: needs the kind jobs); default long"`
	}
	MemoryOut struct {
		Doc      string `json:"doc"`
		Revision uint64 `json:"revision"`
		Text     string `json:"text"`
	}

	UsageIn struct {
		Since  string `json:"since,omitempty" jsonschema:"how far back: 7d (the default), 24h, or a day YYYY-MM-DD"`
		Source string `json:"source,omitempty"`
		Name   string `json:"name,omitempty"`
		By     string `json:"by,omitempty" jsonschema:"the dimensions to keep, comma-separated: day, source, name, model (default all)"`
	}
	UsageOut struct {
		Usage []UsageRow `json:"usage"`
	}
	UsageRow struct {
		Day          string `json:"day,omitempty"`
		Source       string `json:"source,omitempty"`
		Name         string `json:"name,omitempty"`
		Model        string `json:"model,omitempty"`
		Runs         int64  `json:"runs"`
		InputTokens  int64  `json:"input_tokens"`
		OutputTokens int64  `json:"output_tokens"`
	}

	CreateJobIn struct {
		ID     string `json:"id" jsonschema:"the job's id: 1-64 of a-z, 0-9, _ and -"`
		Name   string `json:"name,omitempty" jsonschema:"a title"`
		Prompt string `json:"prompt" jsonschema:"what the model is asked at each run"`
		// One of Cron, Every, At, In.
		Cron           string   `json:"cron,omitempty" jsonschema:"a cron expression (5 fields, or 6 with seconds first), e.g. 0 2 * * * for every night at 2"`
		Every          string   `json:"every,omitempty" jsonschema:"an interval such as 90m or 24h"`
		At             string   `json:"at,omitempty" jsonschema:"one run at this RFC 3339 time"`
		In             string   `json:"in,omitempty" jsonschema:"one run this long from now, e.g. 5s, 10m, 2h"`
		Timezone       string   `json:"timezone,omitempty" jsonschema:"the IANA time zone of a cron expression, e.g. Europe/Berlin (default UTC)"`
		Targets        []string `json:"targets,omitempty" jsonschema:"where the result goes: connector names, each optionally with :destination (default: the configured targets)"`
		Model          string   `json:"model,omitempty" jsonschema:"a model name of the config (default: runner.model)"`
		Tools          []string `json:"tools,omitempty" jsonschema:"the tools the runs may use, names or globs (default: runner.tools); a token may name only those of its grant"`
		Deliver        string   `json:"deliver,omitempty" jsonschema:"auto (default), reply, notify or none"`
		DeleteAfterRun bool     `json:"delete_after_run,omitempty" jsonschema:"delete a one-shot job once it ran"`
	}
	JobOut struct {
		Job Job `json:"job"`
	}

	UpdateJobIn struct {
		ID       string    `json:"id" jsonschema:"the job to change"`
		Name     *string   `json:"name,omitempty"`
		Prompt   *string   `json:"prompt,omitempty"`
		Cron     string    `json:"cron,omitempty" jsonschema:"a new schedule: a cron expression (set at most one of cron, every, at, in)"`
		Every    string    `json:"every,omitempty"`
		At       string    `json:"at,omitempty"`
		In       string    `json:"in,omitempty"`
		Timezone *string   `json:"timezone,omitempty"`
		Targets  *[]string `json:"targets,omitempty"`
		Model    *string   `json:"model,omitempty"`
		Tools    *[]string `json:"tools,omitempty"`
		Deliver  *string   `json:"deliver,omitempty"`
		Enabled  *bool     `json:"enabled,omitempty"`
	}

	PauseIn struct {
		ID     string `json:"id" jsonschema:"the job to pause"`
		Reason string `json:"reason,omitempty" jsonschema:"shown in its status"`
	}

	DeletedOut struct {
		Deleted string `json:"deleted"`
	}

	RunJobIn struct {
		ID             string `json:"id" jsonschema:"the job to run now (its schedule does not move)"`
		IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"the same key again runs nothing more and answers the first run"`
		WaitSeconds    int    `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 300) for the outcome"`
	}
	// StartedOut is what run_job and send_task answer.
	StartedOut struct {
		RequestID string `json:"request_id" jsonschema:"get_run takes it"`
		Duplicate bool   `json:"duplicate,omitempty" jsonschema:"the idempotency key was used before: nothing new was started"`
		// Finished says whether the outcome is in Run; false with a wait
		// means the run was still going: get_run with request_id later.
		Finished bool   `json:"finished"`
		Status   string `json:"status" jsonschema:"queued, still running, or the outcome: done, skip, error"`
		Run      *Run   `json:"run,omitempty"`
	}

	SendTaskIn struct {
		Prompt         string            `json:"prompt" jsonschema:"the work to do"`
		Name           string            `json:"name,omitempty" jsonschema:"the task's name (default default): 1-64 of a-z, 0-9, _ and -"`
		Source         string            `json:"source,omitempty" jsonschema:"the request source (default task)"`
		Targets        []string          `json:"targets,omitempty"`
		Deliver        string            `json:"deliver,omitempty" jsonschema:"auto (default), reply, notify or none"`
		Metadata       map[string]string `json:"metadata,omitempty"`
		IdempotencyKey string            `json:"idempotency_key,omitempty" jsonschema:"the same key and body again queue nothing more"`
		WaitSeconds    int               `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 300) for the outcome"`
	}

	StartWorkflowIn struct {
		Name           string         `json:"name" jsonschema:"the workflow (list_workflows)"`
		Inputs         map[string]any `json:"inputs,omitempty"`
		IdempotencyKey string         `json:"idempotency_key,omitempty" jsonschema:"the same key again starts nothing more and answers the first run"`
		WaitSeconds    int            `json:"wait_seconds,omitempty" jsonschema:"wait up to this many seconds (at most 300) for the run to end"`
	}
	WorkflowStartedOut struct {
		ID        string          `json:"id"`
		Duplicate bool            `json:"duplicate,omitempty"`
		Finished  bool            `json:"finished"`
		Status    string          `json:"status" jsonschema:"the run's status; still running (or waiting) when the wait ended first"`
		Run       *WorkflowRunOut `json:"run,omitempty"`
	}

	CancelIn struct {
		ID     string `json:"id" jsonschema:"the workflow run"`
		Reason string `json:"reason,omitempty"`
	}

	DecideIn struct {
		ID      string `json:"id" jsonschema:"the approval (list_approvals)"`
		Verdict string `json:"verdict" jsonschema:"approve or reject"`
		Comment string `json:"comment,omitempty"`
	}
	DecideOut struct {
		Approval ApprovalInfo `json:"approval"`
	}

	AppendIn struct {
		Doc  string `json:"doc,omitempty" jsonschema:"long (the default), today, or checklist (the heartbeat's: needs the kind jobs)"`
		Text string `json:"text" jsonschema:"Markdown to add at the end of the document"`
	}

	WakeOut struct {
		Name      string `json:"name"`
		RequestID string `json:"request_id"`
	}
)

func (s *Server) addTools() {
	// Reads.
	add(s, &mcp.Tool{Name: "list_jobs", Description: "List the cron jobs with their status, schedule, next run and last outcome, by id, a page at a time (next: where the next page starts)."}, spec{kind: KindJobs}, s.listJobs)
	add(s, &mcp.Tool{Name: "get_job", Description: "Show one cron job: its schedule, prompt, targets, tools, origin and state."}, spec{kind: KindJobs}, s.getJob)
	add(s, &mcp.Tool{Name: "list_runs", Description: "List recent runs (heartbeat, cron jobs, tasks, workflow agent steps), newest first, by source, name, outcome and time."}, spec{}, s.listRuns)
	add(s, &mcp.Tool{Name: "get_run", Description: "Show one run by its run id or request id: outcome, model, tokens, tool calls, the notification and its deliveries."}, spec{}, s.getRun)
	add(s, &mcp.Tool{Name: "heartbeat_status", Description: "Show the heartbeat: interval, active hours, pause, next fire and last outcome."}, spec{kind: KindJobs}, s.heartbeatStatus)
	add(s, &mcp.Tool{Name: "list_workflows", Description: "List the workflows that can be started, with their inputs and triggers."}, spec{kind: KindWorkflows}, s.listWorkflows)
	add(s, &mcp.Tool{Name: "get_workflow_run", Description: "Show a workflow run: its status, steps, output or error."}, spec{kind: KindWorkflows}, s.getWorkflowRun)
	add(s, &mcp.Tool{Name: "list_approvals", Description: "List the approvals work waits on (pending by default), with who may decide them."}, spec{kind: KindApprovals}, s.listApprovals)
	add(s, &mcp.Tool{Name: "read_memory", Description: "Read one of the agent's memory documents as Markdown."}, spec{kind: KindMemory}, s.readMemory)
	add(s, &mcp.Tool{Name: "get_usage", Description: "Model tokens spent per day, source, name and model."}, spec{}, s.getUsage)

	// Changes.
	add(s, &mcp.Tool{Name: "create_job", Description: "Create a cron job: exactly one of cron (expression), every (interval), at (a time) or in (a delay), and the prompt."}, spec{kind: KindJobs, write: true}, s.createJob)
	add(s, &mcp.Tool{Name: "update_job", Description: "Change fields of a cron job (only those given)."}, spec{kind: KindJobs, write: true}, s.updateJob)
	add(s, &mcp.Tool{Name: "pause_job", Description: "Pause a cron job: it does not fire until resumed."}, spec{kind: KindJobs, write: true}, s.pauseJob)
	add(s, &mcp.Tool{Name: "resume_job", Description: "Resume a paused cron job from its next tick."}, spec{kind: KindJobs, write: true}, s.resumeJob)
	add(s, &mcp.Tool{Name: "delete_job", Description: "Delete a cron job (its run history stays)."}, spec{kind: KindJobs, write: true}, s.deleteJob)
	add(s, &mcp.Tool{Name: "run_job", Description: "Run a cron job now, without moving its schedule; optionally wait for the outcome."}, spec{kind: KindJobs, write: true}, s.runJob)
	add(s, &mcp.Tool{Name: "send_task", Description: "Ask the agent to do something now (a task); optionally wait for the outcome."}, spec{kind: KindTasks, write: true}, s.sendTask)
	add(s, &mcp.Tool{Name: "start_workflow", Description: "Start a workflow run with inputs; optionally wait for it to end."}, spec{kind: KindWorkflows, write: true}, s.startWorkflow)
	add(s, &mcp.Tool{Name: "cancel_workflow_run", Description: "Cancel a workflow run."}, spec{kind: KindWorkflows, write: true}, s.cancelWorkflowRun)
	add(s, &mcp.Tool{Name: "decide_approval", Description: "Approve or reject a pending approval, if you are among its approvers."}, spec{kind: KindApprovals, write: true}, s.decideApproval)
	add(s, &mcp.Tool{Name: "append_memory", Description: "Add Markdown to the end of a memory document (long-term memory by default)."}, spec{kind: KindMemory, write: true}, s.appendMemory)
	add(s, &mcp.Tool{Name: "wake_heartbeat", Description: "Run the heartbeat now."}, spec{kind: KindJobs, write: true}, s.wakeHeartbeat)
}

func esc(s string) string { return url.PathEscape(s) }

func need(field, v string) error {
	if strings.TrimSpace(v) == "" {
		return errorf(CodeInvalid, "%s is required", field)
	}
	return nil
}

// listJobs answers a page of the jobs: at 100,000 jobs the whole list
// is 50 MB, more than any assistant should be handed at once.
func (s *Server) listJobs(ctx context.Context, c Caller, in JobsIn) (JobsOut, error) {
	out := JobsOut{Jobs: []Job{}}
	switch {
	case in.Limit == 0:
		in.Limit = 100
	case in.Limit < 0 || in.Limit > 500:
		return out, errorf(CodeInvalid, "limit %d: want 1 to 500", in.Limit)
	}
	// One more than asked: whether a next page exists.
	q := url.Values{"limit": {strconv.Itoa(in.Limit + 1)}}
	if in.After != "" {
		q.Set("after", in.After)
	}
	var page []jobStatus
	if err := s.call(ctx, c, http.MethodGet, "/v1/jobs?"+q.Encode(), nil, nil, &page); err != nil {
		return out, err
	}
	more := len(page) > in.Limit
	if more {
		page = page[:in.Limit]
	}
	for _, st := range page {
		out.Jobs = append(out.Jobs, st.job())
	}
	if more && len(page) > 0 {
		out.Next = page[len(page)-1].Job.ID
	}
	return out, nil
}

func (s *Server) getJob(ctx context.Context, c Caller, in IDIn) (JobOut, error) {
	if err := need("id", in.ID); err != nil {
		return JobOut{}, err
	}
	var st jobStatus
	err := s.call(ctx, c, http.MethodGet, "/v1/jobs/"+esc(in.ID), nil, nil, &st)
	return JobOut{Job: st.job()}, err
}

func (s *Server) listRuns(ctx context.Context, c Caller, in RunsIn) (RunsOut, error) {
	q := url.Values{}
	for k, v := range map[string]string{"source": in.Source, "name": in.Name, "outcome": in.Outcome, "since": in.Since} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if in.Limit == 0 {
		in.Limit = 20
	}
	q.Set("limit", strconv.Itoa(in.Limit))
	var body struct {
		Runs []event `json:"runs"`
	}
	out := RunsOut{Runs: []Run{}}
	if err := s.call(ctx, c, http.MethodGet, "/v1/runs?"+q.Encode(), nil, nil, &body); err != nil {
		return out, err
	}
	for _, e := range body.Runs {
		r, _ := e.run()
		out.Runs = append(out.Runs, r)
	}
	return out, nil
}

// runReply is GET /v1/runs/{id}.
type runReply struct {
	Run        event   `json:"run"`
	Deliveries []event `json:"deliveries"`
}

func (s *Server) getRun(ctx context.Context, c Caller, in RunIn) (RunOut, error) {
	if err := need("id", in.ID); err != nil {
		return RunOut{}, err
	}
	var rr runReply
	if err := s.call(ctx, c, http.MethodGet, "/v1/runs/"+esc(in.ID), nil, nil, &rr); err != nil {
		return RunOut{}, err
	}
	return rr.out(), nil
}

func (rr runReply) out() RunOut {
	run, res := rr.Run.run()
	out := RunOut{Run: run, ToolCalls: res.ToolCalls, Deliveries: []Delivery{}}
	if out.ToolCalls == nil {
		out.ToolCalls = []map[string]any{}
	}
	for _, d := range rr.Deliveries {
		out.Deliveries = append(out.Deliveries, d.delivery())
	}
	return out
}

func (s *Server) heartbeatStatus(ctx context.Context, c Caller, _ None) (HeartbeatOut, error) {
	var out HeartbeatOut
	err := s.call(ctx, c, http.MethodGet, "/v1/heartbeat", nil, nil, &out)
	return out, err
}

func (s *Server) wakeHeartbeat(ctx context.Context, c Caller, _ None) (WakeOut, error) {
	var r struct {
		Name string `json:"name"`
		ID   string `json:"id"`
	}
	err := s.call(ctx, c, http.MethodPost, "/v1/heartbeat/wake", nil, nil, &r)
	return WakeOut{Name: r.Name, RequestID: r.ID}, err
}

func (s *Server) listWorkflows(ctx context.Context, c Caller, _ None) (WorkflowsOut, error) {
	var list []workflow.Summary
	out := WorkflowsOut{Workflows: []WorkflowInfo{}}
	if err := s.call(ctx, c, http.MethodGet, "/v1/workflows", nil, nil, &list); err != nil {
		return out, err
	}
	for _, w := range list {
		wi := WorkflowInfo{Name: w.Name, Description: w.Description, Triggers: w.Triggers, Steps: w.Steps}
		for name := range w.Inputs {
			wi.Inputs = append(wi.Inputs, name)
		}
		out.Workflows = append(out.Workflows, wi)
	}
	return out, nil
}

func workflowRunOut(r workflow.Run) WorkflowRunOut {
	out := WorkflowRunOut{ID: r.ID, Workflow: r.Workflow, Status: string(r.Status), Inputs: r.Inputs, Output: r.Output, FailedStep: r.FailedStep,
		CreatedAt: r.CreatedAt, Steps: []StepInfo{}}
	if r.Error != nil {
		out.Error = r.Error.Error()
	}
	if !r.EndedAt.IsZero() {
		out.EndedAt = &r.EndedAt
	}
	if r.Def != nil {
		for _, st := range r.Def.Steps {
			si := StepInfo{ID: st.ID, Status: "pending"}
			if ss, ok := r.Steps[st.ID]; ok && ss != nil {
				si.Status = string(ss.Status)
			}
			out.Steps = append(out.Steps, si)
		}
	}
	return out
}

func (s *Server) getWorkflowRun(ctx context.Context, c Caller, in IDIn) (WorkflowRunOut, error) {
	if err := need("id", in.ID); err != nil {
		return WorkflowRunOut{}, err
	}
	var r workflow.Run
	if err := s.call(ctx, c, http.MethodGet, "/v1/workflow-runs/"+esc(in.ID), nil, nil, &r); err != nil {
		return WorkflowRunOut{}, err
	}
	return workflowRunOut(r), nil
}

func approvalInfo(a approval.Approval) ApprovalInfo {
	out := ApprovalInfo{ID: a.ID, State: string(a.State), Question: a.Question, Tool: a.Tool, Args: a.Args, Run: a.Run, Source: a.Source, Name: a.Name,
		Approvers: a.Approvers, Deadline: a.Deadline, OnTimeout: string(a.OnTimeout)}
	if d := a.Decision; d != nil {
		out.DecidedBy, out.Verdict, out.DecidedAt = d.By, string(d.Verdict), &d.At
	}
	return out
}

func (s *Server) listApprovals(ctx context.Context, c Caller, in ApprovalsIn) (ApprovalsOut, error) {
	q := url.Values{}
	switch in.State {
	case "":
		q.Set("state", string(approval.Pending))
	case "all":
	default:
		q.Set("state", in.State)
	}
	if in.Limit == 0 {
		in.Limit = 50
	}
	q.Set("limit", strconv.Itoa(in.Limit))
	var body struct {
		Approvals []approval.Approval `json:"approvals"`
	}
	out := ApprovalsOut{Approvals: []ApprovalInfo{}}
	if err := s.call(ctx, c, http.MethodGet, "/v1/approvals?"+q.Encode(), nil, nil, &body); err != nil {
		return out, err
	}
	for _, a := range body.Approvals {
		out.Approvals = append(out.Approvals, approvalInfo(a))
	}
	return out, nil
}

func (s *Server) decideApproval(ctx context.Context, c Caller, in DecideIn) (DecideOut, error) {
	if err := need("id", in.ID); err != nil {
		return DecideOut{}, err
	}
	if in.Verdict != string(approval.Approve) && in.Verdict != string(approval.Reject) {
		return DecideOut{}, errorf(CodeInvalid, "verdict %q: want approve or reject", in.Verdict)
	}
	var body any
	if in.Comment != "" {
		body = map[string]string{"comment": in.Comment}
	}
	var a approval.Approval
	if err := s.call(ctx, c, http.MethodPost, "/v1/approvals/"+esc(in.ID)+"/"+in.Verdict, nil, body, &a); err != nil {
		if e, ok := err.(*Error); ok && e.Code == CodeForbidden {
			e.Message += fmt.Sprintf("; you decide as %q: only the approvers it names may decide it (or the admin)", api0(c))
		}
		return DecideOut{}, err
	}
	return DecideOut{Approval: approvalInfo(a)}, nil
}

// api0 is how c decides an approval.
func api0(c Caller) string {
	if c.admin() {
		return approval.ByAdmin
	}
	return approval.ByCredential(c.Credential)
}

// docKind is the kind of work of memory document doc: the heartbeat's
// checklist (checklist, HEARTBEAT.md, as the memory store resolves them)
// is its instructions, kind jobs; the rest is memory.
func docKind(doc string) string {
	switch strings.ToLower(strings.TrimSpace(doc)) {
	case "checklist", "heartbeat.md":
		return KindJobs
	}
	return KindMemory
}

func (in MemoryIn) kind() string { return docKind(in.Doc) }
func (in AppendIn) kind() string { return docKind(in.Doc) }

func (s *Server) readMemory(ctx context.Context, c Caller, in MemoryIn) (MemoryOut, error) {
	if in.Doc == "" {
		in.Doc = "long"
	}
	var d struct {
		Name     string `json:"name"`
		Revision uint64 `json:"revision"`
		Text     string `json:"text"`
	}
	err := s.call(ctx, c, http.MethodGet, "/v1/memory/"+esc(in.Doc), nil, nil, &d)
	return MemoryOut{Doc: in.Doc, Revision: d.Revision, Text: d.Text}, err
}

func (s *Server) appendMemory(ctx context.Context, c Caller, in AppendIn) (MemoryOut, error) {
	if in.Doc == "" {
		in.Doc = "long"
	}
	if err := need("text", in.Text); err != nil {
		return MemoryOut{}, err
	}
	for range 5 {
		cur, err := s.readMemory(ctx, c, MemoryIn{Doc: in.Doc})
		h := http.Header{"Content-Type": {"text/markdown"}}
		if e, ok := err.(*Error); ok && e.Code == CodeNotFound {
			h.Set("If-None-Match", "*")
		} else if err != nil {
			return MemoryOut{}, err
		} else {
			h.Set("If-Match", strconv.Quote(strconv.FormatUint(cur.Revision, 10)))
		}
		text := cur.Text
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += strings.TrimRight(in.Text, "\n") + "\n"
		status, raw, err := s.api.do(ctx, c, http.MethodPut, "/v1/memory/"+esc(in.Doc), h, []byte(text))
		if err != nil {
			return MemoryOut{}, &Error{Code: CodeUnavailable, Message: err.Error()}
		}
		if status == http.StatusPreconditionFailed {
			continue // changed meanwhile: read it again
		}
		if status/100 != 2 {
			return MemoryOut{}, problemError(status, raw)
		}
		var d struct {
			Revision uint64 `json:"revision"`
		}
		_ = json.Unmarshal(raw, &d)
		return MemoryOut{Doc: in.Doc, Revision: d.Revision, Text: text}, nil
	}
	return MemoryOut{}, errorf(CodeConflict, "memory %s kept changing while appending; try again", in.Doc)
}

func (s *Server) getUsage(ctx context.Context, c Caller, in UsageIn) (UsageOut, error) {
	q := url.Values{}
	for k, v := range map[string]string{"since": in.Since, "source": in.Source, "name": in.Name, "by": in.By} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var body struct {
		Usage []UsageRow `json:"usage"`
	}
	err := s.call(ctx, c, http.MethodGet, "/v1/usage?"+q.Encode(), nil, nil, &body)
	if body.Usage == nil {
		body.Usage = []UsageRow{}
	}
	return UsageOut{Usage: body.Usage}, err
}
