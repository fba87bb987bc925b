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
	// Approval names the tools whose calls wait for a person's approval
	// in its runs, besides the runner's (runner.approval): names and globs
	// (see tools.Scope).
	Approval []string
	// SettingsFor, if set, gives the settings of the runs of one source and
	// name (a cron job's, a task's): its non-zero fields replace the
	// policy's for those runs. It is asked after the input gates of every
	// run, and by Runner.Toolset; it must honour ctx. An error is one the
	// run is tried again for, as for a gate that cannot answer.
	SettingsFor func(ctx context.Context, source, name string) (Settings, error)
	// RequestSettings, if set, is asked instead of SettingsFor, with the
	// whole request: for a source whose runs differ by more than their
	// name (a workflow's agent steps take theirs from the run's definition
	// snapshot, found through the request's metadata). Toolset asks it
	// with a request of the source and name only.
	RequestSettings func(ctx context.Context, req Request) (Settings, error)
	// System is the system prompt. A request's own System wins.
	System string
	// Memory is how much of the agent's memory its runs' system prompt
	// holds (none, light, full; see WithMemory). Empty: the runner's
	// (runner.memory).
	Memory string
	// MemoryFlush, if set, says whether its runs end with a memory flush
	// (see Config.MemoryFlush). nil: the runner's (runner.memory_flush).
	MemoryFlush *bool
	// MaxSteps bounds the tool loop. 0: the runner's default.
	MaxSteps int
	// Timeout bounds one model run (the whole tool loop). 0: the runner's default.
	Timeout time.Duration
	// Model names the model of its runs (see WithModels), and Fallback
	// those that take over when it is unavailable. Empty: the runner's
	// (runner.model, runner.fallback).
	Model    string
	Fallback []string
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

// Settings are what the runs of one source and name (a cron job, a task)
// use instead of their source's policy and the runner's config: a zero
// field leaves the level above.
type Settings struct {
	// Tools are the tools the runs may use (see Policy.Tools).
	Tools []string
	// Approval names the tools whose calls wait for a person's approval
	// in the runs, besides the runner's and the policy's (see
	// Policy.Approval).
	Approval []string
	// MaxSteps bounds the tool loop.
	MaxSteps int
	// Timeout bounds one model run.
	Timeout time.Duration
	// Model names the model the runs use (see WithModels).
	Model string
	// Fallback names the models that take over, in order, when Model
	// fails with an error another model may not have (model.FallsBack).
	Fallback []string
	// Memory is how much memory the runs' prompt holds (see Policy.Memory).
	Memory string
	// MemoryFlush, if set, says whether the runs end with a memory flush
	// (see Config.MemoryFlush). nil: the level above's.
	MemoryFlush *bool

	toolsOwn bool // Tools are the name's own (Toolset.From ScopeName)
}

// flushes reports whether the runs end with a memory flush.
func (s Settings) flushes() bool { return s.MemoryFlush != nil && *s.MemoryFlush }

// Observer learns run outcomes. Observe must not block for long and must be
// safe for concurrent use; its errors are logged, never fatal to the run.
type Observer interface {
	Observe(run *Run, outcome string)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(run *Run, outcome string)

// Observe calls f.
func (f ObserverFunc) Observe(run *Run, outcome string) { f(run, outcome) }
