package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/workflow"
)

func mustRegistry(t *testing.T, specs ...tools.Spec) *tools.Registry {
	t.Helper()
	reg, err := tools.NewRegistry(specs...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func start(t *testing.T, e *engine, name string, in map[string]any) string {
	t.Helper()
	run, _, err := e.Start(t.Context(), name, in, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return run.ID
}

// TestWaitAcrossRestart stops the engine while a wait step's timer is
// pending, lets the deadline pass, and starts another: the step ends once
// and nothing is left waiting.
func TestWaitAcrossRestart(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	set := defs(t, `
napper:
  steps:
    - {id: nap, wait: 2s}
    - {id: after, tool: put, args: {line: "after"}}
`)
	fx := newSideEffects(t)
	e1 := startEngine(t, b, testConfig(set, fx.tools()), nil)
	id := start(t, e1, "napper", nil)
	w.wait(t, "the wait step to start", func() bool { return len(w.of(id, "step_started")) > 0 })
	e1.stop()
	// Wait for the timer to fire with no engine running.
	fired := make(chan struct{})
	cons, err := b.JetStream().OrderedConsumer(t.Context(), bus.StreamTimers, jetstream.OrderedConsumerConfig{FilterSubjects: []string{b.Subjects.TimerFired("wf") + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	cc, err := cons.Consume(func(jetstream.Msg) { once.Do(func() { close(fired) }) })
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Stop()
	select {
	case <-fired:
	case <-time.After(waitTimeout):
		t.Fatal("the wait step's timer did not fire")
	}
	e2 := startEngine(t, b, testConfig(set, fx.tools()), nil)
	got := waitEnd(t, w, e2, id)
	if got.Status != workflow.RunDone || got.Steps["nap"].Status != workflow.StepDone {
		t.Fatalf("run %s, nap %s; want done, done", got.Status, got.Steps["nap"].Status)
	}
	n := 0
	for _, ev := range w.of(id, "step_finished") {
		if stepOf(ev) == "nap" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("nap finished %d times, want 1", n)
	}
	if len(got.Timers) != 0 {
		t.Errorf("timers left on the run: %v", got.Timers)
	}
	keys, err := bus.NewTimers(b).PendingKeys(t.Context(), "wf."+id)
	if err != nil || len(keys) != 0 {
		t.Errorf("pending timers of the run: %v, %v; want none", keys, err)
	}
}

func stepOf(ev bus.Event) string {
	var d struct{ Step string }
	_ = ev.DecodeData(&d)
	return d.Step
}

// TestTimeoutAndRetryBackoff: a call that hangs past its step's timeout
// is cut and fails the step timed out; a call that fails twice is tried
// again after its backoff (on the time engine) and succeeds the third
// time.
func TestTimeoutAndRetryBackoff(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	var flaky atomic.Int32
	hang := tools.Func("hang", "never answers", func(ctx context.Context, _ struct{}) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	})
	flake := tools.Func("flake", "fails twice", func(context.Context, struct{}) (string, error) {
		if flaky.Add(1) <= 2 {
			return "", errors.New("503 try later")
		}
		return "ok", nil
	})
	set := defs(t, `
slow:
  steps:
    - {id: h, tool: hang, timeout: 300ms}
flaky:
  steps:
    - {id: f, tool: flake, retry: {attempts: 3, backoff: 200ms}}
`)
	e := startEngine(t, b, testConfig(set, mustRegistry(t, hang, flake)), nil)
	slow, fl := start(t, e, "slow", nil), start(t, e, "flaky", nil)
	got := waitEnd(t, w, e, slow)
	if h := got.Steps["h"]; got.Status != workflow.RunFailed || h.Status != workflow.StepTimedOut || h.Error.Kind != workflow.ErrTimeout {
		t.Errorf("slow: run %s, step %s %v; want failed, timed_out", got.Status, h.Status, h.Error)
	}
	got = waitEnd(t, w, e, fl)
	if f := got.Steps["f"]; got.Status != workflow.RunDone || f.Attempt != 3 || len(f.Calls) != 3 || f.Output != "ok" {
		t.Errorf("flaky: run %s, step attempt %d, %d calls, output %v; want done on attempt 3", got.Status, f.Attempt, len(f.Calls), f.Output)
	}
}

// TestForeachConcurrency: 50 items with concurrency 5 never have more
// than 5 calls in flight.
func TestForeachConcurrency(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	var now, peak atomic.Int32
	// The first calls hold their places until 5 are in flight at once: a
	// cap not kept shows as a sixth, a concurrency not used as a call that
	// never sees the others (it gives up, and the run fails).
	full := make(chan struct{})
	var fill sync.Once
	count := tools.Func("count", "counts calls in flight", func(ctx context.Context, _ struct {
		I float64 `json:"i"`
	}) (string, error) {
		defer now.Add(-1)
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if n == 5 {
			fill.Do(func() { close(full) })
		}
		select {
		case <-full:
			return "1", nil
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(waitTimeout):
			return "", errors.New("5 calls never were in flight at once")
		}
	})
	set := defs(t, `
fan:
  inputs: {items: {type: array, required: true}}
  steps:
    - {id: each, foreach: inputs.items, concurrency: 5, tool: count, args: {i: "${{ item }}"}}
`)
	e := startEngine(t, b, testConfig(set, mustRegistry(t, count)), nil)
	items := make([]any, 50)
	for i := range items {
		items[i] = i
	}
	got := waitEnd(t, w, e, start(t, e, "fan", map[string]any{"items": items}))
	if got.Status != workflow.RunDone || len(got.Steps["each"].Items) != 50 {
		t.Fatalf("run %s with %d items; want done with 50", got.Status, len(got.Steps["each"].Items))
	}
	if p := peak.Load(); p != 5 {
		t.Errorf("at most %d calls in flight, want 5", p)
	}
	t.Logf("peak calls in flight: %d", peak.Load())
}

// TestAgentChildCancelRetry: an agent step through the real runner (its
// output schema met after the corrective retry), a child workflow step,
// a cancel, and a retry from a step.
func TestAgentChildCancelRetry(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	fx := newSideEffects(t)
	var broken atomic.Bool
	broken.Store(true)
	fragile := tools.Func("fragile", "fails while broken", func(context.Context, struct{}) (string, error) {
		if broken.Load() {
			return "", fmt.Errorf("broken: %w", tools.ErrRefused)
		}
		return "fixed", nil
	})
	reg := fx.tools()
	if err := reg.Register(fragile); err != nil {
		t.Fatal(err)
	}
	set := defs(t, `
analyse:
  steps:
    - id: find
      agent:
        prompt: "Which commit broke build 7?"
        output: {type: object, properties: {commit: {type: string}}, required: [commit]}
    - {id: note, tool: line, args: {line: "commit ${{ steps.find.output.commit }}"}}
    - {id: sub, workflow: child, with: {c: "${{ steps.find.output.commit }}"}}
child:
  inputs: {c: {type: string, required: true}}
  steps:
    - {id: echo, tool: put, args: {line: "child ${{ inputs.c }}"}}
sleepy:
  steps:
    - {id: zz, wait: 1h}
repair:
  steps:
    - {id: one, tool: line, args: {line: "repair one"}}
    - {id: two, tool: fragile}
`)
	p, err := script.New(script.Config{Rules: []script.Rule{
		{Match: script.Match{Prompt: "did not meet the required JSON schema"}, Reply: script.Reply{Text: "```json\n{\"commit\": \"abc123\"}\n```"}},
		{Match: script.Match{Prompt: "broke build"}, Reply: script.Reply{Text: "It was abc123, I think."}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e := startEngine(t, b, testConfig(set, reg), nil)
	r := agentwork.NewRunner(bustest.Client(t, b), p, mustRegistry(t, tools.Notify()), agentwork.Config{Concurrency: 2, MaxAttempts: 2, Backoff: []time.Duration{10 * time.Millisecond}, ShutdownGrace: 2 * time.Second})
	r.Handle(workflow.StepSource, e.StepPolicy())
	runInBackground(t, "Runner", r.Run)

	// The agent step, its corrective retry, and the child run.
	got := waitEnd(t, w, e, start(t, e, "analyse", nil))
	if got.Status != workflow.RunDone {
		t.Fatalf("analyse ended %s (%v at %s)", got.Status, got.Error, got.FailedStep)
	}
	find := got.Steps["find"]
	if fmt.Sprint(find.Output) != fmt.Sprint(map[string]any{"commit": "abc123"}) || find.Corrections != 1 || len(find.AgentRuns) != 2 {
		t.Errorf("find = %v, %d corrections, agent runs %v; want the commit after one correction, two runner runs", find.Output, find.Corrections, find.AgentRuns)
	}
	if fmt.Sprint(got.Steps["sub"].Output) != fmt.Sprint(map[string]any{"put": "child abc123"}) {
		t.Errorf("sub output = %v, want the child's last output", got.Steps["sub"].Output)
	}
	if n := fx.lines(t)["commit abc123"]; n != 1 {
		t.Errorf("note's line written %d times, want 1", n)
	}

	// Cancel a waiting run: it ends cancelled, with no timer left.
	sleepy := start(t, e, "sleepy", nil)
	w.wait(t, "the wait to start", func() bool { return len(w.of(sleepy, "step_started")) > 0 })
	if _, err := e.Cancel(t.Context(), sleepy, "test"); err != nil {
		t.Fatal(err)
	}
	got = waitEnd(t, w, e, sleepy)
	if got.Status != workflow.RunCancelled || len(got.Timers) != 0 {
		t.Errorf("sleepy: %s with timers %v; want cancelled, none", got.Status, got.Timers)
	}
	if keys, err := bus.NewTimers(b).PendingKeys(t.Context(), "wf."+sleepy); err != nil || len(keys) != 0 {
		t.Errorf("pending timers of the cancelled run: %v, %v", keys, err)
	}

	// Retry from the failed step: the step before is not run again.
	repair := start(t, e, "repair", nil)
	got = waitEnd(t, w, e, repair)
	if got.Status != workflow.RunFailed || got.FailedStep != "two" {
		t.Fatalf("repair ended %s at %q, want failed at two", got.Status, got.FailedStep)
	}
	if _, err := e.Retry(t.Context(), repair, "nope", "k"); err == nil {
		t.Error("Retry from a step the run does not have = nil, want an error")
	}
	broken.Store(false)
	for range 2 { // the same key twice: one retry
		if _, err := e.Retry(t.Context(), repair, "two", "k2"); err != nil {
			t.Fatal(err)
		}
	}
	w.wait(t, "the retried run to end done", func() bool { return len(w.of(repair, "done")) > 0 })
	got, err = e.Get(t.Context(), repair)
	if err != nil || got.Status != workflow.RunDone || got.Steps["two"].Output != "fixed" {
		t.Fatalf("after retry: %s, two = %v, %v; want done, fixed", got.Status, got.Steps["two"].Output, err)
	}
	if n := fx.lines(t)["repair one"]; n != 1 {
		t.Errorf("step one's line written %d times, want 1", n)
	}
	if _, err := e.Retry(t.Context(), repair, "", "k3"); !errors.Is(err, workflow.ErrNotRetryable) {
		t.Errorf("Retry of a done run = %v, want ErrNotRetryable", err)
	}
}

// TestToolInvalidArgsPermanent: a tool step whose arguments do not meet
// the tool's schema fails at once as permanent, and is not retried: the
// same arguments fail every time. The tool does not run.
func TestToolInvalidArgsPermanent(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	var calls atomic.Int32
	count := tools.Func("count", "takes a number", func(context.Context, struct {
		N int `json:"n"`
	}) (string, error) {
		calls.Add(1)
		return "ok", nil
	})
	set := defs(t, `
bad:
  inputs: {n: {type: string, default: "many"}}
  steps:
    - {id: c, tool: count, args: {n: "${{ inputs.n }}"}, retry: {attempts: 3, backoff: 50ms}}
`)
	e := startEngine(t, b, testConfig(set, mustRegistry(t, count)), nil)
	got := waitEnd(t, w, e, start(t, e, "bad", nil))
	c := got.Steps["c"]
	if got.Status != workflow.RunFailed || c.Error == nil || c.Error.Kind != workflow.ErrPermanent || c.Attempt != 1 {
		t.Fatalf("run %s, step %s attempt %d error %+v; want failed, permanent on attempt 1", got.Status, c.Status, c.Attempt, c.Error)
	}
	if !strings.Contains(c.Error.Message, "count") || !strings.Contains(c.Error.Message, "args") {
		t.Errorf("error %q; want it to name the tool and the step's args", c.Error.Message)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the tool ran %d times with arguments that do not meet its schema, want 0", n)
	}
}
