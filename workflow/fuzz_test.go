package workflow_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/workflow"
)

// fuzzDef has every step kind and control: conditions, retries, step and
// run timeouts, a foreach with a cap, parallel branches, a child run, an
// agent with an output schema, waits.
const fuzzDef = `timeout: 1h
targets: [ops]
inputs:
  items: {type: array, default: [1, 2, 3, 4, 5, 6, 7]}
steps:
  - id: first
    tool: t
    retry: {attempts: 3, backoff: 1s, exponential: true}
    timeout: 1m
  - id: maybe
    if: steps.first.output == 'go'
    agent:
      prompt: "go ${{ steps.first.output }}"
      output: {type: object, properties: {ok: {type: boolean}}, required: [ok]}
    on_failure: continue
  - id: each
    foreach: inputs.items
    concurrency: 3
    tool: per-item
    args: {n: "${{ item }}", i: "${{ index }}"}
    retry: {attempts: 2}
    timeout: 30s
    on_failure: continue
  - id: p
    parallel:
      a:
        - id: a1
          wait: 5m
          timeout: 1m
        - id: a2
          workflow: open-incident
          with: {commit: "${{ steps.first.output }}"}
      b:
        - id: b1
          notify: {text: "hi", targets: [ops]}
          retry: {attempts: 2}
  - id: last
    tool: done
`

// inflight lists the launches a driver would be waiting on.
func inflight(r workflow.Run) []workflow.StepFinished {
	var out []workflow.StepFinished
	for _, id := range slices.Sorted(maps.Keys(r.Steps)) {
		st := r.Steps[id]
		if st.Kind == workflow.KindParallel {
			continue
		}
		if st.Items != nil {
			for i, it := range st.Items {
				if it.Status == workflow.StepRunning {
					out = append(out, workflow.StepFinished{Step: id, Item: i, Attempt: it.Attempt})
				}
			}
			continue
		}
		if st.Status == workflow.StepRunning {
			out = append(out, workflow.StepFinished{Step: id, Item: -1, Attempt: st.Attempt})
		}
	}
	return out
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 2, 1, 2, 1, 0, 0, 0, 2, 2, 2, 6, 0, 0})
	f.Add([]byte{0, 4, 5, 0, 0, 7, 7, 3, 8})
	f.Add([]byte{2, 2, 2, 2, 2, 2, 2, 5, 1, 1, 1, 1})
	w := def(f, fuzzDef)
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := workflow.NewRun(w, "fz", nil, workflow.Cause{Kind: workflow.CauseManual}, t0)
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		keys := map[string]bool{}
		var prev workflow.Event = workflow.Started{}
		events := []workflow.Event{workflow.Started{}}
		for i := 0; i < len(data); i++ {
			b := data[i]
			arg := 0
			if i+1 < len(data) {
				arg = int(data[i+1])
			}
			fl := inflight(r)
			var timers []workflow.TimerFired
			for _, k := range slices.Sorted(maps.Keys(r.Timers)) {
				timers = append(timers, r.Timers[k])
			}
			var ev workflow.Event
			switch b % 10 {
			case 0, 1, 6: // a result of something in flight
				if len(fl) == 0 {
					ev = workflow.Started{}
					break
				}
				sf := fl[arg%len(fl)]
				switch arg % 5 {
				case 0:
					sf.Output = "go"
				case 1:
					sf.Output = map[string]any{"ok": true}
				case 2:
					sf.Err = &workflow.StepError{Kind: workflow.ErrTransient, Message: "503"}
				case 3:
					sf.Err = &workflow.StepError{Kind: []workflow.ErrorKind{workflow.ErrPermanent, workflow.ErrInterrupted, workflow.ErrTimeout}[arg%3], Message: "x"}
				default:
					sf.Output = `{"ok": "no"}`
				}
				if sf.Step == "a2" && b%10 == 6 {
					st := workflow.RunDone
					if sf.Err != nil {
						st = workflow.RunFailed
					}
					ev = workflow.ChildFinished{Step: sf.Step, Item: sf.Item, Attempt: sf.Attempt, Status: st, Output: sf.Output, Err: sf.Err}
					break
				}
				ev = sf
			case 2, 3: // a timer fires
				if len(timers) == 0 {
					ev = workflow.Started{}
					break
				}
				tf := timers[arg%len(timers)]
				ev = tf
			case 4: // stale results and timers
				ids := []string{"first", "maybe", "each", "a1", "a2", "b1", "last"}
				ev = workflow.StepFinished{Step: ids[arg%len(ids)], Item: arg % 9, Attempt: arg%4 - 1, Output: "stale"}
				if arg%2 == 0 {
					ev = workflow.TimerFired{Kind: workflow.TimerRetry, Step: ids[arg%len(ids)], Item: arg % 3, Attempt: arg % 4}
				}
			case 5:
				if arg%4 == 0 {
					ev = workflow.Cancel{Reason: "fuzz"}
				} else {
					ev = prev
				}
			case 7:
				from := []string{"", "first", "each", "p", "last"}[arg%5]
				ev = workflow.RetryFrom{From: from}
			case 8:
				ev = prev
			default:
				ev = workflow.TimerFired{Kind: workflow.TimerRunTimeout}
			}
			now = now.Add(1e9)
			before := r
			beforeJSON, _ := json.Marshal(r)
			next, effects, err := workflow.Decide(r, ev, now)
			if afterJSON, _ := json.Marshal(r); string(afterJSON) != string(beforeJSON) {
				t.Fatalf("Decide changed its input run")
			}
			if err != nil {
				if _, ok := ev.(workflow.RetryFrom); ok {
					continue
				}
				if _, ok := ev.(workflow.StepFinished); ok {
					continue // unknown step in a stale event
				}
				t.Fatalf("Decide(%T %+v) = %v", ev, ev, err)
			}
			for _, e := range effects {
				if keys[e.Key()] {
					t.Fatalf("after %v: effect key %q twice in the history", events, e.Key())
				}
				keys[e.Key()] = true
				if st, ok := e.(workflow.SetTimer); ok {
					if err := bus.CheckTimerKey(st.Timer); err != nil {
						t.Fatal(err)
					}
				}
			}
			_, isRetry := ev.(workflow.RetryFrom)
			// A step that ended stays ended (with its status) unless
			// the run is retried.
			if !isRetry {
				for id, st := range before.Steps {
					if st.Status.Ended() && next.Steps[id].Status != st.Status {
						t.Fatalf("after %v then %T %+v: step %s went from %s to %s", events, ev, ev, id, st.Status, next.Steps[id].Status)
					}
				}
				if before.Status.Ended() && (next.Status != before.Status || len(effects) > 0) {
					t.Fatalf("ended run %s changed to %s with %d effects", before.Status, next.Status, len(effects))
				}
			}
			// Never more items in flight than the cap.
			active := 0
			for _, it := range next.Steps["each"].Items {
				if it.Status == workflow.StepRunning || it.Status == workflow.StepWaiting {
					active++
				}
			}
			if active > 3 {
				t.Fatalf("%d foreach items in flight, cap 3", active)
			}
			// An ended run holds nothing: no timers, nothing in flight.
			if next.Status.Ended() {
				if len(next.Timers) > 0 || len(inflight(next)) > 0 {
					t.Fatalf("run ended %s with timers %v and in flight %v", next.Status, next.Timers, inflight(next))
				}
				for id, st := range next.Steps {
					if st.Status == workflow.StepWaiting || st.Status == workflow.StepRunning {
						t.Fatalf("run ended %s with step %s %s", next.Status, id, st.Status)
					}
				}
			}
			// Replaying the event gives nothing new (a RetryFrom of a
			// running run is refused instead).
			again, more, _ := workflow.Decide(next, ev, now)
			if !isRetry && len(more) > 0 || again.Status != next.Status {
				t.Fatalf("replay of %T %+v gave %d effects, status %s → %s", ev, ev, len(more), next.Status, again.Status)
			}
			if _, err := json.Marshal(next); err != nil {
				t.Fatalf("run state is not JSON: %v", err)
			}
			if !reflect.DeepEqual(before.Def, next.Def) {
				t.Fatal("the definition changed")
			}
			r, prev = next, ev
			events = append(events, ev)
		}
	})
}
