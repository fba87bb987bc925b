package cron

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is a Monday, 10:00:30 UTC: the clock of tests that do not run the
// scheduler (timers fire on the server's real clock).
var t0 = time.Date(2026, 5, 4, 10, 0, 30, 0, time.UTC)

const waitFor = 15 * time.Second

// startScheduler runs a scheduler on b, on the real clock, and serves its
// API, as serve does, until the test ends (or until the returned stop is
// called); its tick results go to results. mods adjust the scheduler
// before it runs. A fire that fails is handed out again after 100ms
// (doubling up to 1s).
func startScheduler(t *testing.T, b *bus.Bus, cfg Config, results chan TickResult, mods ...func(*Scheduler)) (*Scheduler, func()) {
	t.Helper()
	s, err := New(b, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.queuePoll = 50 * time.Millisecond
	s.retryBase, s.retryMax = 100*time.Millisecond, time.Second
	s.onTick = func(r TickResult) { results <- r }
	for _, m := range mods {
		m(s)
	}
	stopAPI, err := b.StartService(s.Service())
	if err != nil {
		t.Fatalf("StartService: %v", err)
	}
	stopRun := runUntil(t, s.Run)
	stop := func() {
		stopRun()
		if err := stopAPI(); err != nil {
			t.Errorf("stop the API: %v", err)
		}
	}
	t.Cleanup(stop)
	select {
	case <-s.Started():
	case <-time.After(waitFor):
		t.Fatal("scheduler not ready")
	}
	return s, stop
}

// armAhead has the scheduler arm the timers of ticks up to d ahead (0:
// every tick, however far), for tests of what a far tick's timer does.
func armAhead(d time.Duration) func(*Scheduler) { return func(s *Scheduler) { s.ahead = d } }

// runUntil runs fn in a goroutine; the returned func cancels it and
// waits for it (idempotent).
func runUntil(t *testing.T, fn func(context.Context) error) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(waitFor):
			t.Error("Run did not return after cancel")
		}
	}
}

// nextResults collects n tick results.
func nextResults(t *testing.T, results chan TickResult, n int) []TickResult {
	t.Helper()
	var out []TickResult
	deadline := time.After(waitFor)
	for len(out) < n {
		select {
		case <-deadline:
			t.Fatalf("got %d tick results %v, want %d", len(out), out, n)
		case r := <-results:
			out = append(out, r)
		}
	}
	return out
}

// storedRequest is a request as stored in AGENTWORK_REQUESTS.
type storedRequest struct {
	MsgID string
	Req   agentwork.Request
}

// requests reads every stored cron request.
func requests(t *testing.T, b *bus.Bus) []storedRequest {
	t.Helper()
	ctx := t.Context()
	cons, err := b.JetStream().OrderedConsumer(ctx, bus.StreamRequests, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{b.Subjects.Request(bus.SourceCron, "*")},
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []storedRequest
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			_, req, err := agentwork.DecodeRequest(b, m.Subject(), m.Data())
			if err != nil {
				t.Fatalf("stored request: %v", err)
			}
			out = append(out, storedRequest{MsgID: m.Headers().Get(jetstream.MsgIDHeader), Req: req})
		}
		if n == 0 {
			return out
		}
	}
}

// waitState waits until the job's state satisfies ok (watching the key).
func waitState(t *testing.T, b *bus.Bus, id string, ok func(State) bool) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	w, err := b.State.Watch(ctx, stateKey(id))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	var last State
	for {
		select {
		case <-ctx.Done():
			t.Fatalf("state of %s never matched; last %+v", id, last)
		case u, open := <-w.Updates():
			if !open {
				t.Fatalf("state watch closed; last %+v", last)
			}
			if u == nil || u.Operation() != jetstream.KeyValuePut {
				continue
			}
			last = State{}
			if err := json.Unmarshal(u.Value(), &last); err != nil {
				t.Fatal(err)
			}
			if ok(last) {
				return last
			}
		}
	}
}

// ticksOf returns the ticks of the results of kind what, in order.
func ticksOf(rs []TickResult, what string) []time.Time {
	var out []time.Time
	for _, r := range rs {
		if r.What == what {
			out = append(out, r.Tick)
		}
	}
	return out
}

// pendingDue returns when the timer key is due (zero: no pending timer).
func pendingDue(t *testing.T, b *bus.Bus, key string) time.Time {
	t.Helper()
	p, err := bus.NewTimers(b).Pending(t.Context(), key)
	if errors.Is(err, bus.ErrNoTimer) {
		return time.Time{}
	}
	if err != nil {
		t.Fatal(err)
	}
	return p.Due
}

// seed writes a job and its state as an earlier run of the scheduler left
// them (a job of the bucket, unchanged since updated; origin api: a record
// of origin config is one an earlier version wrote, of a job the config,
// which here defines none, dropped).
func seed(t *testing.T, b *bus.Bus, j Job, updated time.Time, st State) {
	t.Helper()
	seedAs(t, b, j, OriginAPI, updated, st)
}

// seedConfig writes a config job and its state as an earlier version,
// which kept config jobs in the bucket, left them.
func seedConfig(t *testing.T, b *bus.Bus, j Job, updated time.Time, st State) {
	t.Helper()
	seedAs(t, b, j, OriginConfig, updated, st)
}

func seedAs(t *testing.T, b *bus.Bus, j Job, origin string, updated time.Time, st State) {
	t.Helper()
	j.normalize()
	j.Origin, j.CreatedAt, j.UpdatedAt = origin, updated, updated
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Jobs.Put(t.Context(), j.ID, data); err != nil {
		t.Fatal(err)
	}
	if data, err = json.Marshal(st); err != nil {
		t.Fatal(err)
	}
	if _, err := b.State.Put(t.Context(), stateKey(j.ID), data); err != nil {
		t.Fatal(err)
	}
}

func isErr(err, target error) bool { return errors.Is(err, target) }

// eventually polls cond (for in-memory conditions no event announces).
func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(waitFor)
	for !cond() {
		select {
		case <-deadline:
			t.Fatal("condition not reached")
		case <-tick.C:
		}
	}
}

// ticksEnded reads a job's events and returns what each tick ended in
// ("done/", "skip/missed", ...), by scheduled time.
func ticksEnded(t *testing.T, b *bus.Bus, id string) map[time.Time][]string {
	t.Helper()
	hist, err := jobHistory(t.Context(), b, id, 50)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time][]string{}
	for _, h := range hist {
		if h.Result.ScheduledAt == nil {
			t.Fatalf("event without a scheduled time: %+v", h)
		}
		at := h.Result.ScheduledAt.UTC()
		seen[at] = append(seen[at], h.Outcome+"/"+h.Result.Reason)
	}
	return seen
}

// jobHistory reads a job's run events, newest first, as History does.
func jobHistory(ctx context.Context, b *bus.Bus, id string, limit int) ([]agentwork.Record, error) {
	return agentwork.History(ctx, b, agentwork.HistoryQuery{Sources: []string{bus.SourceCron}, Names: []string{id}, Limit: limit})
}
