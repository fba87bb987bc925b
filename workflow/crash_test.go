package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/workflow"
)

// mixed alternates a tool that is not idempotent (its failure does not
// fail the run) with one that is.
const mixed = `
mixed:
  inputs: {n: {type: string, required: true}}
  steps:
    - {id: s1, tool: line, args: {line: "${{ inputs.n }} s1"}, on_failure: continue}
    - {id: s2, tool: put, args: {line: "${{ inputs.n }} s2"}}
    - {id: s3, tool: line, args: {line: "${{ inputs.n }} s3"}, on_failure: continue}
    - {id: s4, tool: put, args: {line: "${{ inputs.n }} s4"}}
    - {id: s5, tool: line, args: {line: "${{ inputs.n }} s5"}, on_failure: continue}
    - {id: s6, tool: put, args: {line: "${{ inputs.n }} s6"}}
`

// TestCrashAnywhereRepeatsNothing stops an engine at a point of a run (a
// hook that makes the handler stop there as a killed process would, or a
// tool call cut by the shutdown) and finishes the run with a fresh engine:
// the run ends done, a non-idempotent tool's line is written at most once
// (a call cut short is recorded interrupted), an idempotent one's output
// is there once.
func TestCrashAnywhereRepeatsNothing(t *testing.T) {
	t.Parallel()
	type crash struct {
		point string // hook point, or "mid-call" (in the line tool of step)
		n     int    // the n-th time the point is reached
		step  string
	}
	cases := []crash{
		{point: "written", n: 1}, {point: "written", n: 2}, {point: "written", n: 4}, {point: "written", n: 7},
		{point: "call", n: 1}, {point: "call", n: 2}, {point: "call", n: 5},
		{point: "called", n: 1}, {point: "called", n: 3}, {point: "called", n: 4},
		{point: "mid-call", step: "s1"}, {point: "mid-call", step: "s5"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s-%d%s", c.point, c.n, c.step), func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			fx := newSideEffects(t)
			w := watchEvents(t, b)
			set := defs(t, mixed)
			crashed := make(chan struct{})
			var once sync.Once
			var hook func(point, key string) error
			if c.point == "mid-call" {
				fx.block = func(ctx context.Context, line string) error {
					if line != "r "+c.step {
						return nil
					}
					first := false
					once.Do(func() { first = true; close(crashed) })
					if !first {
						return nil
					}
					<-ctx.Done() // the engine stops while the call runs
					return ctx.Err()
				}
			} else {
				var mu sync.Mutex
				seen := 0
				hook = func(point, _ string) error {
					if point != c.point {
						return nil
					}
					mu.Lock()
					defer mu.Unlock()
					seen++
					if seen != c.n {
						return nil
					}
					close(crashed)
					return errors.New("killed")
				}
			}
			e1 := startEngine(t, b, testConfig(set, fx.tools()), hook)
			run, _, err := e1.Start(t.Context(), "mixed", map[string]any{"n": "r"}, workflow.StartOptions{})
			if err != nil {
				t.Fatal(err)
			}
			<-crashed
			e1.stop()
			fx.mu.Lock()
			fx.block = nil
			fx.mu.Unlock()
			e2 := startEngine(t, b, testConfig(set, fx.tools()), nil)
			got := waitEnd(t, w, e2, run.ID)
			if got.Status != workflow.RunDone {
				t.Fatalf("run ended %s (%v), want done", got.Status, got.Error)
			}
			lines := fx.lines(t)
			for _, id := range []string{"s1", "s3", "s5"} {
				st, n := got.Steps[id], lines["r "+id]
				switch {
				case n > 1:
					t.Errorf("line of %s written %d times, want at most 1", id, n)
				case st.Status == workflow.StepDone && n != 1:
					t.Errorf("step %s done but its line written %d times", id, n)
				case st.Status == workflow.StepInterrupted && (len(st.Calls) == 0 || st.Calls[len(st.Calls)-1].Outcome != tools.OutcomeInterrupted):
					t.Errorf("step %s interrupted, calls %+v: want the last call interrupted", id, st.Calls)
				case st.Status != workflow.StepDone && st.Status != workflow.StepInterrupted:
					t.Errorf("step %s ended %s, want done or interrupted", id, st.Status)
				}
				if st.Status == workflow.StepInterrupted {
					t.Logf("step %s interrupted (line written %d times)", id, n)
				}
			}
			for _, id := range []string{"s2", "s4", "s6"} {
				st := got.Steps[id]
				if st.Status != workflow.StepDone || fmt.Sprint(st.Output) != fmt.Sprint(map[string]any{"put": "r " + id}) {
					t.Errorf("step %s = %s %v, want done with its output", id, st.Status, st.Output)
				}
			}
			if len(got.Timers) != 0 {
				t.Errorf("timers left: %v", got.Timers)
			}
			if n := len(w.of(run.ID, "done")); n != 1 {
				t.Errorf("%d done events, want 1", n)
			}
		})
	}
}

// TestTwoEnginesTwentyRuns runs 20 runs of a 6-step workflow on two
// engines sharing a bus: every step's line is written exactly once.
func TestTwoEnginesTwentyRuns(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fx := newSideEffects(t)
	w := watchEvents(t, b)
	set := defs(t, sixSteps)
	e1 := startEngine(t, b, testConfig(set, fx.tools()), nil)
	startEngine(t, b, testConfig(set, fx.tools()), nil)
	var ids []string
	for i := range 20 {
		run, _, err := e1.Start(t.Context(), "six", map[string]any{"n": fmt.Sprintf("r%d", i)}, workflow.StartOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, run.ID)
	}
	for _, id := range ids {
		if got := waitEnd(t, w, e1, id); got.Status != workflow.RunDone {
			t.Errorf("run %s ended %s (%v)", id, got.Status, got.Error)
		}
	}
	lines := fx.lines(t)
	for i := range 20 {
		for s := 1; s <= 6; s++ {
			if n := lines[fmt.Sprintf("r%d s%d", i, s)]; n != 1 {
				t.Errorf("line r%d s%d written %d times, want 1", i, s, n)
			}
		}
	}
}
