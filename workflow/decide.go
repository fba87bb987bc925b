package workflow

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentwork/agentwork/approval"
)

// ErrNotRetryable is returned for Retry of a run that has not ended, or
// ended done.
var ErrNotRetryable = errors.New("workflow: only a failed, cancelled or timed-out run can be retried")

// Decide is the engine's decision: given a run's state, an event and the
// time, it returns the run's new state and the effects to carry out, in
// order. It does no I/O and does not change run. An event that no longer
// applies (an old attempt's result, a timer of a step that has ended, a
// second copy of an event) changes nothing and yields no effect. The error
// is for an event that cannot apply to this run at all (a step it does not
// have, a RetryFrom of a run that did not fail); run is then returned as it
// was.
func Decide(run Run, ev Event, now time.Time) (Run, []Effect, error) {
	r, effects, _, err := decide(run, ev, now)
	return r, effects, err
}

// decide is Decide, and says whether it changed the run.
func decide(run Run, ev Event, now time.Time) (Run, []Effect, bool, error) {
	if run.Def == nil {
		return run, nil, false, errors.New("workflow: run has no definition")
	}
	d := &decider{run: run.clone(), now: now, index: indexSteps(run.Def)}
	switch e := ev.(type) {
	case Started:
		if d.run.Status != RunPending {
			return run, nil, false, nil
		}
		d.run.Status, d.run.StartedAt = RunRunning, now
		d.emit(d.runKey("started"), "started", nil)
		if t := d.run.Def.Timeout; t > 0 {
			d.setTimer(TimerFired{Kind: TimerRunTimeout, Gen: d.run.Gen}, now.Add(t))
		}
	case StepFinished:
		if err := d.finished(e.Step, e.Item, e.Attempt, e.Output, e.Err); err != nil {
			return run, nil, false, err
		}
	case ChildFinished:
		var se *StepError
		if e.Status != RunDone {
			kind := ErrPermanent
			if e.Status == RunTimedOut {
				kind = ErrTimeout
			}
			se = &StepError{Kind: kind, Message: "the child run ended " + string(e.Status)}
			if e.Err != nil {
				se.Message += ": " + e.Err.Message
			}
		}
		if err := d.finished(e.Step, e.Item, e.Attempt, e.Output, se); err != nil {
			return run, nil, false, err
		}
	case TimerFired:
		if err := d.timer(e); err != nil {
			return run, nil, false, err
		}
	case ApprovalDecided:
		if err := d.approvalDecided(e); err != nil {
			return run, nil, false, err
		}
	case Cancel:
		if d.run.Status.Ended() {
			return run, nil, false, nil
		}
		msg := "cancelled"
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		d.end(RunCancelled, &StepError{Kind: ErrCancelled, Message: msg}, "")
	case RetryFrom:
		if err := d.retry(e.From); err != nil {
			return run, nil, false, err
		}
	default:
		return run, nil, false, fmt.Errorf("workflow: unknown event %T", ev)
	}
	if len(d.effects) == 0 && !d.changed {
		return run, nil, false, nil
	}
	if !d.run.Status.Ended() && d.run.Status != RunPending {
		d.advance()
	}
	d.run.UpdatedAt = now
	return d.run, d.effects, true, nil
}

// stepRef is where a step is in its definition.
type stepRef struct {
	step *Step
	// top is the top-level step it is in (itself at the top level).
	top int
}

func indexSteps(w *Workflow) map[string]stepRef {
	idx := map[string]stepRef{}
	var walk func(steps []Step, top int)
	walk = func(steps []Step, top int) {
		for i := range steps {
			t := top
			if t < 0 {
				t = i
			}
			idx[steps[i].ID] = stepRef{step: &steps[i], top: t}
			for _, b := range slices.Sorted(maps.Keys(steps[i].Parallel)) {
				walk(steps[i].Parallel[b], t)
			}
		}
	}
	walk(w.Steps, -1)
	return idx
}

type decider struct {
	run     Run
	now     time.Time
	index   map[string]stepRef
	effects []Effect
	changed bool
}

func (d *decider) add(e Effect) { d.effects = append(d.effects, e) }

// state returns the state of step id, creating it if the run has none
// (a run decoded from an older snapshot).
func (d *decider) state(s *Step) *StepState {
	st := d.run.Steps[s.ID]
	if st == nil {
		k, _ := s.Kind()
		st = &StepState{Kind: k, Exec: Exec{Status: StepPending}}
		d.run.Steps[s.ID] = st
	}
	return st
}

// exec returns the execution of step s for item (the step's own for a
// step that is not a foreach), or nil.
func (d *decider) exec(s *Step, item int) *Exec {
	st := d.state(s)
	if s.Foreach == "" {
		return &st.Exec
	}
	if item < 0 || item >= len(st.Items) {
		return nil
	}
	return &st.Items[item]
}

func itemOf(s *Step, item int) int {
	if s.Foreach == "" {
		return -1
	}
	return item
}

// Keys. Every token is a bus token, so a key is a valid timer key and
// message id: <run>.<step>.<item>.a<attempt>.g<gen>[.<what>].
func (d *decider) workKey(step string, item, attempt int) string {
	it := "all"
	if item >= 0 {
		it = fmt.Sprintf("i%d", item)
	}
	return fmt.Sprintf("wf.%s.%s.%s.a%d.g%d", d.run.ID, step, it, attempt, d.run.Gen)
}

func (d *decider) runKey(what string) string {
	return fmt.Sprintf("wf.%s.g%d.%s", d.run.ID, d.run.Gen, what)
}

// TimerKey is the time engine's key of the timer t of run: dot-separated
// bus tokens, unique per run, step, item, attempt and retry generation.
func TimerKey(run string, t TimerFired) string {
	if t.Kind == TimerRunTimeout {
		return fmt.Sprintf("wf.%s.g%d.run_timeout", run, t.Gen)
	}
	it := "all"
	if t.Item >= 0 {
		it = fmt.Sprintf("i%d", t.Item)
	}
	return fmt.Sprintf("wf.%s.%s.%s.a%d.g%d.%s", run, t.Step, it, t.Attempt, t.Gen, t.Kind)
}

func (d *decider) setTimer(t TimerFired, at time.Time) {
	key := TimerKey(d.run.ID, t)
	if d.run.Timers == nil {
		d.run.Timers = map[string]TimerFired{}
	}
	d.run.Timers[key] = t
	d.add(SetTimer{Timer: key, At: at, Fire: t})
	d.changed = true
}

func (d *decider) cancelTimer(t TimerFired) {
	key := TimerKey(d.run.ID, t)
	if _, ok := d.run.Timers[key]; !ok {
		return
	}
	delete(d.run.Timers, key)
	d.add(CancelTimer{Timer: key})
}

// cancelTimersOf cancels the armed timers of step (and item; -2: all
// items).
func (d *decider) cancelTimersOf(step string, item int) {
	for _, key := range slices.Sorted(maps.Keys(d.run.Timers)) {
		t := d.run.Timers[key]
		if t.Step == step && (item == -2 || t.Item == item) && t.Kind != TimerRunTimeout {
			d.cancelTimer(t)
		}
	}
}

func (d *decider) emit(key, outcome string, data map[string]any) {
	if data == nil {
		data = map[string]any{}
	}
	data["run"] = d.run.ID
	data["workflow"] = d.run.Workflow
	d.add(Emit{IdempotencyKey: key, Outcome: outcome, Subject: d.run.Workflow, Data: data})
}

func (d *decider) emitStep(what string, s *Step, item int, x *Exec) {
	data := map[string]any{"step": s.ID, "status": string(x.Status), "attempt": x.Attempt}
	if item >= 0 {
		data["item"] = item
	}
	if x.Error != nil && what == "finished" {
		data["error"] = map[string]any{"kind": string(x.Error.Kind), "message": x.Error.Message}
	}
	d.emit(d.workKey(s.ID, item, x.Attempt)+"."+what, "step."+what, data)
}

// env is the expressions' environment for step s's item (-1: none).
func (d *decider) env(s *Step, item int) Env {
	steps := make(map[string]any, len(d.run.Steps))
	for id, st := range d.run.Steps {
		var errMsg any
		if st.Error != nil && st.Status.Ended() {
			errMsg = st.Error.Message
		}
		sv := map[string]any{"output": st.Output, "status": string(st.Status), "error": errMsg}
		if st.Kind == KindApproval {
			// steps.<id>.approved, .decided_by, .comment: the decision.
			out, _ := st.Output.(map[string]any)
			for _, k := range []string{"approved", "decided_by", "comment", "verdict"} {
				sv[k] = out[k]
			}
		}
		steps[id] = sv
	}
	e := Env{
		Inputs: d.run.Inputs,
		Steps:  steps,
		Index:  -1,
		Run: map[string]any{
			"id": d.run.ID, "workflow": d.run.Workflow,
			"started_at": d.run.StartedAt.UTC().Format(time.RFC3339Nano),
		},
		Event: d.run.Event,
	}
	if s != nil && item >= 0 {
		st := d.state(s)
		if item < len(st.Values) {
			e.Item, e.Index = st.Values[item], item
		}
	}
	return e
}

// advance starts what can start and ends the run when its steps have.
func (d *decider) advance() {
	res, failed := d.sequence(d.run.Def.Steps)
	switch res {
	case seqDone:
		var out any
		if n := len(d.run.Def.Steps); n > 0 {
			out = d.run.Steps[d.run.Def.Steps[n-1].ID].Output
		}
		d.run.Output = out
		d.end(RunDone, nil, "")
	case seqFailed:
		// A step's timeout fails the run (the error says timeout);
		// timed_out is the run's own timeout.
		d.end(RunFailed, d.run.Steps[failed].Error, failed)
	default:
		// Waiting when no launched step is in flight, only timers.
		status := RunWaiting
		for _, st := range d.run.Steps {
			switch {
			case st.Kind == KindParallel:
			case st.Items != nil:
				for _, it := range st.Items {
					if it.Status == StepRunning {
						status = RunRunning
					}
				}
			case st.Status == StepRunning:
				status = RunRunning
			}
		}
		if d.run.Status != status {
			d.run.Status = status
			d.changed = true
		}
	}
}

type seqResult int

const (
	seqBusy seqResult = iota
	seqDone
	seqFailed
)

// sequence starts the next step of steps when the one before has ended,
// and says whether the sequence is busy, done or failed (at which step).
func (d *decider) sequence(steps []Step) (seqResult, string) {
	for i := range steps {
		s := &steps[i]
		st := d.state(s)
		if st.Status == StepPending {
			d.start(s)
		}
		if st.Status == StepRunning {
			switch {
			case s.Parallel != nil:
				d.parallel(s)
			case s.Foreach != "":
				d.pump(s)
			}
		}
		switch st.Status {
		case StepDone, StepSkipped:
			continue
		case StepFailed, StepTimedOut, StepInterrupted:
			if s.OnFailure == OnFailureContinue {
				continue
			}
			return seqFailed, s.ID
		case StepCancelled:
			return seqFailed, s.ID
		default:
			return seqBusy, ""
		}
	}
	return seqDone, ""
}

// start starts a pending step: its condition, then its kind.
func (d *decider) start(s *Step) {
	st := d.state(s)
	d.changed = true
	st.StartedAt = d.now
	if s.If != "" {
		v, err := d.eval(s, -1, "if", condSource(s.If))
		if err == nil {
			if _, ok := v.(bool); !ok && v != nil {
				err = fmt.Errorf("if: gave %s, want true or false", describe(v))
			}
		}
		if err != nil {
			d.final(s, -1, &st.Exec, &StepError{Kind: ErrExpression, Message: err.Error()})
			return
		}
		st.Condition = v
		if v != true {
			st.Status, st.EndedAt = StepSkipped, d.now
			d.emitStep("finished", s, -1, &st.Exec)
			return
		}
	}
	switch {
	case s.Foreach != "":
		v, err := d.eval(s, -1, "foreach", condSource(s.Foreach))
		var list []any
		if err == nil {
			var ok bool
			if list, ok = v.([]any); !ok && v != nil {
				err = fmt.Errorf("foreach: gave %s, want a list", describe(v))
			}
		}
		if err != nil {
			d.final(s, -1, &st.Exec, &StepError{Kind: ErrExpression, Message: err.Error()})
			return
		}
		if len(list) > MaxForeachItems {
			d.final(s, -1, &st.Exec, &StepError{Kind: ErrLimit, Message: fmt.Sprintf("foreach: %d items, over the limit of %d; split the list", len(list), MaxForeachItems)})
			return
		}
		st.Values = list
		st.Items = make([]Exec, len(list))
		for i := range st.Items {
			st.Items[i].Status = StepPending
		}
		st.Status, st.Attempt = StepRunning, 1
		d.emitStep("started", s, -1, &st.Exec)
	case s.Parallel != nil:
		st.Status, st.Attempt = StepRunning, 1
		d.emitStep("started", s, -1, &st.Exec)
	default:
		d.launch(s, -1, 1, "")
	}
}

func (d *decider) eval(s *Step, item int, field, src string) (any, error) {
	p, err := compileExpr(src)
	if err == nil {
		var v any
		if v, err = p.eval(d.env(s, item)); err == nil {
			return v, nil
		}
	}
	return nil, fmt.Errorf("workflow %s: step %s: %s: %w", d.run.Workflow, s.ID, field, err)
}

func (d *decider) render(s *Step, item int, field string, v any) (any, error) {
	out, err := render(v, d.env(s, item), field)
	if err != nil {
		return nil, fmt.Errorf("workflow %s: step %s: %w", d.run.Workflow, s.ID, err)
	}
	return out, nil
}

// launch starts attempt of step s (of item for a foreach step).
// correction is set for an agent step's corrective retry.
func (d *decider) launch(s *Step, item, attempt int, correction string) {
	x := d.exec(s, item)
	item = itemOf(s, item)
	d.changed = true
	x.Status, x.Attempt, x.EndedAt, x.WaitUntil = StepRunning, attempt, time.Time{}, time.Time{}
	if x.StartedAt.IsZero() {
		x.StartedAt = d.now
	}
	w := Work{Run: d.run.ID, Step: s.ID, Item: item, Attempt: attempt}
	key := d.workKey(s.ID, item, attempt)
	fail := func(err error) {
		d.final(s, item, x, &StepError{Kind: ErrExpression, Message: err.Error()})
	}
	d.emitStep("started", s, item, x)
	kind, _ := s.Kind()
	switch kind {
	case KindAgent:
		a := s.Agent
		prompt, err := renderString(a.Prompt, d.env(s, item), "agent.prompt")
		if err != nil {
			fail(fmt.Errorf("workflow %s: step %s: %w", d.run.Workflow, s.ID, err))
			return
		}
		d.add(RunAgent{IdempotencyKey: key, Work: w, Prompt: prompt, Output: a.Output, Tools: a.Tools,
			Model: a.Model, Fallback: a.Fallback, MaxSteps: a.MaxSteps, Memory: a.Memory, Correction: correction})
	case KindTool:
		args, err := d.render(s, item, "args", orEmpty(s.Args))
		if err != nil {
			fail(err)
			return
		}
		d.add(CallTool{IdempotencyKey: key, Work: w, Name: s.Tool, Args: args.(map[string]any)})
	case KindNotify:
		n := s.Notify
		text, err := renderString(n.Text, d.env(s, item), "notify.text")
		if err != nil {
			fail(fmt.Errorf("workflow %s: step %s: %w", d.run.Workflow, s.ID, err))
			return
		}
		targets := make([]string, 0, len(n.Targets))
		for i, t := range n.Targets {
			v, err := renderString(t, d.env(s, item), fmt.Sprintf("notify.targets[%d]", i))
			if err != nil {
				fail(fmt.Errorf("workflow %s: step %s: %w", d.run.Workflow, s.ID, err))
				return
			}
			targets = append(targets, v)
		}
		if len(targets) == 0 {
			targets = d.run.Def.Targets
		}
		d.add(SendNotification{IdempotencyKey: key, Work: w, Text: text, Targets: targets, Urgency: n.Urgency})
	case KindWorkflow:
		if d.run.Depth+1 > MaxDepth {
			d.final(s, item, x, &StepError{Kind: ErrLimit, Message: fmt.Sprintf("a child run would be %d deep, over the limit of %d", d.run.Depth+1, MaxDepth)})
			return
		}
		with, err := d.render(s, item, "with", orEmpty(s.With))
		if err != nil {
			fail(err)
			return
		}
		d.add(StartChild{IdempotencyKey: key, Work: w, Workflow: s.Workflow, Inputs: with.(map[string]any), Depth: d.run.Depth + 1})
	case KindWait:
		at := d.now.Add(s.Wait)
		if s.Until != "" {
			v, err := d.eval(s, item, "until", condSource(s.Until))
			if err == nil {
				at, err = toTime(v)
				if err != nil {
					err = fmt.Errorf("workflow %s: step %s: until: %w", d.run.Workflow, s.ID, err)
				}
			}
			if err != nil {
				fail(err)
				return
			}
		}
		x.Status, x.WaitUntil = StepWaiting, at
		d.setTimer(TimerFired{Kind: TimerWait, Step: s.ID, Item: item, Attempt: attempt, Gen: d.run.Gen}, at)
	case KindApproval:
		a := s.Approval
		msg, err := renderString(a.Message, d.env(s, item), "approval.message")
		if err != nil {
			fail(fmt.Errorf("workflow %s: step %s: %w", d.run.Workflow, s.ID, err))
			return
		}
		targets := make([]string, 0, len(a.Targets))
		for i, t := range a.Targets {
			v, err := renderString(t, d.env(s, item), fmt.Sprintf("approval.targets[%d]", i))
			if err != nil {
				fail(fmt.Errorf("workflow %s: step %s: %w", d.run.Workflow, s.ID, err))
				return
			}
			targets = append(targets, v)
		}
		if len(targets) == 0 {
			targets = slices.Clone(d.run.Def.Targets)
		}
		x.Status, x.Approval = StepWaiting, ApprovalID(d.run.ID, s.ID, d.run.Gen, attempt)
		if a.Timeout > 0 {
			x.WaitUntil = d.now.Add(a.Timeout)
		}
		d.add(AskApproval{IdempotencyKey: key, Work: w, Gen: d.run.Gen, ID: x.Approval, Message: msg, Targets: targets,
			Approvers: slices.Clone(a.Approvers), Timeout: a.Timeout, OnTimeout: a.OnTimeout, Reminder: a.Reminder})
		return // an approval has its own deadline; the step's timeout is refused at load
	default:
		d.final(s, item, x, &StepError{Kind: ErrPermanent, Message: fmt.Sprintf("step kind %q is not supported by this engine", kind)})
		return
	}
	if s.Timeout > 0 {
		d.setTimer(TimerFired{Kind: TimerStepTimeout, Step: s.ID, Item: item, Attempt: attempt, Gen: d.run.Gen}, d.now.Add(s.Timeout))
	}
}

func toTime(v any) (time.Time, error) {
	if s, ok := v.(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("gave %s, want a time (e.g. date(\"2026-12-01T09:00:00Z\"), or run.started_at as a date plus a duration)", describe(v))
}

// timer applies a fired timer.
func (d *decider) timer(t TimerFired) error {
	key := TimerKey(d.run.ID, t)
	if _, armed := d.run.Timers[key]; !armed || d.run.Status.Ended() {
		return nil // cancelled, already fired, or of an older generation
	}
	delete(d.run.Timers, key)
	d.changed = true
	if t.Kind == TimerRunTimeout {
		d.end(RunTimedOut, &StepError{Kind: ErrTimeout, Message: fmt.Sprintf("the run passed its timeout of %s", d.run.Def.Timeout)}, "")
		return nil
	}
	ref, ok := d.index[t.Step]
	if !ok {
		return nil
	}
	s := ref.step
	x := d.exec(s, t.Item)
	if x == nil {
		return nil
	}
	item := itemOf(s, t.Item)
	switch t.Kind {
	case TimerWait:
		if x.Status == StepWaiting && x.Attempt == t.Attempt {
			d.cancelTimer(TimerFired{Kind: TimerStepTimeout, Step: s.ID, Item: item, Attempt: t.Attempt, Gen: d.run.Gen})
			d.succeed(s, item, x, map[string]any{"waited_until": x.WaitUntil.UTC().Format(time.RFC3339Nano)})
		}
	case TimerRetry:
		if x.Status == StepWaiting && x.Attempt+1 == t.Attempt {
			x.Corrected = false
			d.launch(s, item, t.Attempt, "")
		}
	case TimerStepTimeout:
		if x.Status.active() && x.Attempt == t.Attempt {
			if x.Status == StepRunning && s.Wait == 0 && s.Until == "" {
				d.add(CancelStep{Work: Work{Run: d.run.ID, Step: s.ID, Item: item, Attempt: x.Attempt}, Target: d.workKey(s.ID, item, x.Attempt)})
			}
			d.cancelTimer(TimerFired{Kind: TimerWait, Step: s.ID, Item: item, Attempt: t.Attempt, Gen: d.run.Gen})
			d.failed(s, item, x, &StepError{Kind: ErrTimeout, Message: fmt.Sprintf("the attempt passed the step's timeout of %s", s.Timeout)})
		}
	}
	return nil
}

// ApprovalID is the id of the approval that attempt of step of run asks
// for in the run's retry generation gen: approval.WorkflowStepID, with the
// generation in the step's part when a retry made one (a retried run asks
// afresh).
func ApprovalID(run, step string, gen, attempt int) string {
	if gen > 0 {
		step = fmt.Sprintf("%s.g%d", step, gen)
	}
	return approval.WorkflowStepID(run, step, attempt)
}

// approvalDecided applies the end of an approval step's approval.
func (d *decider) approvalDecided(e ApprovalDecided) error {
	ref, ok := d.index[e.Step]
	if !ok {
		return fmt.Errorf("workflow: run %s has no step %q", d.run.ID, e.Step)
	}
	if d.run.Status.Ended() || e.Gen != d.run.Gen {
		return nil
	}
	s := ref.step
	x := d.exec(s, e.Item)
	if x == nil || s.Approval == nil || x.Status != StepWaiting || x.Attempt != e.Attempt {
		return nil // stale: decided before, or of an older attempt
	}
	item := itemOf(s, e.Item)
	d.changed = true
	switch {
	case e.Err != nil:
		d.final(s, item, x, e.Err)
	case e.Verdict == string(approval.Fail):
		d.final(s, item, x, &StepError{Kind: ErrTimeout, Message: fmt.Sprintf("nobody answered approval %s in time, and its on_timeout is fail", e.ID)})
	default:
		out := map[string]any{
			"approved": e.Verdict == string(approval.Approve), "verdict": e.Verdict, "state": e.State,
			"decided_by": e.By, "comment": e.Comment, "decided_at": e.At.UTC().Format(time.RFC3339Nano), "approval": e.ID,
		}
		d.succeed(s, item, x, out)
	}
	return nil
}
