package workflow

import "time"

// Event is what Decide reacts to: Started, StepFinished, TimerFired,
// ChildFinished, ApprovalDecided, Cancel or Retry.
type Event interface{ event() }

// Started starts a pending run.
type Started struct{}

// StepFinished is the result of one launch of a step (or of one item of a
// foreach step): an agent's reply, a tool's result, a notification
// accepted for delivery.
type StepFinished struct {
	Step string
	// Item is the foreach item (ignored for other steps).
	Item    int
	Attempt int
	// Output is the result when Err is nil: a JSON value (an agent's
	// reply as its text; it is parsed as JSON when the step has an output
	// schema).
	Output any
	Err    *StepError
}

// Timer kinds.
const (
	TimerWait        = "wait"
	TimerRetry       = "retry"
	TimerStepTimeout = "step_timeout"
	TimerRunTimeout  = "run_timeout"
)

// TimerFired is a timer of the run that fired. SetTimer carries the
// TimerFired to feed back to Decide when its timer fires.
type TimerFired struct {
	Kind string `json:"kind"`
	Step string `json:"step,omitempty"`
	Item int    `json:"item,omitempty"`
	// Attempt is the launch the timer belongs to (for a retry: the
	// launch it starts).
	Attempt int `json:"attempt,omitempty"`
	Gen     int `json:"gen,omitempty"`
}

// ChildFinished is the end of a child run a step started.
type ChildFinished struct {
	Step    string
	Item    int
	Attempt int
	Status  RunStatus
	Output  any
	Err     *StepError
}

// ApprovalDecided is the end of the approval an approval step asked for
// (AskApproval): approved, rejected or expired, with who decided and
// their comment. Err, when set, says the approval could not be asked
// (the step fails with it).
type ApprovalDecided struct {
	Step    string
	Item    int
	Attempt int
	// Gen is the run's retry generation the approval was asked in: a
	// decision of an earlier generation no longer applies.
	Gen int
	// ID is the approval's id.
	ID string
	// State is approved, rejected or expired.
	State string
	// Verdict is what the step does: approve, reject, or fail (expired
	// with on_timeout fail).
	Verdict string
	By      string
	Comment string
	At      time.Time
	Err     *StepError
}

// Cancel cancels a run: its timers and in-flight steps are cancelled and
// it ends cancelled.
type Cancel struct {
	// Reason says why (who asked), for the events.
	Reason string
}

// RetryFrom runs an ended run (failed, cancelled or timed out) again from a
// step of its top level: that step and those after it start afresh; the
// steps before keep their outputs and are not run again. It is a command,
// not a fact: each one given starts the steps again, so the driver
// deduplicates requests (an Idempotency-Key) before it calls Decide.
type RetryFrom struct {
	// From is a top-level step id; "": the step where the run failed (or
	// the first that did not finish).
	From string
}

func (Started) event()         {}
func (StepFinished) event()    {}
func (TimerFired) event()      {}
func (ChildFinished) event()   {}
func (ApprovalDecided) event() {}
func (Cancel) event()          {}
func (RetryFrom) event()       {}

// Effect is something to carry out after the run's new state is written.
// Its Key is an idempotency key derived from the run, step, item, attempt
// and retry generation: carrying out an effect twice with one key must
// have the effect of once (a bus message id, a tool call's checkpoint, a
// timer key).
type Effect interface {
	Key() string
	effect()
}

// Work identifies the launch of a step an effect belongs to.
type Work struct {
	Run, Step string
	// Item is the foreach item, -1 for none.
	Item    int
	Attempt int
}

// RunAgent asks the runner to run an agent step's prompt.
type RunAgent struct {
	IdempotencyKey string
	Work
	Prompt string
	// Output is the JSON Schema the reply must meet (nil: any text).
	Output   map[string]any
	Tools    []string
	Model    string
	Fallback []string
	MaxSteps int
	Memory   string
	// Correction, on a corrective retry, says what was wrong with the
	// last reply (to be added to the prompt).
	Correction string
}

// CallTool calls one tool with its arguments, as JSON values.
type CallTool struct {
	IdempotencyKey string
	Work
	Name string
	Args map[string]any
}

// SendNotification sends a notification; the step finishes when it is accepted for
// delivery.
type SendNotification struct {
	IdempotencyKey string
	Work
	Text    string
	Targets []string
	Urgency string
}

// StartChild starts a child run of Workflow with Inputs at Depth; its end
// comes back as ChildFinished.
type StartChild struct {
	IdempotencyKey string
	Work
	Workflow string
	Inputs   map[string]any
	Depth    int
}

// SetTimer arms the time engine's timer Timer (a bus timer key) to fire at
// At; when it fires, feed Fire to Decide. Setting it again replaces it.
type SetTimer struct {
	Timer string
	At    time.Time
	Fire  TimerFired
}

// CancelTimer removes the timer Timer, if still pending.
type CancelTimer struct {
	Timer string
}

// CancelStep stops the in-flight work that the effect with key Target
// started (a runner request, a tool call, a child run).
type CancelStep struct {
	Work
	Target string
}

// AskApproval asks people for a decision (an approval of package
// approval, id ID) and waits for it: the step is waiting, and its
// ApprovalDecided comes back when the approval ends. Asking again with
// the same ID is the same approval.
type AskApproval struct {
	IdempotencyKey string
	Work
	Gen int
	// ID is the approval's id: approval.WorkflowStepID of the run, the
	// step (with the retry generation when not 0) and the attempt.
	ID string
	// Message is the question, rendered.
	Message   string
	Targets   []string
	Approvers []string
	// Timeout 0: the approvals' default.
	Timeout   time.Duration
	OnTimeout string
	Reminder  time.Duration
}

// CancelApproval cancels the pending approval ID (its run was cancelled,
// or timed out).
type CancelApproval struct {
	Work
	ID     string
	Reason string
}

// Emit publishes an event: Type agentwork.workflow.<Outcome> on
// agentwork.event.workflow.<Outcome>, subject the workflow's name.
// Outcomes: started, done, failed, cancelled, timed_out (the run),
// step.started and step.finished.
type Emit struct {
	IdempotencyKey string
	Outcome        string
	Subject        string
	Data           map[string]any
}

// Alert tells the workflow's targets that a run failed or timed out.
type Alert struct {
	IdempotencyKey string
	Targets        []string
	Text           string
}

func (e RunAgent) Key() string         { return e.IdempotencyKey }
func (e CallTool) Key() string         { return e.IdempotencyKey }
func (e SendNotification) Key() string { return e.IdempotencyKey }
func (e StartChild) Key() string       { return e.IdempotencyKey }
func (e SetTimer) Key() string         { return "set:" + e.Timer }
func (e CancelTimer) Key() string      { return "cancel:" + e.Timer }
func (e CancelStep) Key() string       { return "cancel:" + e.Target }
func (e AskApproval) Key() string      { return e.IdempotencyKey }
func (e CancelApproval) Key() string   { return "cancel-approval:" + e.ID }
func (e Emit) Key() string             { return e.IdempotencyKey }
func (e Alert) Key() string            { return e.IdempotencyKey }

func (RunAgent) effect()         {}
func (CallTool) effect()         {}
func (SendNotification) effect() {}
func (StartChild) effect()       {}
func (SetTimer) effect()         {}
func (CancelTimer) effect()      {}
func (CancelStep) effect()       {}
func (AskApproval) effect()      {}
func (CancelApproval) effect()   {}
func (Emit) effect()             {}
func (Alert) effect()            {}
