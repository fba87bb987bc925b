package workflow_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/workflow"
)

var t0 = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// def decodes and validates one workflow (with the open-incident child
// known, for workflow steps).
func def(t testing.TB, text string) *workflow.Workflow {
	t.Helper()
	w, err := workflow.DecodeFile("w.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	c, err := workflow.DecodeFile("open-incident.yaml", []byte(child))
	if err != nil {
		t.Fatal(err)
	}
	if err := (workflow.Set{"w": w, "open-incident": c}).Validate(workflow.Options{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// sim drives Decide as a driver would, and checks on every transition
// what must always hold: effect keys unique over the run's history, timer
// keys valid, a replayed event yields nothing.
type sim struct {
	t    testing.TB
	run  workflow.Run
	now  time.Time
	keys map[string]bool
	last []workflow.Effect
}

func newSim(t testing.TB, w *workflow.Workflow, inputs map[string]any) *sim {
	t.Helper()
	r, err := workflow.NewRun(w, "r1", inputs, workflow.Cause{Kind: workflow.CauseManual}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return &sim{t: t, run: r, now: t0, keys: map[string]bool{}}
}

func (s *sim) do(ev workflow.Event) []workflow.Effect {
	s.t.Helper()
	before := s.run
	next, effects, err := workflow.Decide(s.run, ev, s.now)
	if err != nil {
		s.t.Fatalf("Decide(%T %+v) = %v", ev, ev, err)
	}
	if !reflect.DeepEqual(before, s.run) {
		s.t.Fatalf("Decide changed the run it was given")
	}
	for _, e := range effects {
		if s.keys[e.Key()] {
			s.t.Fatalf("Decide(%T %+v): effect key %q given twice in the run's history", ev, ev, e.Key())
		}
		s.keys[e.Key()] = true
		if st, ok := e.(workflow.SetTimer); ok {
			if err := bus.CheckTimerKey(st.Timer); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	// The same event again: nothing new.
	again, more, err := workflow.Decide(next, ev, s.now)
	if _, retry := ev.(workflow.RetryFrom); err != nil && !retry {
		s.t.Fatalf("replay of %T: %v", ev, err)
	}
	if len(more) > 0 {
		s.t.Fatalf("replay of %T %+v gave effects %s", ev, ev, show(more))
	}
	if _, retry := ev.(workflow.RetryFrom); !retry && !reflect.DeepEqual(again.Status, next.Status) {
		s.t.Fatalf("replay of %T changed the status", ev)
	}
	s.run, s.last = next, effects
	return effects
}

func show(effects []workflow.Effect) string {
	var b []string
	for _, e := range effects {
		b = append(b, fmt.Sprintf("%T{%s}", e, e.Key()))
	}
	return strings.Join(b, " ")
}

// only returns the effects of type T.
func only[T workflow.Effect](effects []workflow.Effect) []T {
	var out []T
	for _, e := range effects {
		if x, ok := e.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

func one[T workflow.Effect](t testing.TB, effects []workflow.Effect) T {
	t.Helper()
	xs := only[T](effects)
	if len(xs) != 1 {
		var zero T
		t.Fatalf("want one %T in %s", zero, show(effects))
	}
	return xs[0]
}

func outcomes(effects []workflow.Effect) []string {
	var out []string
	for _, e := range only[workflow.Emit](effects) {
		out = append(out, e.Outcome)
	}
	return out
}

func TestDecideSequenceAndTypedArgs(t *testing.T) {
	t.Parallel()
	w := def(t, `inputs:
  n: {type: integer, required: true}
  opts: {type: object, default: {deep: true}}
steps:
  - id: a
    tool: calc
    args: {n: "${{ inputs.n + 1 }}", o: "${{ inputs.opts }}", text: "n=${{ inputs.n }}", lit: plain}
  - id: b
    tool: echo
    args: {prev: "${{ steps.a.output.sum }}", status: "${{ steps.a.status }}"}
`)
	s := newSim(t, w, map[string]any{"n": 41})
	eff := s.do(workflow.Started{})
	call := one[workflow.CallTool](t, eff)
	want := map[string]any{"n": 42.0, "o": map[string]any{"deep": true}, "text": "n=41", "lit": "plain"}
	if call.Name != "calc" || !reflect.DeepEqual(call.Args, want) || call.Attempt != 1 || call.Item != -1 {
		t.Fatalf("CallTool = %+v, want calc with %v", call, want)
	}
	if got := outcomes(eff); !reflect.DeepEqual(got, []string{"started", "step.started"}) {
		t.Errorf("emits = %v", got)
	}
	eff = s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: map[string]any{"sum": 7}})
	call = one[workflow.CallTool](t, eff)
	if !reflect.DeepEqual(call.Args, map[string]any{"prev": 7.0, "status": "done"}) {
		t.Fatalf("b args = %v", call.Args)
	}
	eff = s.do(workflow.StepFinished{Step: "b", Attempt: 1, Output: "ok"})
	if s.run.Status != workflow.RunDone || s.run.Output != "ok" {
		t.Fatalf("run = %s output %v, want done with ok", s.run.Status, s.run.Output)
	}
	if got := outcomes(eff); !reflect.DeepEqual(got, []string{"step.finished", "done"}) {
		t.Errorf("emits = %v", got)
	}
	// After the end nothing applies.
	if eff := s.do(workflow.StepFinished{Step: "b", Attempt: 1, Output: "again"}); len(eff) != 0 {
		t.Errorf("late result: %s", show(eff))
	}
}

func TestDecideConditionSkips(t *testing.T) {
	t.Parallel()
	w := def(t, `steps:
  - id: a
    tool: x
  - id: b
    if: steps.a.output.confidence > 0.7
    tool: revert
  - id: c
    tool: after
    args: {b: "${{ steps.b.status }}"}
`)
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: map[string]any{"confidence": 0.5}})
	b := s.run.Steps["b"]
	if b.Status != workflow.StepSkipped || b.Condition != false {
		t.Fatalf("b = %s with condition %v, want skipped with false", b.Status, b.Condition)
	}
	call := one[workflow.CallTool](t, eff)
	if call.Name != "after" || call.Args["b"] != "skipped" {
		t.Fatalf("next = %+v", call)
	}
}

func TestDecideRetryBackoff(t *testing.T) {
	t.Parallel()
	w := def(t, `steps:
  - id: a
    tool: flaky
    retry: {attempts: 3, backoff: 30s, exponential: true}
`)
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Err: &workflow.StepError{Kind: workflow.ErrTransient, Message: "503"}})
	timer := one[workflow.SetTimer](t, eff)
	if !timer.At.Equal(t0.Add(30*time.Second)) || timer.Fire.Kind != workflow.TimerRetry || timer.Fire.Attempt != 2 {
		t.Fatalf("retry timer = %+v, want attempt 2 at +30s", timer)
	}
	if st := s.run.Steps["a"]; st.Status != workflow.StepWaiting || s.run.Status != workflow.RunWaiting {
		t.Fatalf("step %s run %s, want both waiting", st.Status, s.run.Status)
	}
	// An old attempt's result while waiting: ignored.
	if eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: "late"}); len(eff) != 0 {
		t.Fatalf("stale result gave %s", show(eff))
	}
	s.now = timer.At
	eff = s.do(timer.Fire)
	if c := one[workflow.CallTool](t, eff); c.Attempt != 2 {
		t.Fatalf("attempt = %d, want 2", c.Attempt)
	}
	eff = s.do(workflow.StepFinished{Step: "a", Attempt: 2, Err: &workflow.StepError{Kind: workflow.ErrTransient, Message: "503"}})
	if timer = one[workflow.SetTimer](t, eff); !timer.At.Equal(s.now.Add(60 * time.Second)) {
		t.Fatalf("second backoff at %s, want +60s (exponential)", timer.At.Sub(s.now))
	}
	s.do(timer.Fire)
	eff = s.do(workflow.StepFinished{Step: "a", Attempt: 3, Err: &workflow.StepError{Kind: workflow.ErrTransient, Message: "503"}})
	if s.run.Status != workflow.RunFailed || s.run.FailedStep != "a" || len(only[workflow.SetTimer](eff)) != 0 {
		t.Fatalf("after 3 attempts: run %s at %q, effects %s; want failed at a, no more timers", s.run.Status, s.run.FailedStep, show(eff))
	}
}

func TestDecidePermanentNotRetried(t *testing.T) {
	t.Parallel()
	w := def(t, "targets: [ops]\nsteps:\n  - id: a\n    tool: x\n    retry: {attempts: 5}\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Err: &workflow.StepError{Kind: workflow.ErrPermanent, Message: "bad args"}})
	if s.run.Status != workflow.RunFailed || s.run.Steps["a"].Status != workflow.StepFailed {
		t.Fatalf("run %s step %s, want failed", s.run.Status, s.run.Steps["a"].Status)
	}
	alert := one[workflow.Alert](t, eff)
	if !reflect.DeepEqual(alert.Targets, []string{"ops"}) || !strings.Contains(alert.Text, "at step a: bad args") {
		t.Fatalf("alert = %+v", alert)
	}
	emit := only[workflow.Emit](eff)
	last := emit[len(emit)-1]
	if last.Outcome != "failed" || last.Data["failed_step"] != "a" {
		t.Fatalf("outcome = %+v", last)
	}
}

func TestDecideStepTimeout(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: a\n    tool: slow\n    timeout: 2m\n")
	s := newSim(t, w, nil)
	eff := s.do(workflow.Started{})
	timer := one[workflow.SetTimer](t, eff)
	if timer.Fire.Kind != workflow.TimerStepTimeout || !timer.At.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("timer = %+v, want the step timeout armed with the launch", timer)
	}
	call := one[workflow.CallTool](t, eff)
	s.now = timer.At
	eff = s.do(timer.Fire)
	if c := one[workflow.CancelStep](t, eff); c.Target != call.IdempotencyKey {
		t.Fatalf("cancel %q, want the call %q", c.Target, call.IdempotencyKey)
	}
	if st := s.run.Steps["a"]; st.Status != workflow.StepTimedOut || s.run.Status != workflow.RunFailed || s.run.Error.Kind != workflow.ErrTimeout {
		t.Fatalf("step %s run %s (%v), want timed_out and failed", st.Status, s.run.Status, s.run.Error)
	}
	// The result arriving after the timeout is stale.
	if eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: "late"}); len(eff) != 0 {
		t.Fatalf("late result gave %s", show(eff))
	}
}

func TestDecideFinishCancelsStepTimer(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: a\n    tool: x\n    timeout: 2m\n  - id: b\n    wait: 1m\n")
	s := newSim(t, w, nil)
	eff := s.do(workflow.Started{})
	timer := one[workflow.SetTimer](t, eff)
	eff = s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: 1})
	if c := one[workflow.CancelTimer](t, eff); c.Timer != timer.Timer {
		t.Fatalf("cancel %q, want %q", c.Timer, timer.Timer)
	}
	// The timeout firing anyway (it was under way) is stale.
	if eff := s.do(timer.Fire); len(eff) != 0 {
		t.Fatalf("stale timer gave %s", show(eff))
	}
}

func TestDecideWaitArmsInSameTransition(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: a\n    tool: x\n  - id: w\n    wait: 10m\n  - id: u\n    until: date(run.started_at) + duration('1h')\n  - id: z\n    tool: y\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: nil})
	timer := one[workflow.SetTimer](t, eff)
	if s.run.Steps["w"].Status != workflow.StepWaiting || s.run.Status != workflow.RunWaiting || !timer.At.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("w %s run %s timer %v, want waiting with the timer in the same transition", s.run.Steps["w"].Status, s.run.Status, timer.At)
	}
	s.now = timer.At
	eff = s.do(timer.Fire)
	timer = one[workflow.SetTimer](t, eff)
	if !timer.At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("until timer at %s, want started_at + 1h", timer.At)
	}
	s.now = timer.At
	eff = s.do(timer.Fire)
	if one[workflow.CallTool](t, eff).Name != "y" {
		t.Fatal("z did not start")
	}
}

func TestDecideForeachConcurrency(t *testing.T) {
	t.Parallel()
	w := def(t, `inputs:
  teams: {type: array}
steps:
  - id: each
    foreach: inputs.teams
    concurrency: 2
    notify: {text: "hi ${{ item }} #${{ index }}", targets: ["${{ item }}"]}
`)
	s := newSim(t, w, map[string]any{"teams": []any{"a", "b", "c", "d", "e"}})
	eff := s.do(workflow.Started{})
	ns := only[workflow.SendNotification](eff)
	if len(ns) != 2 || ns[0].Text != "hi a #0" || ns[1].Targets[0] != "b" {
		t.Fatalf("first launches = %+v, want items 0 and 1", ns)
	}
	eff = s.do(workflow.StepFinished{Step: "each", Item: 1, Attempt: 1, Output: "sent"})
	if n := one[workflow.SendNotification](t, eff); n.Item != 2 {
		t.Fatalf("next launch = item %d, want 2", n.Item)
	}
	for _, i := range []int{0, 2, 3, 4} {
		s.do(workflow.StepFinished{Step: "each", Item: i, Attempt: 1, Output: fmt.Sprint("sent ", i)})
	}
	st := s.run.Steps["each"]
	if s.run.Status != workflow.RunDone || st.Status != workflow.StepDone || len(st.Output.([]any)) != 5 {
		t.Fatalf("run %s step %s output %v", s.run.Status, st.Status, st.Output)
	}
}

func TestDecideForeachFailFastAndContinue(t *testing.T) {
	t.Parallel()
	for _, onFailure := range []string{"fail", "continue"} {
		w := def(t, fmt.Sprintf("steps:\n  - id: each\n    foreach: '[1, 2, 3]'\n    concurrency: 2\n    tool: t\n    args: {n: \"${{ item }}\"}\n    on_failure: %s\n  - id: next\n    tool: n\n", onFailure))
		s := newSim(t, w, nil)
		s.do(workflow.Started{})
		eff := s.do(workflow.StepFinished{Step: "each", Item: 0, Attempt: 1, Err: &workflow.StepError{Kind: workflow.ErrPermanent, Message: "no"}})
		st := s.run.Steps["each"]
		if onFailure == "fail" {
			if c := one[workflow.CancelStep](t, eff); c.Item != 1 {
				t.Fatalf("fail: cancelled item %d, want 1 (in flight)", c.Item)
			}
			if st.Status != workflow.StepFailed || st.Items[2].Status != workflow.StepCancelled || s.run.Status != workflow.RunFailed {
				t.Fatalf("fail: step %s item 2 %s run %s", st.Status, st.Items[2].Status, s.run.Status)
			}
			continue
		}
		if n := one[workflow.CallTool](t, eff); n.Item != 2 {
			t.Fatalf("continue: next launch %+v, want item 2", n)
		}
		s.do(workflow.StepFinished{Step: "each", Item: 1, Attempt: 1, Output: 1})
		eff = s.do(workflow.StepFinished{Step: "each", Item: 2, Attempt: 1, Output: 2})
		if st := s.run.Steps["each"]; st.Status != workflow.StepFailed || one[workflow.CallTool](t, eff).Name != "n" {
			t.Fatalf("continue: step %s, effects %s; want failed and the next step started", st.Status, show(eff))
		}
	}
}

func TestDecideParallelJoin(t *testing.T) {
	t.Parallel()
	w := def(t, `steps:
  - id: p
    parallel:
      left:
        - id: l1
          tool: a
        - id: l2
          tool: b
          args: {x: "${{ steps.l1.output }}"}
      right:
        - id: r1
          tool: c
  - id: after
    tool: d
    args: {both: "${{ steps.p.output }}"}
`)
	s := newSim(t, w, nil)
	eff := s.do(workflow.Started{})
	if got := len(only[workflow.CallTool](eff)); got != 2 {
		t.Fatalf("launched %d, want both branches' first steps", got)
	}
	s.do(workflow.StepFinished{Step: "r1", Attempt: 1, Output: "R"})
	eff = s.do(workflow.StepFinished{Step: "l1", Attempt: 1, Output: "L1"})
	if c := one[workflow.CallTool](t, eff); c.Name != "b" || c.Args["x"] != "L1" {
		t.Fatalf("l2 = %+v", c)
	}
	eff = s.do(workflow.StepFinished{Step: "l2", Attempt: 1, Output: "L2"})
	c := one[workflow.CallTool](t, eff)
	if want := map[string]any{"left": "L2", "right": "R"}; !reflect.DeepEqual(c.Args["both"], want) {
		t.Fatalf("joined output = %v, want %v", c.Args["both"], want)
	}
}

func TestDecideParallelFailureCancelsSiblings(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: p\n    parallel:\n      a:\n        - id: a1\n          tool: x\n      b:\n        - id: b1\n          tool: y\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "a1", Attempt: 1, Err: &workflow.StepError{Kind: workflow.ErrPermanent, Message: "boom"}})
	if c := one[workflow.CancelStep](t, eff); c.Step != "b1" {
		t.Fatalf("cancelled %s, want b1", c.Step)
	}
	if s.run.Status != workflow.RunFailed || s.run.Steps["b1"].Status != workflow.StepCancelled || !strings.Contains(s.run.Error.Message, "branch a, step a1: boom") {
		t.Fatalf("run %s (%v), b1 %s", s.run.Status, s.run.Error, s.run.Steps["b1"].Status)
	}
}

func TestDecideOnFailureContinue(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: a\n    tool: x\n    on_failure: continue\n  - id: b\n    tool: y\n    args: {why: \"${{ steps.a.error }}\", st: \"${{ steps.a.status }}\"}\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "a", Attempt: 1, Err: &workflow.StepError{Kind: workflow.ErrPermanent, Message: "nope"}})
	c := one[workflow.CallTool](t, eff)
	if c.Args["why"] != "nope" || c.Args["st"] != "failed" {
		t.Fatalf("b args = %v", c.Args)
	}
}

func TestDecideCancel(t *testing.T) {
	t.Parallel()
	w := def(t, "timeout: 1h\nsteps:\n  - id: p\n    parallel:\n      a:\n        - id: a1\n          tool: x\n          timeout: 5m\n      b:\n        - id: b1\n          wait: 1h\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.Cancel{Reason: "by ops"})
	if c := one[workflow.CancelStep](t, eff); c.Step != "a1" {
		t.Fatalf("cancel step = %s", c.Step)
	}
	if n := len(only[workflow.CancelTimer](eff)); n != 3 {
		t.Fatalf("cancelled %d timers, want 3 (run timeout, a1 timeout, b1 wait): %s", n, show(eff))
	}
	if s.run.Status != workflow.RunCancelled || s.run.Steps["a1"].Status != workflow.StepCancelled || s.run.Steps["b1"].Status != workflow.StepCancelled || len(s.run.Timers) != 0 {
		t.Fatalf("run %s a1 %s b1 %s timers %v", s.run.Status, s.run.Steps["a1"].Status, s.run.Steps["b1"].Status, s.run.Timers)
	}
	if got := outcomes(eff); got[len(got)-1] != "cancelled" {
		t.Fatalf("emits %v", got)
	}
}

func TestDecideRunTimeout(t *testing.T) {
	t.Parallel()
	w := def(t, "timeout: 48h\ntargets: [ops]\nsteps:\n  - id: a\n    tool: x\n")
	s := newSim(t, w, nil)
	eff := s.do(workflow.Started{})
	timer := one[workflow.SetTimer](t, eff)
	if timer.Fire.Kind != workflow.TimerRunTimeout || !timer.At.Equal(t0.Add(48*time.Hour)) {
		t.Fatalf("run timer = %+v, want armed with the start", timer)
	}
	s.now = timer.At
	eff = s.do(timer.Fire)
	one[workflow.CancelStep](t, eff)
	one[workflow.Alert](t, eff)
	if s.run.Status != workflow.RunTimedOut {
		t.Fatalf("run = %s, want timed_out", s.run.Status)
	}
}

func TestDecideAgentCorrectiveRetry(t *testing.T) {
	t.Parallel()
	w := def(t, `steps:
  - id: analyse
    agent:
      prompt: find it
      output: {type: object, properties: {commit: {type: string}}, required: [commit]}
`)
	for _, tc := range []struct {
		name   string
		second any
		want   workflow.StepStatus
	}{
		{"fixed", "```json\n{\"commit\": \"abc\"}\n```", workflow.StepDone},
		{"still wrong", `{"sha": "abc"}`, workflow.StepFailed},
	} {
		s := newSim(t, w, nil)
		s.do(workflow.Started{})
		eff := s.do(workflow.StepFinished{Step: "analyse", Attempt: 1, Output: "I think it is abc"})
		fix := one[workflow.RunAgent](t, eff)
		if fix.Attempt != 2 || !strings.Contains(fix.Correction, "not JSON") {
			t.Fatalf("%s: corrective = %+v", tc.name, fix)
		}
		s.do(workflow.StepFinished{Step: "analyse", Attempt: 2, Output: tc.second})
		st := s.run.Steps["analyse"]
		if st.Status != tc.want {
			t.Fatalf("%s: status %s (%v), want %s", tc.name, st.Status, st.Error, tc.want)
		}
		if tc.want == workflow.StepDone && !reflect.DeepEqual(st.Output, map[string]any{"commit": "abc"}) {
			t.Fatalf("%s: output %v", tc.name, st.Output)
		}
		if tc.want == workflow.StepFailed && st.Error.Kind != workflow.ErrSchema {
			t.Fatalf("%s: error %v, want kind schema", tc.name, st.Error)
		}
	}
}

func TestDecideRetryFrom(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: a\n    tool: x\n  - id: b\n    tool: y\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	first := one[workflow.CallTool](t, s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: "A"}))
	s.do(workflow.StepFinished{Step: "b", Attempt: 1, Err: &workflow.StepError{Kind: workflow.ErrPermanent, Message: "x"}})
	if s.run.Status != workflow.RunFailed {
		t.Fatal(s.run.Status)
	}
	eff := s.do(workflow.RetryFrom{})
	again := one[workflow.CallTool](t, eff)
	if again.Name != "y" || again.IdempotencyKey == first.IdempotencyKey || s.run.Steps["a"].Output != "A" {
		t.Fatalf("retry launched %+v (first key %s), a's output %v", again, first.IdempotencyKey, s.run.Steps["a"].Output)
	}
	s.do(workflow.StepFinished{Step: "b", Attempt: 1, Output: "B"})
	if s.run.Status != workflow.RunDone {
		t.Fatalf("run = %s", s.run.Status)
	}
	if _, _, err := workflow.Decide(s.run, workflow.RetryFrom{}, s.now); !errors.Is(err, workflow.ErrNotRetryable) {
		t.Fatalf("retry of a done run = %v", err)
	}
}

func TestDecideChild(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: c\n    workflow: open-incident\n    with: {commit: abc}\n")
	s := newSim(t, w, nil)
	start := one[workflow.StartChild](t, s.do(workflow.Started{}))
	if start.Workflow != "open-incident" || start.Depth != 1 || start.Inputs["commit"] != "abc" {
		t.Fatalf("StartChild = %+v", start)
	}
	s.do(workflow.ChildFinished{Step: "c", Attempt: 1, Status: workflow.RunDone, Output: "opened"})
	if s.run.Status != workflow.RunDone || s.run.Output != "opened" {
		t.Fatalf("run %s output %v", s.run.Status, s.run.Output)
	}

	deep := newSim(t, w, nil)
	deep.run.Depth = workflow.MaxDepth
	deep.do(workflow.Started{})
	if st := deep.run.Steps["c"]; st.Status != workflow.StepFailed || st.Error.Kind != workflow.ErrLimit {
		t.Fatalf("at max depth: %s %v, want failed with kind limit", st.Status, st.Error)
	}
}

func TestDecideExpressionErrorNamesStepAndField(t *testing.T) {
	t.Parallel()
	w := def(t, "inputs:\n  n: {type: number}\nsteps:\n  - id: a\n    tool: x\n    args: {v: \"${{ inputs.n.field }}\"}\n")
	s := newSim(t, w, map[string]any{"n": 1})
	s.do(workflow.Started{})
	st := s.run.Steps["a"]
	if st.Status != workflow.StepFailed || st.Error.Kind != workflow.ErrExpression || !strings.Contains(st.Error.Message, "workflow w: step a: args.v:") {
		t.Fatalf("a = %s %v, want failed naming the workflow, step and field", st.Status, st.Error)
	}
}

func TestDecideOutputBounded(t *testing.T) {
	t.Parallel()
	w := def(t, "steps:\n  - id: a\n    tool: x\n")
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	s.do(workflow.StepFinished{Step: "a", Attempt: 1, Output: strings.Repeat("x", workflow.MaxOutput*2)})
	st := s.run.Steps["a"]
	out, _ := st.Output.(string)
	if !st.Cut || len(out) > workflow.MaxOutput+200 || !strings.Contains(out, "[cut: the first") {
		t.Fatalf("output %d bytes, cut %v", len(out), st.Cut)
	}
}

func TestNewRunInputs(t *testing.T) {
	t.Parallel()
	w := def(t, "inputs:\n  build: {type: string, required: true}\n  n: {type: integer, default: 3}\nsteps:\n  - id: a\n    wait: 1s\n")
	_, err := workflow.NewRun(w, "r1", map[string]any{"build": 12, "x": 1}, workflow.Cause{}, t0)
	var ie *workflow.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "inputs.build: want a string, got the number 12") || !strings.Contains(err.Error(), "inputs.x: no such input") {
		t.Fatalf("NewRun = %v", err)
	}
	if _, err := workflow.NewRun(w, "r1", nil, workflow.Cause{}, t0); err == nil || !strings.Contains(err.Error(), "inputs.build: required") {
		t.Fatalf("NewRun without build = %v", err)
	}
	r, err := workflow.NewRun(w, "r1", map[string]any{"build": "b7"}, workflow.Cause{}, t0)
	if err != nil || r.Inputs["n"] != 3.0 {
		t.Fatalf("NewRun = %v, inputs %v; want the default n=3", err, r.Inputs)
	}
	if _, err := workflow.NewRun(w, "R 1", map[string]any{"build": "b"}, workflow.Cause{}, t0); err == nil {
		t.Fatal("a run id that is not a bus token was accepted")
	}
}
