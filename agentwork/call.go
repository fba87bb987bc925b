package agentwork

// The model call of a run: the tools its policy offers, what notify_user
// will do with its messages, and the tool loop under the run's deadline.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// callModel runs the tool loop. The worker signals progress on the
// request meanwhile, so a slow model does not get it redelivered.
func (r *Runner) callModel(ctx context.Context, run *Run, pol Policy, timeout time.Duration) (Output, error) {
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	system := pol.System
	if run.Request.System != "" {
		system = run.Request.System
	}
	ts := run.toolset
	if ts.err != nil {
		return Output{}, &model.Error{Class: model.ClassPermanent, Message: ts.err.Error()}
	}
	steps := r.cfg.MaxSteps
	if pol.MaxSteps > 0 {
		steps = pol.MaxSteps
	}
	req := model.Request{
		System:   system,
		Messages: []model.Message{{Role: model.RoleUser, Content: run.Request.Prompt}},
		Tools:    ts.specs,
		Meta:     map[string]string{"source": run.Request.Source, "name": run.Request.Name},
	}
	// notify_user answers the model with what this run will do with it.
	tctx := tools.WithDelivery(mctx, &tools.Delivery{Mode: r.delivers(run, pol)})
	res, err := tools.Loop(tctx, r.provider, ts.reg, req, tools.Limits{MaxSteps: steps})
	// The run's own deadline, not one inside the provider (model.timeout
	// per call): only then is the whole run too long.
	if err != nil && errors.Is(mctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		err = &model.Error{Class: model.ClassTimeout, Message: fmt.Sprintf("run took longer than %s (the runner's timeout for this source)", timeout), Err: err}
	}
	return Output{Text: res.Text, Calls: res.Calls, Usage: res.Usage, Model: res.Model, StopReason: res.StopReason, Truncated: res.Truncated}, err
}

// defaultGates are the output gates of a policy that names none: the
// request's delivery mode, then dedup with the runner's window.
func (r *Runner) defaultGates() []OutputGate {
	return []OutputGate{ModeGate{}, &DedupGate{KV: r.bus.Dedup, Window: r.cfg.DedupWindow}}
}

// delivers is what the run will do with notify_user messages: what the
// first output gate that knows says (the runner's default gate is a
// ModeGate).
func (r *Runner) delivers(run *Run, pol Policy) string {
	gates := pol.Output
	if len(gates) == 0 {
		gates = r.defaultGates()
	}
	for _, g := range gates {
		if d, ok := g.(Deliverer); ok {
			return d.Delivers(run)
		}
	}
	return tools.DeliveryNotify
}

// toolset is what a policy offers the model: the registry its calls run
// in and the tools as the model sees them.
type toolset struct {
	reg   *tools.Registry
	specs []model.Tool
	err   error // a tool the policy names does not exist
}

// toolsetOf returns the toolset Handle computed for source.
func (r *Runner) toolsetOf(source string) toolset {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.toolsets[source]
}

// toolsetFor limits the runner's registry to the policy's tools (all of
// them when it names none).
func (r *Runner) toolsetFor(pol Policy) toolset {
	specs, err := r.tools.Tools(pol.Tools...)
	if err != nil {
		return toolset{reg: r.tools, err: err}
	}
	if len(pol.Tools) == 0 {
		return toolset{reg: r.tools, specs: specs}
	}
	var picked []tools.Spec
	for _, n := range pol.Tools {
		if s, ok := r.tools.Lookup(n); ok {
			picked = append(picked, s)
		}
	}
	reg, err := tools.NewRegistry(picked...)
	if err != nil {
		return toolset{reg: r.tools, err: err}
	}
	return toolset{reg: reg, specs: specs}
}
