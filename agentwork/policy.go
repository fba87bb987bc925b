package agentwork

import (
	"context"
	"time"
)

// Policy is how the runner treats the requests of one source.
type Policy struct {
	// Input gates run in order before the model; the first skip ends the run.
	Input []InputGate
	// Output gates run in order after the model. Default: ModeGate{reply}.
	Output []OutputGate
	// Targets are the default connector names. Empty: the runner's defaults.
	Targets []string
	// Tools are the tools its runs may use: names and globs (see
	// tools.Scope). Empty: the runner's (runner.tools).
	Tools []string
	// ToolsFor, if set, gives the tools of the runs of one source and name
	// (a cron job's, a task's): a non-empty answer replaces Tools for those
	// runs. It is asked after the input gates of every run, and by
	// Runner.Toolset; it must honour ctx. An error is one the run is tried
	// again for, as for a gate that cannot answer.
	ToolsFor func(ctx context.Context, source, name string) ([]string, error)
	// System is the system prompt. A request's own System wins.
	System string
	// MaxSteps bounds the tool loop. 0: the runner's default.
	MaxSteps int
	// Timeout bounds one model run (the whole tool loop). 0: the runner's default.
	Timeout time.Duration
	// Overlap keeps runs of the same work (by default: the same source and
	// name) from going on at once. Default: they may.
	Overlap Overlap
	// Alert sends a short notification to the targets when a run fails for
	// good. Default (nil) true.
	Alert *bool
	// Observer, if set, is told every outcome (after the event was emitted):
	// triggers use it to keep their state (last outcome, failures).
	Observer Observer
}

// Observer learns run outcomes. Observe must not block for long and must be
// safe for concurrent use; its errors are logged, never fatal to the run.
type Observer interface {
	Observe(run *Run, outcome string)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(run *Run, outcome string)

// Observe calls f.
func (f ObserverFunc) Observe(run *Run, outcome string) { f(run, outcome) }
