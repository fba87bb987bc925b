package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/workflow"
)

// startAtOnce starts n runs of name, half through each engine, all at
// once, and returns them as Start returned them.
func startAtOnce(t *testing.T, engines []*engine, name string, n int) []workflow.Run {
	t.Helper()
	runs := make([]workflow.Run, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-gate
			runs[i], _, errs[i] = engines[i%len(engines)].Start(t.Context(), name, nil, workflow.StartOptions{})
		})
	}
	close(gate)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Start #%d = %v", i, err)
		}
	}
	return runs
}

// byStatus counts the runs of name by status, as stored.
func byStatus(t *testing.T, e *engine, name string) map[workflow.RunStatus][]string {
	t.Helper()
	runs, err := e.List(t.Context(), workflow.Filter{Workflow: name, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	out := map[workflow.RunStatus][]string{}
	for _, r := range runs {
		s := r.Status
		if s == workflow.RunPending || s == workflow.RunRunning || s == workflow.RunWaiting {
			s = "in_flight"
		}
		out[s] = append(out[s], r.ID)
	}
	return out
}

const waiting = `
busy:
  concurrency: {limit: 1, overlap: %s}
  steps:
    - {id: w, wait: 1h}
`

func TestConcurrencySkipAcrossInstances(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	set := defs(t, fmt.Sprintf(waiting, "skip"))
	e1 := startEngine(t, b, testConfig(set), nil)
	e2 := startEngine(t, b, testConfig(set), nil)
	runs := startAtOnce(t, []*engine{e1, e2}, "busy", 4)
	var skipped []workflow.Run
	for _, r := range runs {
		if r.Status == workflow.RunSkipped {
			skipped = append(skipped, r)
		}
	}
	if len(skipped) != 3 {
		t.Fatalf("Start statuses: %v; want one run started and 3 skipped", statuses(runs))
	}
	got := byStatus(t, e1, "busy")
	if len(got["in_flight"]) != 1 || len(got[workflow.RunSkipped]) != 3 {
		t.Fatalf("runs stored: %v; want 1 in flight, 3 skipped", got)
	}
	for _, r := range skipped {
		if r.Error == nil || r.Error.Kind != workflow.ErrBusy || r.EndedAt.IsZero() {
			t.Errorf("skipped run %s: error %v, ended %v; want kind busy, ended", r.ID, r.Error, r.EndedAt)
		}
		w.wait(t, "the skipped event of "+r.ID, func() bool { return len(w.of(r.ID, "skipped")) > 0 })
		ev := w.of(r.ID, "skipped")
		var d struct {
			Reason string `json:"reason"`
			Limit  int    `json:"limit"`
		}
		if err := json.Unmarshal(ev[0].Data, &d); err != nil || len(ev) != 1 || d.Reason != workflow.ReasonBusy || d.Limit != 1 {
			t.Errorf("skipped events of %s: %d, data %s; want one, reason busy, limit 1", r.ID, len(ev), ev[0].Data)
		}
	}
	// A repeated Start of a skipped run (its key) is that run: no second event.
	r1, created, err := e1.Start(t.Context(), "busy", nil, workflow.StartOptions{IdempotencyKey: "k"})
	if err != nil || !created || r1.Status != workflow.RunSkipped {
		t.Fatalf("Start(key) = %s, %v, %v; want a new skipped run", r1.Status, created, err)
	}
	r2, created, err := e2.Start(t.Context(), "busy", nil, workflow.StartOptions{IdempotencyKey: "k"})
	if err != nil || created || r2.ID != r1.ID {
		t.Fatalf("Start(key) again = %s, %v, %v; want run %s, not created", r2.ID, created, err, r1.ID)
	}
	w.wait(t, "the skipped event", func() bool { return len(w.of(r1.ID, "skipped")) > 0 })
	if n := len(w.of(r1.ID, "skipped")); n != 1 {
		t.Errorf("skipped events of a run started twice: %d, want 1", n)
	}
}

func TestConcurrencyQueueAcrossInstancesAndRestarts(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	set := defs(t, fmt.Sprintf(waiting, "queue"))
	e1 := startEngine(t, b, testConfig(set), nil)
	e2 := startEngine(t, b, testConfig(set), nil)
	runs := startAtOnce(t, []*engine{e1, e2}, "busy", 3)
	got := byStatus(t, e1, "busy")
	if len(got["in_flight"]) != 1 || len(got[workflow.RunQueued]) != 2 {
		t.Fatalf("runs stored: %v (Start: %v); want 1 in flight, 2 queued", got, statuses(runs))
	}
	first := got["in_flight"][0]
	w.wait(t, "the first run to start", func() bool { return len(w.of(first, "started")) > 0 })
	// The queued runs survive a restart of every instance.
	e1.stop()
	e2.stop()
	e3 := startEngine(t, b, testConfig(set), nil)
	seen := map[string]bool{first: true}
	current := first
	for range 2 {
		if _, err := e3.Cancel(t.Context(), current, "next"); err != nil {
			t.Fatal(err)
		}
		waitEnd(t, w, e3, current)
		var next string
		w.wait(t, "a queued run to start", func() bool {
			for _, id := range got[workflow.RunQueued] {
				if !seen[id] && len(w.of(id, "started")) > 0 {
					next = id
					return true
				}
			}
			return false
		})
		now := byStatus(t, e3, "busy")
		if len(now["in_flight"]) != 1 || now["in_flight"][0] != next {
			t.Fatalf("after the end of %s: %v; want only %s in flight", current, now, next)
		}
		seen[next], current = true, next
	}
	if now := byStatus(t, e3, "busy"); len(now[workflow.RunQueued]) != 0 {
		t.Errorf("runs left queued: %v", now)
	}
}

func TestConcurrencyAllow(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	set := defs(t, fmt.Sprintf(waiting, "allow"))
	e1 := startEngine(t, b, testConfig(set), nil)
	e2 := startEngine(t, b, testConfig(set), nil)
	runs := startAtOnce(t, []*engine{e1, e2}, "busy", 3)
	for _, r := range runs {
		if r.Status != workflow.RunPending {
			t.Errorf("Start = %s, want pending (overlap allow)", r.Status)
		}
	}
	if got := byStatus(t, e1, "busy"); len(got["in_flight"]) != 3 {
		t.Errorf("runs stored: %v; want 3 in flight", got)
	}
}

func statuses(runs []workflow.Run) []workflow.RunStatus {
	var out []workflow.RunStatus
	for _, r := range runs {
		out = append(out, r.Status)
	}
	return out
}

func TestConcurrencyQueuedRunCanBeCancelled(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	w := watchEvents(t, b)
	e := startEngine(t, b, testConfig(defs(t, fmt.Sprintf(waiting, "queue"))), nil)
	first, _, err := e.Start(t.Context(), "busy", nil, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	queued, _, err := e.Start(t.Context(), "busy", nil, workflow.StartOptions{})
	if err != nil || queued.Status != workflow.RunQueued {
		t.Fatalf("Start at the limit = %s, %v; want queued", queued.Status, err)
	}
	if _, err := e.Cancel(t.Context(), queued.ID, "not wanted"); err != nil {
		t.Fatal(err)
	}
	if got := waitEnd(t, w, e, queued.ID); got.Status != workflow.RunCancelled || !got.StartedAt.IsZero() {
		t.Fatalf("cancelled queued run: %s, started %v; want cancelled, never started", got.Status, got.StartedAt)
	}
	if _, err := e.Cancel(t.Context(), first.ID, "done"); err != nil {
		t.Fatal(err)
	}
	waitEnd(t, w, e, first.ID)
	if got := byStatus(t, e, "busy"); len(got[workflow.RunCancelled]) != 2 || len(got) != 1 {
		t.Errorf("runs: %v; want both cancelled, none started", got)
	}
}

// countingKV counts the reads of a bucket.
type countingKV struct {
	jetstream.KeyValue
	gets, lists atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.gets.Add(1)
	return c.KeyValue.Get(ctx, key)
}

// Watch counts listings: a bus.Keys of a bucket with keys watches it.
func (c *countingKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	c.lists.Add(1)
	return c.KeyValue.Watch(ctx, keys, opts...)
}

// TestConcurrencyStartReadsItsOwnRuns: with 20,000 ended runs of another
// workflow kept, a start of a limited workflow reads its own runs in
// flight (an index of them), not every run kept.
func TestConcurrencyStartReadsItsOwnRuns(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	const kept = 20_000
	ctx := t.Context()
	js := b.JetStream()
	for i := range kept {
		id := fmt.Sprintf("old%05d", i)
		rec := fmt.Sprintf(`{"id":%q,"workflow":"other","status":"done","steps":{},"cause":{"kind":"manual"},"created_at":"2026-01-01T00:00:00Z"}`, id)
		if _, err := js.PublishAsync("$KV."+bus.BucketWorkflowRuns+"."+id, []byte(rec)); err != nil {
			t.Fatal(err)
		}
		if i%3000 == 2999 || i == kept-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(waitTimeout):
				t.Fatal("the kept runs were not stored in time")
			}
		}
	}
	set := defs(t, fmt.Sprintf(waiting, "skip"))
	c := bustest.Client(t, b)
	kv := &countingKV{KeyValue: c.WorkflowRuns}
	c.WorkflowRuns = kv
	e := workflow.NewEngine(c, testConfig(set))
	for i, want := range []workflow.RunStatus{workflow.RunPending, workflow.RunSkipped, workflow.RunSkipped} {
		kv.gets.Store(0)
		kv.lists.Store(0)
		began := time.Now()
		run, _, err := e.Start(ctx, "busy", nil, workflow.StartOptions{})
		if err != nil || run.Status != want {
			t.Fatalf("Start #%d with %d runs kept = %s, %v; want %s", i+1, kept, run.Status, err, want)
		}
		t.Logf("Start #%d with %d ended runs of another workflow kept: %s, %d reads, %d listings", i+1, kept, time.Since(began), kv.gets.Load(), kv.lists.Load())
		if i == 0 {
			continue // it may build the index from the runs, once
		}
		if n, l := kv.gets.Load(), kv.lists.Load(); l != 0 || n > 4 {
			t.Errorf("Start #%d: %d reads and %d listings of the runs bucket; want no listing and a read per run of its own (at most 4)", i+1, n, l)
		}
	}
}
