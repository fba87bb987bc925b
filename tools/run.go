package tools

import "context"

// RunInfo is what a tool may know of the run that calls it: whose run it
// is, taken from the request's subject and the runner, never from the
// model's arguments. Tools that act for an owner (the schedule tools, the
// memory tools) read it with RunOf.
type RunInfo struct {
	// ID is the run id (the runid of its events).
	ID string
	// Source and Name are the request's source and name (the subject's).
	Source string
	Name   string
	// Targets are the connectors the run's notification goes to.
	Targets []string
	// Credential is the webhook credential the run acts for (see
	// agentwork.Request.Credential); "" for the operator's own work.
	Credential string
	// Approval is the run's gate list: the tools whose calls wait for a
	// person's approval in it (runner.approval and what its source, job
	// or task added). Work the run creates keeps it (a job of
	// schedule_create): gates are never lost by delegating.
	Approval []string
}

type runKey struct{}

// WithRun returns ctx carrying the run info for the tool calls of one run.
func WithRun(ctx context.Context, r RunInfo) context.Context {
	return context.WithValue(ctx, runKey{}, r)
}

// RunOf returns the run a tool is called by; ok is false outside a run
// (a call by hand: agentwork tools call).
func RunOf(ctx context.Context) (RunInfo, bool) {
	r, ok := ctx.Value(runKey{}).(RunInfo)
	return r, ok
}
