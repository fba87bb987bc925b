package workflow

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/tools"
)

// RunStatus is the status of a run.
type RunStatus string

// Run statuses; a run ends in exactly one of the last four.
const (
	RunPending   RunStatus = "pending"
	RunRunning   RunStatus = "running"
	RunWaiting   RunStatus = "waiting" // only timers are pending: no step holds a worker
	RunDone      RunStatus = "done"
	RunFailed    RunStatus = "failed"
	RunCancelled RunStatus = "cancelled"
	RunTimedOut  RunStatus = "timed_out"
)

// Ended reports whether s is a final status.
func (s RunStatus) Ended() bool {
	return s == RunDone || s == RunFailed || s == RunCancelled || s == RunTimedOut || s == RunSkipped
}

// StepStatus is the status of a step, or of one item of a foreach step.
type StepStatus string

// Step statuses.
const (
	StepPending     StepStatus = "pending"
	StepRunning     StepStatus = "running"
	StepWaiting     StepStatus = "waiting" // a wait step's timer, or a retry's backoff
	StepDone        StepStatus = "done"
	StepFailed      StepStatus = "failed"
	StepSkipped     StepStatus = "skipped"
	StepCancelled   StepStatus = "cancelled"
	StepTimedOut    StepStatus = "timed_out"
	StepInterrupted StepStatus = "interrupted"
)

// Ended reports whether s is a final status.
func (s StepStatus) Ended() bool {
	switch s {
	case StepDone, StepFailed, StepSkipped, StepCancelled, StepTimedOut, StepInterrupted:
		return true
	}
	return false
}

// active reports whether s holds a place: running, or waiting for a timer.
func (s StepStatus) active() bool { return s == StepRunning || s == StepWaiting }

// ErrorKind says why an attempt failed, and so whether it is retried.
type ErrorKind string

// Error kinds. Transient, timeout and interrupted attempts are retried as
// the step's retry says; the others are not.
const (
	ErrTransient   ErrorKind = "transient"   // may work on another try (a 5xx, a lost connection)
	ErrTimeout     ErrorKind = "timeout"     // the attempt passed the step's timeout
	ErrPermanent   ErrorKind = "permanent"   // will fail again (a 4xx, a tool refusing its args)
	ErrInterrupted ErrorKind = "interrupted" // in flight when an instance stopped, not safe to repeat blindly
	ErrExpression  ErrorKind = "expression"  // a template or condition failed
	ErrSchema      ErrorKind = "schema"      // an agent's reply did not meet the output schema after the corrective retry
	ErrLimit       ErrorKind = "limit"       // a limit of the engine (items, depth)
	ErrCancelled   ErrorKind = "cancelled"   // the run was cancelled
)

func (k ErrorKind) retryable() bool {
	return k == ErrTransient || k == ErrTimeout || k == ErrInterrupted
}

// StepError is why a step (or attempt) failed.
type StepError struct {
	Kind    ErrorKind `json:"kind"`
	Message string    `json:"message"`
}

func (e *StepError) Error() string { return string(e.Kind) + ": " + e.Message }

// Exec is the state of one execution: a step, or one item of a foreach
// step.
type Exec struct {
	Status StepStatus `json:"status"`
	// Attempt counts the launches (the corrective retries of an agent
	// step included); the effects and events of a launch carry it.
	Attempt int `json:"attempt,omitempty"`
	// Corrections counts the corrective retries among them.
	Corrections int `json:"corrections,omitempty"`
	// Corrected is true when this attempt series' corrective retry is used.
	Corrected bool `json:"corrected,omitempty"`
	// Output is the result (a JSON value, at most MaxOutput bytes).
	Output any `json:"output,omitempty"`
	// Cut is true when Output was cut to MaxOutput.
	Cut bool `json:"cut,omitempty"`
	// Error is why it failed (or why the last attempt failed, while a
	// retry waits).
	Error *StepError `json:"error,omitempty"`
	// StartedAt is the first launch, EndedAt the end.
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// WaitUntil is when a waiting execution's timer fires.
	WaitUntil time.Time `json:"wait_until,omitzero"`
	// Calls are a tool step's calls, one per attempt, as the engine made
	// them: arguments, result and error redacted of the config's secrets
	// and cut (an attempt cut short by a crash: outcome interrupted).
	Calls []tools.Call `json:"calls,omitempty"`
	// Approval is the id of the approval an approval step's attempt
	// asked for (agentwork approvals show <id>).
	Approval string `json:"approval,omitempty"`
	// AgentRuns are the runner's run ids of an agent step's launches:
	// each run's record (its events) is the step's record.
	AgentRuns []string `json:"agent_runs,omitempty"`
}

// StepState is the state of one step of a run.
type StepState struct {
	Kind string `json:"kind"`
	Exec
	// Condition is the value of the step's `if` (kept when it skipped
	// the step).
	Condition any `json:"condition,omitempty"`
	// Values are a foreach step's items and Items their executions.
	Values []any  `json:"values,omitempty"`
	Items  []Exec `json:"items,omitempty"`
}

// Parent is the step of the run that started a child run.
type Parent struct {
	Run  string `json:"run"`
	Step string `json:"step"`
	// Item is the foreach item of the step (-1 for none).
	Item    int `json:"item"`
	Attempt int `json:"attempt"`
}

// Cause kinds: what started a run.
const (
	CauseManual  = "manual"
	CauseWebhook = "webhook"
	CauseCron    = "cron"
	CauseEvent   = "event"
	CauseChild   = "child"
)

// Cause is what started a run.
type Cause struct {
	// Kind is manual, webhook, cron, event or child.
	Kind string `json:"kind"`
	// ID identifies the cause: the request's idempotency key, the cron
	// tick, the event's id or the parent run.
	ID string `json:"id,omitempty"`
	// Credential names the webhook credential that started the run (a
	// child run: its parent's); "" for a run of the operator (admin token,
	// cron, event trigger). It scopes the run's idempotency keys, and the
	// run's notify and approval targets are held to its grant.
	Credential string `json:"credential,omitempty"`
}

// Run is the state of one run: plain data, JSON-serialisable, written to
// the bus after every decision.
type Run struct {
	ID       string `json:"id"`
	Workflow string `json:"workflow"`
	// Def is the definition the run started with; the run keeps it.
	Def    *Workflow      `json:"def"`
	Inputs map[string]any `json:"inputs,omitempty"`
	// Event is the event that started the run, for event triggers
	// ({id, type, subject, source, time, data}).
	Event  map[string]any        `json:"event,omitempty"`
	Status RunStatus             `json:"status"`
	Steps  map[string]*StepState `json:"steps"`
	// Output is the output of the last step, when the run is done.
	Output any `json:"output,omitempty"`
	// Error and FailedStep say why a run failed or timed out.
	Error      *StepError `json:"error,omitempty"`
	FailedStep string     `json:"failed_step,omitempty"`
	// Depth is 0 for a run started by a trigger, the parent's plus one
	// for a child run.
	Depth  int     `json:"depth,omitempty"`
	Parent *Parent `json:"parent,omitempty"`
	Cause  Cause   `json:"cause"`
	// Gen counts the run's retries (RetryFrom events); it is part of every
	// effect's key, so a retried step runs again.
	Gen int `json:"gen,omitempty"`
	// Timers are the run's armed timers by key: what fires when.
	Timers map[string]TimerFired `json:"timers,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// InputError is a problem with a run's inputs (an HTTP API answers 400
// with it).
type InputError struct {
	// Field is the input's name.
	Field string
	Msg   string
}

func (e *InputError) Error() string { return fmt.Sprintf("inputs.%s: %s", e.Field, e.Msg) }

// CheckInputs checks in against w's declared inputs and returns them with
// the defaults filled in. The error joins one *InputError per problem.
func CheckInputs(w *Workflow, in map[string]any) (map[string]any, error) {
	out := map[string]any{}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(in)) {
		decl, ok := w.Inputs[name]
		if !ok {
			known := slices.Sorted(maps.Keys(w.Inputs))
			msg := "this workflow has no inputs; send none"
			if len(known) > 0 {
				msg = "no such input (inputs: " + strings.Join(known, ", ") + ")"
			}
			errs = append(errs, &InputError{Field: name, Msg: msg})
			continue
		}
		v, err := checkType(decl.Type, in[name])
		if err != nil {
			errs = append(errs, &InputError{Field: name, Msg: err.Error()})
			continue
		}
		out[name] = v
	}
	for _, name := range slices.Sorted(maps.Keys(w.Inputs)) {
		if _, ok := out[name]; ok {
			continue
		}
		decl := w.Inputs[name]
		switch {
		case decl.Required:
			if _, given := in[name]; !given {
				errs = append(errs, &InputError{Field: name, Msg: "required; give it a value"})
			}
		case decl.Default != nil:
			v, err := checkType(decl.Type, decl.Default)
			if err != nil {
				errs = append(errs, &InputError{Field: name, Msg: "default: " + err.Error()})
				continue
			}
			out[name] = v
		}
	}
	return out, errors.Join(errs...)
}

// NewRun returns a pending run of def with id (a bus token: 1-64 of a-z,
// 0-9, _ and -) and the inputs checked (errors as *InputError). Decide
// with Started starts it.
func NewRun(def *Workflow, id string, inputs map[string]any, cause Cause, now time.Time) (Run, error) {
	if !bus.ValidToken(id) {
		return Run{}, fmt.Errorf("workflow: run id %q: want 1-64 characters of a-z, 0-9, _ and -", id)
	}
	in, err := CheckInputs(def, inputs)
	if err != nil {
		return Run{}, err
	}
	r := Run{
		ID: id, Workflow: def.Name, Def: def, Inputs: in,
		Status: RunPending, Steps: map[string]*StepState{}, Cause: cause,
		CreatedAt: now, UpdatedAt: now,
	}
	forEachStep(def.Steps, "steps", func(s *Step, _ string) {
		k, _ := s.Kind()
		r.Steps[s.ID] = &StepState{Kind: k, Exec: Exec{Status: StepPending}}
	})
	return r, nil
}

// clone copies r deeply enough that changing the copy's steps and timers
// leaves r as it was (outputs and inputs are never changed in place).
func (r Run) clone() Run {
	c := r
	c.Steps = make(map[string]*StepState, len(r.Steps))
	for id, s := range r.Steps {
		cs := *s
		cs.Items = slices.Clone(s.Items)
		c.Steps[id] = &cs
	}
	c.Timers = maps.Clone(r.Timers)
	if r.Parent != nil {
		p := *r.Parent
		c.Parent = &p
	}
	return c
}
