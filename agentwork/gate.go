package agentwork

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// Skip reasons used by the built-in gates and the runner.
const (
	ReasonAck       = "ack"       // the model did not call notify_user: nothing needs attention
	ReasonEmpty     = "empty"     // the text to deliver is blank
	ReasonDuplicate = "duplicate" // the same text was delivered within the dedup window
	ReasonBusy      = "busy"      // the previous run of the same work is still going
	ReasonDisabled  = "disabled"
	ReasonPaused    = "paused"
	ReasonOutside   = "outside-active-hours"
	ReasonEmptyList = "empty-checklist"
)

// SkipError ends a run with a skip event. Gates return it via Skip.
type SkipError struct {
	Reason string
	Detail string
}

func (e *SkipError) Error() string {
	if e.Detail != "" {
		return "skip " + e.Reason + ": " + e.Detail
	}
	return "skip " + e.Reason
}

// Skip returns a *SkipError.
func Skip(reason, detail string) error { return &SkipError{Reason: reason, Detail: detail} }

// DeferError asks the runner to put the request back and try it again after
// After without counting an attempt (used by overlap: queue).
type DeferError struct {
	After  time.Duration
	Reason string
}

func (e *DeferError) Error() string { return fmt.Sprintf("defer %s: %s", e.After, e.Reason) }

// Defer returns a *DeferError.
func Defer(after time.Duration, reason string) error {
	return &DeferError{After: after, Reason: reason}
}

// AsSkip returns the *SkipError in err's chain.
func AsSkip(err error) (*SkipError, bool) {
	var s *SkipError
	return s, errors.As(err, &s)
}

// InputGate decides, before the model is called, whether a run goes ahead.
//
// Check returns nil to go on, Skip(...) to end the run with a skip event,
// Defer(...) to try later, or another error to end the run with an error
// event. It may block briefly (a KV read); it must honour ctx. Gates are
// shared by concurrent runs and must be safe for concurrent use.
type InputGate interface {
	Check(ctx context.Context, run *Run) error
}

// Releaser is an optional capability of an InputGate that took something
// (a lease) in Check: Release is called once the run has ended, whatever its
// outcome, if Check returned nil.
type Releaser interface {
	Release(ctx context.Context, run *Run)
}

// Output is what the model produced, as output gates see it.
type Output struct {
	// Text is the model's final reply.
	Text string
	// Calls are every tool call of the run, in order (those of its memory
	// flush are the Flush's), but those Dropped counts.
	Calls []tools.Call
	// Dropped counts the calls the model's replies asked for past what one
	// reply may make (tools.Limits.PerReply): they ran nothing.
	Dropped int
	// Usage sums every model call of the run, its memory flush's too;
	// Model is the one that answered last.
	Usage model.Usage
	Model string
	// StopReason is the provider's reason the last reply ended; Truncated
	// says the token limit cut Text short.
	StopReason string
	Truncated  bool
	// Flush is the run's memory flush, if one ran (see
	// Config.MemoryFlush): never delivered, so gates need not look.
	Flush *Flush
}

// Notice is the notification an output gate chain decided to send.
type Notice struct {
	Text    string
	Urgency string
	// Truncated: Text is a reply the model's token limit cut short.
	Truncated bool
	// DedupKey is set by the dedup gate; the key is released if nothing is
	// delivered.
	DedupKey string
}

// OutputGate inspects the model's output and decides what is delivered.
//
// Inspect may set or change run.Notice (nil means: deliver nothing) and
// returns Skip(...) to end the run with a skip event, or an error for an
// error event. Safe for concurrent use; honours ctx.
type OutputGate interface {
	Inspect(ctx context.Context, run *Run, out Output) error
}

// InputGateFunc adapts a function to InputGate.
type InputGateFunc func(ctx context.Context, run *Run) error

// Check calls f.
func (f InputGateFunc) Check(ctx context.Context, run *Run) error { return f(ctx, run) }

// OutputGateFunc adapts a function to OutputGate.
type OutputGateFunc func(ctx context.Context, run *Run, out Output) error

// Inspect calls f.
func (f OutputGateFunc) Inspect(ctx context.Context, run *Run, out Output) error {
	return f(ctx, run, out)
}
