package mcpserver

import (
	"encoding/json"
	"time"
)

// Job is a cron job with its state, as the tools show it.
type Job struct {
	ID       string     `json:"id"`
	Name     string     `json:"name,omitempty"`
	Status   string     `json:"status" jsonschema:"active, paused, disabled, expired, completed or invalid"`
	Schedule string     `json:"schedule,omitempty" jsonschema:"the cron expression or @every <duration>"`
	At       *time.Time `json:"at,omitempty" jsonschema:"the one tick of a one-shot job"`
	Timezone string     `json:"timezone,omitempty"`
	Prompt   string     `json:"prompt"`
	Targets  []string   `json:"targets,omitempty"`
	Model    string     `json:"model,omitempty"`
	Tools    []string   `json:"tools,omitempty"`
	// Origin is config, api, agent, workflow or mcp; CreatedBy its creator.
	Origin              string     `json:"origin,omitempty"`
	CreatedBy           string     `json:"created_by,omitempty"`
	Next                *time.Time `json:"next,omitempty"`
	LastRunAt           *time.Time `json:"last_run_at,omitempty"`
	LastRunID           string     `json:"last_run_id,omitempty"`
	LastOutcome         string     `json:"last_outcome,omitempty"`
	LastReason          string     `json:"last_reason,omitempty"`
	LastError           string     `json:"last_error,omitempty"`
	Runs                int        `json:"runs"`
	ConsecutiveFailures int        `json:"consecutive_failures"`
	PausedReason        string     `json:"paused_reason,omitempty"`
	Error               string     `json:"error,omitempty" jsonschema:"why an invalid job cannot be scheduled"`
}

// jobStatus is a job as the jobs API answers it.
type jobStatus struct {
	Job struct {
		ID       string     `json:"id"`
		Name     string     `json:"name"`
		Schedule string     `json:"schedule"`
		At       *time.Time `json:"at"`
		Timezone string     `json:"timezone"`
		Prompt   string     `json:"prompt"`
		Targets  []string   `json:"targets"`
		Model    string     `json:"model"`
		Tools    []string   `json:"tools"`
		Origin   string     `json:"origin"`
		Workflow string     `json:"workflow"`
		Creator  *struct {
			Source string `json:"source"`
			Name   string `json:"name"`
		} `json:"creator"`
	} `json:"job"`
	State struct {
		LastRunAt           *time.Time `json:"last_run_at"`
		LastRunID           string     `json:"last_run_id"`
		LastOutcome         string     `json:"last_outcome"`
		LastReason          string     `json:"last_reason"`
		LastError           string     `json:"last_error"`
		Runs                int        `json:"runs"`
		ConsecutiveFailures int        `json:"consecutive_failures"`
		PausedReason        string     `json:"paused_reason"`
	} `json:"state"`
	Status string     `json:"status"`
	Next   *time.Time `json:"next"`
	Error  string     `json:"error"`
}

func (st jobStatus) job() Job {
	j := st.Job
	out := Job{ID: j.ID, Name: j.Name, Status: st.Status, Schedule: j.Schedule, At: j.At, Timezone: j.Timezone, Prompt: j.Prompt,
		Targets: j.Targets, Model: j.Model, Tools: j.Tools, Origin: j.Origin, Next: st.Next, Error: st.Error,
		LastRunAt: st.State.LastRunAt, LastRunID: st.State.LastRunID, LastOutcome: st.State.LastOutcome, LastReason: st.State.LastReason,
		LastError: st.State.LastError, Runs: st.State.Runs, ConsecutiveFailures: st.State.ConsecutiveFailures, PausedReason: st.State.PausedReason}
	switch {
	case j.Workflow != "":
		out.CreatedBy = "workflow " + j.Workflow
	case j.Creator != nil && j.Origin == "mcp":
		out.CreatedBy = j.Creator.Name
	case j.Creator != nil:
		out.CreatedBy = j.Creator.Source + "/" + j.Creator.Name
	}
	return out
}

// Run is one run (of the heartbeat, a cron job, a task, a workflow's agent
// step) as its outcome event tells it.
type Run struct {
	// EventID is the outcome event's id; RunID the run's; RequestID the
	// request's that caused it (what run_job and send_task answer).
	EventID   string    `json:"event_id"`
	RunID     string    `json:"run_id"`
	RequestID string    `json:"request_id,omitempty"`
	Time      time.Time `json:"time" jsonschema:"when the run ended"`
	Source    string    `json:"source"`
	Name      string    `json:"name"`
	Outcome   string    `json:"outcome" jsonschema:"done, skip or error"`
	// Reason and Detail say why a run was skipped.
	Reason string `json:"reason,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Class and Error say why a run failed.
	Class string `json:"class,omitempty"`
	Error string `json:"error,omitempty"`
	// Text is the notification sent; Targets where; Reply the model's answer.
	Text         string   `json:"text,omitempty"`
	Targets      []string `json:"targets,omitempty"`
	Reply        string   `json:"reply,omitempty"`
	Model        string   `json:"model,omitempty"`
	InputTokens  int      `json:"input_tokens,omitempty"`
	OutputTokens int      `json:"output_tokens,omitempty"`
	ToolCalls    int      `json:"tool_calls,omitempty" jsonschema:"how many tool calls the run made (get_run lists them)"`
	DurationMS   int64    `json:"duration_ms"`
	Manual       bool     `json:"manual,omitempty"`
}

// event is a run or delivery event as the API answers it.
type event struct {
	ID          string          `json:"id"`
	Time        time.Time       `json:"time"`
	RunID       string          `json:"runid"`
	CausationID string          `json:"causationid"`
	Data        json.RawMessage `json:"data"`
}

type result struct {
	Source     string           `json:"source"`
	Name       string           `json:"name"`
	Outcome    string           `json:"outcome"`
	Reason     string           `json:"reason"`
	Detail     string           `json:"detail"`
	Class      string           `json:"class"`
	Error      string           `json:"error"`
	Text       string           `json:"text"`
	Targets    []string         `json:"targets"`
	Reply      string           `json:"reply"`
	Model      string           `json:"model"`
	DurationMS int64            `json:"duration_ms"`
	Manual     bool             `json:"manual"`
	ToolCalls  []map[string]any `json:"tool_calls"`
	Usage      *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
}

func (e event) run() (Run, result) {
	var r result
	_ = json.Unmarshal(e.Data, &r)
	out := Run{EventID: e.ID, RunID: e.RunID, RequestID: e.CausationID, Time: e.Time, Source: r.Source, Name: r.Name, Outcome: r.Outcome,
		Reason: r.Reason, Detail: r.Detail, Class: r.Class, Error: r.Error, Text: r.Text, Targets: r.Targets, Reply: r.Reply,
		Model: r.Model, ToolCalls: len(r.ToolCalls), DurationMS: r.DurationMS, Manual: r.Manual}
	if r.Usage != nil {
		out.InputTokens, out.OutputTokens = r.Usage.InputTokens, r.Usage.OutputTokens
	}
	return out, r
}

// Delivery is what became of one notification of a run at one connector.
type Delivery struct {
	Time      time.Time `json:"time"`
	Connector string    `json:"connector"`
	Target    string    `json:"target,omitempty"`
	Outcome   string    `json:"outcome" jsonschema:"delivered or failed"`
	Attempts  int       `json:"attempts"`
	Error     string    `json:"error,omitempty"`
}

func (e event) delivery() Delivery {
	var r struct {
		Notification struct {
			Target string `json:"target"`
		} `json:"notification"`
		Connector string `json:"connector"`
		Attempts  int    `json:"attempts"`
		Error     string `json:"error"`
	}
	_ = json.Unmarshal(e.Data, &r)
	outcome := "delivered"
	if r.Error != "" {
		outcome = "failed"
	}
	return Delivery{Time: e.Time, Connector: r.Connector, Target: r.Notification.Target, Outcome: outcome, Attempts: r.Attempts, Error: r.Error}
}
