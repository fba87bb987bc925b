package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/agentwork/agentwork/bus"
)

// Summary is a workflow as lists show it.
type Summary struct {
	Name        string           `json:"name"`
	Description string           `json:"description,omitempty"`
	Inputs      map[string]Input `json:"inputs,omitempty"`
	// Triggers are the kinds of its triggers (webhook, cron, event), in
	// the order of its on list.
	Triggers []string `json:"triggers,omitempty"`
	// Steps counts its steps, those of parallel branches included.
	Steps int `json:"steps"`
}

// Summarize returns the summary of w.
func Summarize(w *Workflow) Summary {
	s := Summary{Name: w.Name, Description: w.Description, Inputs: w.Inputs}
	for _, t := range w.On {
		switch {
		case t.Webhook != nil:
			s.Triggers = append(s.Triggers, "webhook")
		case t.Cron != nil:
			s.Triggers = append(s.Triggers, "cron")
		case t.Event != nil:
			s.Triggers = append(s.Triggers, "event")
		}
	}
	w.Walk(func(string, *Step) { s.Steps++ })
	return s
}

// HasWebhook reports whether w has a webhook trigger: a webhook
// credential may start its runs (the admin token may start any).
func (w *Workflow) HasWebhook() bool {
	return slices.ContainsFunc(w.On, func(t Trigger) bool { return t.Webhook != nil })
}

// Summaries returns the summaries of the engine's workflows, by name.
func (e *Engine) Summaries() []Summary {
	var out []Summary
	for _, name := range slices.Sorted(maps.Keys(e.cfg.Definitions)) {
		out = append(out, Summarize(e.cfg.Definitions[name]))
	}
	return out
}

// Definition returns the workflow name (ErrNoWorkflow if there is none).
func (e *Engine) Definition(name string) (*Workflow, error) {
	w := e.cfg.Definitions[name]
	if w == nil {
		return nil, fmt.Errorf("%w %q (workflows: %s)", ErrNoWorkflow, name, strings.Join(e.names(), ", "))
	}
	return w, nil
}

// Service error codes (bus.ServiceError.Code; the HTTP API's problem
// codes are the same).
const (
	CodeNotFound     = "not_found"
	CodeInvalid      = "invalid"
	CodeNotRetryable = "not_retryable"
)

// ServiceError maps an error of the Engine's API to the bus.ServiceError
// the service (and, by its Status, the HTTP API) answers: 404 for an
// unknown workflow or run, 400 for bad inputs or a bad retry step, 409 for
// a run that cannot be retried, else 500.
func ServiceError(err error) *bus.ServiceError {
	var ie *InputError
	switch {
	case errors.Is(err, ErrNoWorkflow), errors.Is(err, ErrNoRun):
		return &bus.ServiceError{Status: http.StatusNotFound, Code: CodeNotFound, Detail: err.Error()}
	case errors.As(err, &ie), errors.Is(err, ErrDepth):
		return &bus.ServiceError{Status: http.StatusBadRequest, Code: CodeInvalid, Detail: err.Error()}
	case errors.Is(err, ErrNotRetryable):
		return &bus.ServiceError{Status: http.StatusConflict, Code: CodeNotRetryable, Detail: err.Error()}
	}
	if se, ok := errors.AsType[*bus.ServiceError](err); ok {
		return se
	}
	return bus.AsServiceError(err)
}

// Service verbs: the NATS request-reply API on <prefix>.api.workflow.<verb>
// (bus.Service), which the CLI uses. Requests and replies are JSON.
const (
	VerbList   = "list"   // {} → [Summary]
	VerbShow   = "show"   // {"name"} → Workflow
	VerbStart  = "start"  // {"name", "inputs", "key"} → StartResult
	VerbRuns   = "runs"   // {"workflow", "status", "limit"} → [Run]
	VerbGet    = "get"    // {"id"} → Run
	VerbCancel = "cancel" // {"id", "reason"} → Run
	VerbRetry  = "retry"  // {"id", "from", "key"} → Run
)

// ServiceRequest is the body of every verb (each reads its fields).
type ServiceRequest struct {
	Name     string         `json:"name,omitempty"`
	Inputs   map[string]any `json:"inputs,omitempty"`
	Key      string         `json:"key,omitempty"`
	Workflow string         `json:"workflow,omitempty"`
	Status   RunStatus      `json:"status,omitempty"`
	Limit    int            `json:"limit,omitempty"`
	ID       string         `json:"id,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	From     string         `json:"from,omitempty"`
}

// StartResult is the answer of a start: the run's id, and whether this start
// created it (false: the idempotency key named a run that exists).
type StartResult struct {
	ID      string `json:"id"`
	Created bool   `json:"created"`
	Run     Run    `json:"run"`
}

// Service is the workflows API on NATS, as every instance serves it.
func (e *Engine) Service() bus.Service {
	svc := bus.Service{
		Name:        bus.SourceWorkflow,
		Description: "agentwork workflows: list, show, start, runs, get, cancel, retry",
		QueueGroup:  "agentwork-workflow",
	}
	for _, verb := range []string{VerbList, VerbShow, VerbStart, VerbRuns, VerbGet, VerbCancel, VerbRetry} {
		svc.Endpoints = append(svc.Endpoints, bus.Endpoint{Verb: verb, Handle: func(ctx context.Context, body []byte) (any, error) {
			out, err := e.dispatch(ctx, verb, body)
			if err != nil {
				return nil, ServiceError(err)
			}
			return out, nil
		}})
	}
	return svc
}

func (e *Engine) dispatch(ctx context.Context, verb string, body []byte) (any, error) {
	var r ServiceRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &r); err != nil {
			return nil, &bus.ServiceError{Status: http.StatusBadRequest, Code: CodeInvalid, Detail: "request body: " + err.Error()}
		}
	}
	switch verb {
	case VerbList:
		return e.Summaries(), nil
	case VerbShow:
		return e.Definition(r.Name)
	case VerbStart:
		run, created, err := e.Start(ctx, r.Name, r.Inputs, StartOptions{IdempotencyKey: r.Key})
		if err != nil {
			return nil, err
		}
		return StartResult{ID: run.ID, Created: created, Run: run}, nil
	case VerbRuns:
		runs, err := e.List(ctx, Filter{Workflow: r.Workflow, Status: r.Status, Limit: r.Limit})
		if runs == nil {
			runs = []Run{}
		}
		return runs, err
	case VerbGet:
		return e.Get(ctx, r.ID)
	case VerbCancel:
		return e.Cancel(ctx, r.ID, r.Reason)
	case VerbRetry:
		return e.RetryRequest(ctx, r.ID, r.From, r.Key)
	}
	return nil, &bus.ServiceError{Status: http.StatusBadRequest, Code: CodeInvalid, Detail: fmt.Sprintf("unknown verb %q", verb)}
}

// RetryRequest is Retry as the APIs take it: without a key, the key is
// derived from the run's retry generation and the step, so a request
// repeated (a client that lost the answer) is one retry, while a retry of
// the run after it failed again is a new one.
// A from that is not a top-level step of the run is a 400.
func (e *Engine) RetryRequest(ctx context.Context, id, from, key string) (Run, error) {
	run, err := e.Get(ctx, id)
	if err != nil {
		return run, err
	}
	if from != "" && run.Def != nil {
		var top []string
		for _, s := range run.Def.Steps {
			top = append(top, s.ID)
		}
		if !slices.Contains(top, from) {
			return run, &bus.ServiceError{Status: http.StatusBadRequest, Code: CodeInvalid,
				Detail: fmt.Sprintf("from: run %s has no top-level step %q (steps: %s)", id, from, strings.Join(top, ", "))}
		}
	}
	if key == "" {
		key = fmt.Sprintf("g%d.%s", run.Gen, from)
	}
	return e.Retry(ctx, id, from, key)
}

// Client talks to the workflow service of a running agentwork over NATS.
// Safe for concurrent use.
type Client struct{ bus *bus.Bus }

// NewClient returns a client over b.
func NewClient(b *bus.Bus) *Client { return &Client{bus: b} }

func (c *Client) call(ctx context.Context, verb string, req ServiceRequest, out any) error {
	err := c.bus.Call(ctx, bus.SourceWorkflow, verb, req, out)
	if errors.Is(err, bus.ErrNoService) {
		return fmt.Errorf("workflow: %w: is `agentwork serve` running?", err)
	}
	return err
}

// List returns the summaries of the server's workflows.
func (c *Client) List(ctx context.Context) ([]Summary, error) {
	var out []Summary
	return out, c.call(ctx, VerbList, ServiceRequest{}, &out)
}

// Show returns the workflow name.
func (c *Client) Show(ctx context.Context, name string) (*Workflow, error) {
	var out Workflow
	return &out, c.call(ctx, VerbShow, ServiceRequest{Name: name}, &out)
}

// Start starts a run of name; key, if set, makes a repeated start the same
// run.
func (c *Client) Start(ctx context.Context, name string, inputs map[string]any, key string) (StartResult, error) {
	var out StartResult
	return out, c.call(ctx, VerbStart, ServiceRequest{Name: name, Inputs: inputs, Key: key}, &out)
}

// Runs returns the runs f selects, the newest first.
func (c *Client) Runs(ctx context.Context, f Filter) ([]Run, error) {
	var out []Run
	return out, c.call(ctx, VerbRuns, ServiceRequest{Workflow: f.Workflow, Status: f.Status, Limit: f.Limit}, &out)
}

// Get returns the run id.
func (c *Client) Get(ctx context.Context, id string) (Run, error) {
	var out Run
	return out, c.call(ctx, VerbGet, ServiceRequest{ID: id}, &out)
}

// Cancel asks for the run id to be cancelled.
func (c *Client) Cancel(ctx context.Context, id, reason string) (Run, error) {
	var out Run
	return out, c.call(ctx, VerbCancel, ServiceRequest{ID: id, Reason: reason}, &out)
}

// Retry asks for the ended run id to run again from the step from ("":
// where it failed).
func (c *Client) Retry(ctx context.Context, id, from, key string) (Run, error) {
	var out Run
	return out, c.call(ctx, VerbRetry, ServiceRequest{ID: id, From: from, Key: key}, &out)
}
