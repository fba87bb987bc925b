package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/secret"
	"github.com/agentwork/agentwork/tools"
)

// The effects a transition carries out once its state is stored: tool
// calls and notifications made inline, agent steps as runner requests,
// child runs, approvals, events.

// execOf returns the execution of step (item, for a foreach step) of r, or
// nil.
func execOf(r Run, step string, item int) *Exec {
	st := r.Steps[step]
	if st == nil {
		return nil
	}
	if item >= 0 && st.Items != nil {
		if item < len(st.Items) {
			return &st.Items[item]
		}
		return nil
	}
	return &st.Exec
}

func argsJSON(args map[string]any) string {
	b, err := json.Marshal(orEmpty(args))
	if err != nil {
		return "{}"
	}
	return string(b)
}

// checkArgs says why args do not meet the schema of tool name ("" when
// they do, or when the tool or its schema is unknown to it: the call
// then says for itself).
func checkArgs(reg *tools.Registry, name, args string) string {
	spec, ok := reg.Lookup(name)
	if !ok || len(spec.Schema) == 0 {
		return ""
	}
	r, err := resolveRaw(spec.Schema)
	if err != nil {
		return ""
	}
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return ""
	}
	if err := r.Validate(v); err != nil {
		return fmt.Sprintf("the arguments do not meet the tool's schema (%v), so it did not run; fix the step's args", err)
	}
	return ""
}

// registry returns the tools tool steps may call now.
func (e *Engine) registry() *tools.Registry {
	reg, errs := tools.Collect(e.cfg.Tools...)
	for _, err := range errs {
		e.log.Debug("tool left out", zap.Error(err))
	}
	return reg
}

func (e *Engine) idempotent(name string) bool {
	s, ok := e.registry().Lookup(name)
	return ok && s.Idempotent
}

// inline makes one inline effect (a tool call, a notification) and
// returns its result as the StepFinished to feed.
func (e *Engine) inline(ctx context.Context, run Run, s stored) result {
	key := s.key()
	w := s.work()
	r := result{key: key, in: input{run: run.ID}}
	sf := StepFinished{Step: w.Step, Item: w.Item, Attempt: w.Attempt}
	if s.Notify != nil {
		out, se, err := e.notify(ctx, run, *s.Notify)
		if err != nil {
			r.aborted = err
			return r
		}
		sf.Output, sf.Err = out, se
		r.in.ev = sf
		return r
	}
	t := s.Tool
	if err := e.at("call", key); err != nil {
		r.aborted = err
		return r
	}
	callCtx, cancel := context.WithCancel(tools.WithRun(ctx, tools.RunInfo{ID: run.ID, Source: bus.SourceWorkflow, Name: run.Workflow}))
	e.inflight.Store(key, cancel)
	reg, args := e.registry(), argsJSON(t.Args)
	var call tools.Call
	if msg := checkArgs(reg, t.Name, args); msg != "" {
		// Refused before it runs: the same arguments fail every time, so
		// the step fails as permanent and is not retried.
		call = tools.Call{ID: key, Name: t.Name, Arguments: args, ArgumentsBytes: len(args), Outcome: tools.OutcomeRefused, Error: msg, ResultBytes: len(msg)}
	} else {
		call = reg.Call(callCtx, key, t.Name, args)
	}
	e.inflight.Delete(key)
	cancel()
	if err := ctx.Err(); err != nil {
		// Cut by this instance's shutdown: whoever takes the message over
		// finds the call in flight.
		r.aborted = err
		return r
	}
	if err := e.at("called", key); err != nil {
		r.aborted = err
		return r
	}
	rec := call.Record(e.cfg.RecordMax, e.cfg.Secrets)
	r.in.call = &rec
	switch call.Outcome {
	case tools.OutcomeOK:
		sf.Output = toolOutput(secret.Redact(call.Result, e.cfg.Secrets))
	case tools.OutcomeTimeout:
		sf.Err = &StepError{Kind: ErrTimeout, Message: "tool " + t.Name + ": " + secret.Redact(call.Error, e.cfg.Secrets)}
	case tools.OutcomeRefused:
		sf.Err = &StepError{Kind: ErrPermanent, Message: "tool " + t.Name + ": " + secret.Redact(call.Error, e.cfg.Secrets)}
	default:
		sf.Err = &StepError{Kind: ErrTransient, Message: "tool " + t.Name + ": " + secret.Redact(call.Error, e.cfg.Secrets)}
	}
	r.in.ev = sf
	return r
}

// toolOutput is a tool's result as a step's output: its JSON value when it
// is JSON, else the text.
func toolOutput(s string) any {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err == nil {
		return v
	}
	return s
}

// carryOut carries out one effect that is not inline. again is true for
// an effect carried out before by a handler that may have died: a timer is
// then set only if the run still holds it.
func (e *Engine) carryOut(ctx context.Context, run Run, s stored, again bool) error {
	switch {
	case s.Emit != nil:
		if err := e.emit(ctx, run, *s.Emit); err != nil {
			return err
		}
		return e.afterEmit(ctx, run, *s.Emit) // concurrency.go
	case s.Agent != nil:
		return e.runAgent(ctx, run, *s.Agent)
	case s.Child != nil:
		return e.startChild(ctx, run, *s.Child)
	case s.Set != nil:
		if _, armed := run.Timers[s.Set.Timer]; again && !armed {
			return nil
		}
		raw, err := json.Marshal(timerData{Run: run.ID, Fire: s.Set.Fire})
		if err != nil {
			return err
		}
		return e.timers.Set(ctx, s.Set.Timer, s.Set.At, raw)
	case s.Unset != nil:
		return e.timers.Cancel(ctx, s.Unset.Timer)
	case s.Stop != nil:
		return e.cancelStep(ctx, run, *s.Stop)
	case s.Alert != nil:
		_, err := e.enqueue(ctx, run, s.Alert.IdempotencyKey, s.Alert.Text, tools.UrgencyImportant, s.Alert.Targets, nil)
		return err
	case s.Parent != nil:
		p := s.Parent
		return e.command(ctx, "child", p.Parent, command{Run: p.Parent, Child: p}, fmt.Sprintf("%s.end.g%d", p.Child, p.Gen))
	case s.Ask != nil:
		if x := execOf(run, s.Ask.Step, s.Ask.Item); again && (x == nil || x.Status != StepWaiting || x.Approval != s.Ask.ID) {
			return nil // decided or gone meanwhile
		}
		return e.askApproval(ctx, run, *s.Ask)
	case s.Unask != nil:
		return e.cancelApproval(ctx, *s.Unask)
	case s.inline():
		// An inline effect of a batch whose handler died, carried out
		// again by its redelivery: nothing to do before the write.
		return nil
	}
	return nil
}

func (e *Engine) emit(ctx context.Context, run Run, em Emit) error {
	data := maps.Clone(em.Data)
	if data == nil {
		data = map[string]any{}
	}
	data["depth"] = run.Depth
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if len(e.cfg.Secrets) > 0 {
		raw = []byte(secret.Redact(string(raw), e.cfg.Secrets))
	}
	// Bus subjects take one token per outcome: step.started is emitted
	// as step_started.
	outcome := strings.ReplaceAll(em.Outcome, ".", "_")
	ev, err := bus.NewEvent("agentwork/workflow", bus.TypeOf(bus.SourceWorkflow, outcome), em.Subject, e.now(), json.RawMessage(raw))
	if err != nil {
		return err
	}
	ev.ID, ev.RunID = em.IdempotencyKey, run.ID
	_, err = e.bus.Publish(ctx, e.bus.Subjects.Event(bus.SourceWorkflow, outcome), ev, em.IdempotencyKey)
	return err
}

// JSONOnly is added to an agent step's prompt when the step has an output
// schema.
const JSONOnly = "Answer with only a JSON value, no other text, that meets this JSON Schema:"

func (e *Engine) runAgent(ctx context.Context, run Run, a RunAgent) error {
	prompt := a.Prompt
	if a.Correction != "" {
		prompt += "\n\n" + a.Correction
	}
	if a.Output != nil {
		schema, err := json.Marshal(a.Output)
		if err != nil {
			return err
		}
		prompt += "\n\n" + JSONOnly + "\n" + string(schema)
	}
	req := agentwork.Request{
		Source: StepSource, Name: run.Workflow, Prompt: prompt, Targets: run.Def.Targets,
		// The runner holds what the run does (the jobs it creates) to the
		// grant of the credential that started the workflow run.
		Credential: run.Cause.Credential,
		Metadata: map[string]string{
			"workflow_run": run.ID, "workflow_step": a.Step,
			"workflow_item": strconv.Itoa(a.Item), "workflow_attempt": strconv.Itoa(a.Attempt),
		},
	}
	_, err := agentwork.Publish(ctx, e.bus, req, agentwork.PublishOptions{MsgID: a.IdempotencyKey, EventID: a.IdempotencyKey, Producer: "agentwork/workflow", Now: e.now()})
	return err
}

func (e *Engine) startChild(ctx context.Context, run Run, sc StartChild) error {
	id := derivedID("child", sc.IdempotencyKey)
	fail := func(msg string) error {
		ce := &childEnd{Child: id, Parent: run.ID, Step: sc.Step, Item: sc.Item, Attempt: sc.Attempt, Status: RunFailed,
			Err: &StepError{Kind: ErrPermanent, Message: msg}}
		return e.command(ctx, "child", run.ID, command{Run: run.ID, Child: ce}, id+".end.g0")
	}
	def := e.cfg.Definitions[sc.Workflow]
	if def == nil {
		return fail(fmt.Sprintf("no workflow named %q to start as a child run", sc.Workflow))
	}
	child, err := NewRun(def, id, sc.Inputs, Cause{Kind: CauseChild, ID: run.ID, Credential: run.Cause.Credential}, e.now())
	if err != nil {
		return fail(fmt.Sprintf("the child run of %s: %v", sc.Workflow, err))
	}
	child.Depth = sc.Depth
	child.Parent = &Parent{Run: run.ID, Step: sc.Step, Item: sc.Item, Attempt: sc.Attempt}
	if _, _, err = e.create(ctx, child); err != nil {
		return err
	}
	if limited(def.Concurrency) {
		// Not held back by the limit, but counted by it (after it is
		// stored: a count drops an id whose run is not stored yet).
		return e.track(ctx, def.Name, []string{id}, nil)
	}
	return nil
}

// cancelStep stops in-flight work where it can: a tool call this process
// makes has its ctx cancelled, a child run gets a cancel command. An agent
// run is left to finish (the runner has no cancel); its result is stale
// and changes nothing.
func (e *Engine) cancelStep(ctx context.Context, run Run, cs CancelStep) error {
	if cancel, ok := e.inflight.Load(cs.Target); ok {
		cancel.(context.CancelFunc)()
	}
	ref, ok := indexSteps(run.Def)[cs.Step]
	if !ok || ref.step.Workflow == "" {
		return nil
	}
	child := derivedID("child", cs.Target)
	return e.command(ctx, "cancel", child, command{Run: child, Reason: "its parent step was cancelled"}, "cancel."+child)
}

// notify queues a notify step's notification; a target that is no
// connector fails the step.
func (e *Engine) notify(ctx context.Context, run Run, n SendNotification) (any, *StepError, error) {
	if len(n.Targets) == 0 {
		return nil, &StepError{Kind: ErrPermanent, Message: "no targets: set notify.targets or the workflow's targets"}, nil
	}
	for i, t := range n.Targets {
		if err := connectors.CheckTarget(fmt.Sprintf("notify.targets[%d]", i), t); err != nil {
			return nil, &StepError{Kind: ErrPermanent, Message: err.Error()}, nil
		}
		name, _ := connectors.SplitTarget(t)
		if len(e.cfg.Connectors) > 0 && !slices.Contains(e.cfg.Connectors, name) {
			return nil, &StepError{Kind: ErrPermanent, Message: fmt.Sprintf("notify.targets[%d]: no connector named %q (connectors: %s)", i, name, strings.Join(e.cfg.Connectors, ", "))}, nil
		}
	}
	if msg := e.checkGrant(run, n.Step, "notify.targets", n.Targets); msg != "" {
		return nil, &StepError{Kind: ErrPermanent, Message: msg}, nil
	}
	urgency := tools.UrgencyInfo
	if n.Urgency == UrgencyHigh {
		urgency = tools.UrgencyImportant
	}
	ids, err := e.enqueue(ctx, run, n.IdempotencyKey, n.Text, urgency, n.Targets, map[string]string{"workflow_run": run.ID, "workflow_step": n.Step})
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{"targets": n.Targets, "notification_ids": ids}, nil, nil
}

// checkGrant says why run may not send to targets, the rendered targets
// of its step (field: their field, for the message); "" when it may. A
// run a webhook credential started (and its child runs) may send to the
// targets the credential's grant allows now, and to those the operator
// wrote literally in the workflow (its targets, the step's targets
// without templates); what an expression made of the run's inputs is the
// caller's and is checked.
func (e *Engine) checkGrant(run Run, step, field string, targets []string) string {
	cred := run.Cause.Credential
	if cred == "" {
		return ""
	}
	own := slices.Clone(run.Def.Targets)
	if ref, ok := indexSteps(run.Def)[step]; ok {
		var lits []string
		switch s := ref.step; {
		case s.Notify != nil:
			lits = s.Notify.Targets
		case s.Approval != nil:
			lits = s.Approval.Targets
		}
		for _, t := range lits {
			if !strings.Contains(t, "${{") {
				own = append(own, t)
			}
		}
	}
	check := slices.DeleteFunc(slices.Clone(targets), func(t string) bool { return slices.Contains(own, t) })
	if len(check) == 0 {
		return ""
	}
	if e.cfg.Grants == nil {
		return fmt.Sprintf("%s: nothing sent: the run was started by webhook credential %q, and this engine cannot check its grant (no workflow.Config.Grants)", field, cred)
	}
	if err := e.cfg.Grants(cred, check); err != nil {
		return fmt.Sprintf("%s: nothing sent: the run was started by webhook credential %q, and %v; widen the credential's grant, or start the run with the admin token", field, cred, err)
	}
	return ""
}

// enqueue queues text for each target under ids derived from key, stored
// once each however often it is called.
func (e *Engine) enqueue(ctx context.Context, run Run, key, text, urgency string, targets []string, md map[string]string) ([]any, error) {
	text = secret.Redact(text, e.cfg.Secrets)
	var ids []any
	var errs []error
	for _, t := range targets {
		if len(e.cfg.Connectors) > 0 {
			if name, _ := connectors.SplitTarget(t); !slices.Contains(e.cfg.Connectors, name) {
				e.log.Warn("notification not queued for an unknown connector", zap.String("run", run.ID), zap.String("target", t))
				continue
			}
		}
		n := connectors.Notification{
			ID: connectors.NotificationID(key, "", t), RunID: run.ID, Source: bus.SourceWorkflow, Name: run.Workflow,
			Text: text, Urgency: urgency, Target: t, Targets: targets, Time: e.now(), Metadata: md,
		}
		if err := connectors.Enqueue(ctx, e.bus, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t, err))
			continue
		}
		ids = append(ids, n.ID)
	}
	return ids, errors.Join(errs...)
}

// askApproval asks for an approval step's approval: the record is
// written (once per id) before the question is sent, and once decided the
// approval publishes its Resume, an approval command to this run on the
// commands stream, which feeds ApprovalDecided to Decide. An approval
// that cannot be asked (a target that is no connector, no approvals
// service) fails the step through the same command.
func (e *Engine) askApproval(ctx context.Context, run Run, a AskApproval) error {
	ref := &askRef{Step: a.Step, Item: a.Item, Attempt: a.Attempt, Gen: a.Gen, ID: a.ID}
	failStep := func(msg string) error {
		return e.command(ctx, "approval", run.ID, command{Run: run.ID, Ask: ref, AskError: msg}, "approval."+a.ID+".resume")
	}
	if msg := e.checkGrant(run, a.Step, "approval.targets", a.Targets); msg != "" {
		return failStep(msg)
	}
	if e.cfg.Approvals == nil {
		return failStep("approval steps need the approvals service, and this engine has none (workflow.Config.Approvals)")
	}
	data, err := json.Marshal(command{Run: run.ID, Ask: ref})
	if err != nil {
		return err
	}
	_, _, err = e.cfg.Approvals.Ask(ctx, approval.Request{
		ID: a.ID, Kind: approval.KindWorkflowStep, Run: run.ID, Step: a.Step, Source: bus.SourceWorkflow, Name: run.Workflow,
		Question: secret.Redact(a.Message, e.cfg.Secrets), Targets: a.Targets, Approvers: a.Approvers,
		Requester: run.Cause.Credential, // the credential that started the run may not decide it
		Timeout:   a.Timeout, OnTimeout: approval.Verdict(a.OnTimeout), Reminder: a.Reminder,
		Resume: &approval.Resume{Subject: e.bus.Subjects.Workflow("approval", run.ID), Type: bus.TypeOf(bus.SourceWorkflow, "approval_requested"), Data: data},
	})
	if errors.Is(err, approval.ErrInvalid) {
		return failStep("the approval cannot be asked: " + err.Error())
	}
	return err
}

// cancelApproval cancels an approval step's pending approval (its run
// ended, or its step was cancelled): nobody can decide it any more, and
// it publishes no decision.
func (e *Engine) cancelApproval(ctx context.Context, c CancelApproval) error {
	if e.cfg.Approvals == nil {
		return nil
	}
	_, err := e.cfg.Approvals.Cancel(ctx, c.ID, c.Reason)
	if errors.Is(err, approval.ErrNoApproval) {
		return nil // never asked
	}
	return err
}

// stepGate is the output gate of agent steps: the model's notify_user
// calls are delivered; with none (or none usable) nothing is, and the run
// is still done, its reply being the step's output.
type stepGate struct{}

var (
	_ agentwork.OutputGate = stepGate{}
	_ agentwork.Deliverer  = stepGate{}
)

func (stepGate) Delivers(*agentwork.Run) string { return tools.DeliveryNotify }

func (stepGate) Inspect(ctx context.Context, run *agentwork.Run, out agentwork.Output) error {
	err := agentwork.NotifyGate{}.Inspect(ctx, run, out)
	if s, ok := agentwork.AsSkip(err); ok && (s.Reason == agentwork.ReasonAck || s.Reason == agentwork.ReasonEmpty) {
		run.Notice = nil
		return nil
	}
	return err
}

// stepSettings are the settings of an agent step's runner run: those of
// the step in its run's definition snapshot.
func (e *Engine) stepSettings(ctx context.Context, req agentwork.Request) (agentwork.Settings, error) {
	id, step := req.Metadata["workflow_run"], req.Metadata["workflow_step"]
	if id == "" {
		return agentwork.Settings{}, nil
	}
	rec, _, err := e.read(ctx, id)
	if err != nil {
		return agentwork.Settings{}, err
	}
	ref, ok := indexSteps(rec.Def)[step]
	if !ok || ref.step.Agent == nil {
		return agentwork.Settings{}, fmt.Errorf("workflow run %s has no agent step %q", id, step)
	}
	a := ref.step.Agent
	scope := a.Tools
	if len(scope) == 0 {
		scope = []string{tools.NotifyName} // none: notify_user only
	}
	return agentwork.Settings{Tools: scope, Model: a.Model, Fallback: a.Fallback, MaxSteps: a.MaxSteps, Memory: a.Memory}, nil
}
