package agentwork

// The model call of a run: the tools in its scope, what notify_user will
// do with its messages, and the tool loop under the run's deadline.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/tools"
)

// callModel runs the tool loop with the tools of ts, from the start or
// from a State an earlier try of the run kept (with fm: a State of its
// memory flush), keeping its State in j; then, when the run's settings
// ask for it, the memory flush (see flush). The worker signals progress on
// the request meanwhile, so a slow model does not get it redelivered.
func (r *Runner) callModel(ctx context.Context, run *Run, pol Policy, set Settings, ts Toolset, from *tools.State, fm *flushMark, j claimJournal) (Output, error) {
	provider, err := r.providerFor(run, set)
	if err != nil {
		return Output{}, err
	}
	provider = recordedModel{p: provider, r: r, run: run}
	timeout := set.Timeout
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	system := pol.System
	if run.Request.System != "" {
		system = run.Request.System
	}
	system = r.withMemory(mctx, run, system, set.Memory)
	specs, err := ts.reg.Tools()
	if err != nil {
		return Output{}, &model.Error{Class: model.ClassPermanent, Message: err.Error()}
	}
	req := model.Request{
		System:   system,
		Messages: []model.Message{{Role: model.RoleUser, Content: run.Request.Prompt}},
		Tools:    specs,
		Meta:     map[string]string{"source": run.Request.Source, "name": run.Request.Name},
	}
	// notify_user answers the model with what this run will do with it.
	tctx := tools.WithRun(mctx, tools.RunInfo{ID: run.ID, Source: run.Request.Source, Name: run.Request.Name, Targets: run.Targets, Credential: run.Request.Credential, Approval: set.Approval})
	lim := tools.Limits{MaxSteps: set.MaxSteps, MaxCalls: r.cfg.MaxToolCalls}
	timedOut := func(err error) error {
		// The run's own deadline, not one inside the provider (model.timeout
		// per call): only then is the whole run too long.
		if err != nil && errors.Is(mctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = &model.Error{Class: model.ClassTimeout, Message: fmt.Sprintf("run took longer than %s (the runner's timeout for this source)", timeout), Err: err}
		}
		return err
	}
	if fm != nil && from != nil {
		// The run was cut short in its flush: its work is done.
		return r.flush(ctx, tctx, run, provider, req, ts, lim, *from, fm, j, set, timedOut)
	}
	opts := []tools.LoopOption{tools.WithJournal(j), tools.WithSecrets(r.secrets...)}
	if len(set.Approval) > 0 {
		opts = append(opts, tools.WithGate(approvalGate{r: r, run: run, scope: set.Approval}))
	}
	if from != nil {
		opts = append(opts, tools.From(*from))
	}
	res, err := tools.Loop(tools.WithDelivery(tctx, &tools.Delivery{Mode: r.delivers(run, pol)}), provider, ts.reg, req, lim, opts...)
	out := Output{Text: res.Text, Calls: res.Calls, Dropped: res.Dropped, Usage: res.Usage, Model: res.Model, StopReason: res.StopReason, Truncated: res.Truncated}
	if err != nil || !set.flushes() || !flushable(ts) {
		return out, timedOut(err)
	}
	st := res.State()
	fm = &flushMark{At: len(st.Messages), StopReason: res.StopReason, Truncated: res.Truncated}
	st.Messages = append(st.Messages, model.Message{Role: model.RoleUser, Content: flushPrompt(ts)})
	return r.flush(ctx, tctx, run, provider, req, ts, lim, st, fm, j, set, timedOut)
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

// Where a run's scope comes from (Toolset.From).
const (
	// ScopeRunner: runner.tools.
	ScopeRunner = "runner"
	// ScopeSource: the source's policy (heartbeat.tools).
	ScopeSource = "source"
	// ScopeName: the policy's answer for the name (a cron job's tools,
	// tasks.<name>.tools).
	ScopeName = "name"
)

// Toolset is what the runs of one source and name may use.
type Toolset struct {
	// Scope is the globs that apply, and From says whose they are
	// (ScopeRunner, ScopeSource or ScopeName).
	Scope tools.Scope `json:"scope"`
	From  string      `json:"from"`
	// Notify says notify_user is offered although Scope does not name it:
	// the run delivers what the model passes to it.
	Notify bool `json:"notify,omitempty"`

	reg *tools.Registry // the tools offered: those in scope, and notify_user if Notify
}

// Specs returns the tools offered, sorted by name.
func (ts Toolset) Specs() []tools.Spec { return ts.reg.Specs() }

// ErrUnknownSource is returned by Toolset for a source without a policy.
var ErrUnknownSource = errors.New("runner: unknown source")

// Toolset returns the tools the runs of source and name are offered, as a
// run with the request's default delivery sees them now: the tools in its
// scope, and notify_user when the run delivers what the model passes to it.
// A source without a policy is ErrUnknownSource.
func (r *Runner) Toolset(ctx context.Context, source, name string) (Toolset, error) {
	pol, ok := r.policy(source)
	if !ok {
		return Toolset{}, fmt.Errorf("%w %q: no trigger handles it", ErrUnknownSource, source)
	}
	run := &Run{Request: Request{Source: source, Name: name}}
	set, err := r.settings(ctx, run, pol)
	if err != nil {
		return Toolset{}, err
	}
	return r.toolset(run, pol, set), nil
}

// settings are the settings of run: its name's (Policy.SettingsFor), else
// its source's policy's, else the runner's, field by field.
func (r *Runner) settings(ctx context.Context, run *Run, pol Policy) (Settings, error) {
	set := Settings{Tools: pol.Tools, Approval: gated(r.cfg.Approval, pol.Approval), MaxSteps: r.cfg.MaxSteps, Timeout: r.cfg.Timeout, Model: r.cfg.Model, Fallback: r.cfg.Fallback}
	if pol.Model != "" {
		set.Model = pol.Model
	}
	if len(pol.Fallback) > 0 {
		set.Fallback = pol.Fallback
	}
	if pol.MaxSteps > 0 {
		set.MaxSteps = pol.MaxSteps
	}
	if pol.Timeout > 0 {
		set.Timeout = pol.Timeout
	}
	set.Memory = r.cfg.Memory
	if pol.Memory != "" {
		set.Memory = pol.Memory
	}
	flush := r.cfg.MemoryFlush
	if pol.MemoryFlush != nil {
		flush = *pol.MemoryFlush
	}
	set.MemoryFlush = &flush
	var own Settings
	var err error
	switch {
	case pol.RequestSettings != nil:
		own, err = pol.RequestSettings(ctx, run.Request)
	case pol.SettingsFor != nil:
		own, err = pol.SettingsFor(ctx, run.Request.Source, run.Request.Name)
	default:
		return set, nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("the settings of %s %q: %w", run.Request.Source, run.Request.Name, err)
	}
	if len(own.Tools) > 0 {
		set.Tools = own.Tools
		set.toolsOwn = true
	}
	set.Approval = gated(set.Approval, own.Approval)
	if own.MaxSteps > 0 {
		set.MaxSteps = own.MaxSteps
	}
	if own.Timeout > 0 {
		set.Timeout = own.Timeout
	}
	if own.Model != "" {
		set.Model = own.Model
	}
	if len(own.Fallback) > 0 {
		set.Fallback = own.Fallback
	}
	if own.Memory != "" {
		set.Memory = own.Memory
	}
	if own.MemoryFlush != nil {
		set.MemoryFlush = own.MemoryFlush
	}
	return set, nil
}

// toolset is the Toolset of run: its scope (the name's, the source's or
// the runner's, the first that is not empty: set.Tools) applied to every
// tool the runner has now (the registry's and those of its sources).
func (r *Runner) toolset(run *Run, pol Policy, set Settings) Toolset {
	ts := Toolset{Scope: set.Tools, From: ScopeSource}
	if set.toolsOwn {
		ts.From = ScopeName
	}
	if len(ts.Scope) == 0 {
		ts.Scope, ts.From = r.cfg.Tools, ScopeRunner
	}
	all := r.allTools()
	picked := ts.Scope.Select(all.Specs())
	if !ts.Scope.Allows(tools.NotifyName) && r.delivers(run, pol) == tools.DeliveryNotify {
		// The run reaches the user through notify_user: without it, its
		// scope would make it mute.
		if s, ok := all.Lookup(tools.NotifyName); ok {
			picked = append(picked, s)
			ts.Notify = true
		}
	}
	reg, err := tools.NewRegistry(picked...)
	if err != nil {
		panic(err) // picked from one registry: valid, no duplicates
	}
	ts.reg = reg
	return ts
}

// allTools returns every tool the runner has now: its registry's, then
// those of its sources (a name already taken is left out).
func (r *Runner) allTools() *tools.Registry {
	if len(r.sources) == 0 {
		return r.tools
	}
	reg, errs := tools.Collect(append([]tools.Source{r.tools}, r.sources...)...)
	for _, err := range errs {
		r.log.Debug("tool left out", zap.Error(err))
	}
	return reg
}

// CallTool runs the tool called name with args (a JSON object) as a run
// would, outside any run and scope: for an operator trying a tool by hand
// (`agentwork tools call`). The result and error are redacted of the
// runner's secrets (WithSecrets) but not cut. notify_user, which sends
// only at the end of a run, is refused.
// A name the runner has no tool by is ErrUnknownTool.
func (r *Runner) CallTool(ctx context.Context, name, args string) (tools.Call, error) {
	all := r.allTools()
	if _, ok := all.Lookup(name); !ok {
		return tools.Call{}, fmt.Errorf("%w %q (the tools now: %s)", ErrUnknownTool, name, strings.Join(all.Names(), ", "))
	}
	if name == tools.NotifyName {
		return tools.Call{Name: name, Arguments: args, Outcome: tools.OutcomeRefused, ArgumentsBytes: len(args),
			Error: "notify_user sends only at the end of a run; try it with: agentwork task send \"...\" --wait"}, nil
	}
	c := all.Call(ctx, "", name, args)
	r.log.Info("tool called by hand", zap.String("tool", name), zap.String("outcome", c.Outcome), zap.Float64("duration_ms", c.DurationMS))
	return c.Record(0, r.secrets), nil
}

// ErrUnknownTool is returned by CallTool for a name that is no tool.
var ErrUnknownTool = errors.New("runner: no tool")
