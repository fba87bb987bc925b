package cron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model/script"
)

// dropStream deletes a stream, so every publish to it fails (no stream
// answers) until the returned func creates it again, empty, as the bus
// provisions it. (Deleting rather than re-pointing its subjects: a stream
// update followed by a consumer create trips a data race inside
// nats-server 2.15.)
func dropStream(t *testing.T, b *bus.Bus, name string) (restore func()) {
	t.Helper()
	ctx := t.Context()
	i := slices.IndexFunc(b.StreamConfigs(), func(c jetstream.StreamConfig) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no stream %s", name)
	}
	cfg := b.StreamConfigs()[i]
	if err := b.JetStream().DeleteStream(ctx, name); err != nil {
		t.Fatalf("delete stream %s: %v", name, err)
	}
	return func() {
		t.Helper()
		if _, err := b.JetStream().CreateStream(ctx, cfg); err != nil {
			t.Fatalf("create stream %s: %v", name, err)
		}
	}
}

// flakyState is the state bucket whose writes of cron.* keys fail on demand.
type flakyState struct {
	jetstream.KeyValue
	failWrites atomic.Int32 // how many writes still fail
}

var errInjected = errors.New("injected: nats: timeout")

func (f *flakyState) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if strings.HasPrefix(key, "cron.") && f.failWrites.Add(-1) >= 0 {
		return 0, errInjected
	}
	return f.KeyValue.Create(ctx, key, value, opts...)
}

func (f *flakyState) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if strings.HasPrefix(key, "cron.") && f.failWrites.Add(-1) >= 0 {
		return 0, errInjected
	}
	return f.KeyValue.Update(ctx, key, value, revision)
}

// waitResult waits for a result that satisfies ok, skipping others.
func waitResult(t *testing.T, results chan TickResult, ok func(TickResult) bool) TickResult {
	t.Helper()
	for {
		if r := nextResults(t, results, 1)[0]; ok(r) {
			return r
		}
	}
}

// A bus blip at a job's tick: the publish fails for a while, the fire is
// handed out again with backoff, and once JetStream takes requests again
// the tick fires (late, once) and runs: the history shows the run.
func TestTickPublishedAfterBusRecovers(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Now().UTC().Add(time.Second).Truncate(time.Second)
	job := Job{ID: "report", At: &tick, Prompt: "weekly report", Targets: []string{"ops"}}
	results := make(chan TickResult, 100)
	restore := dropStream(t, b, bus.StreamRequests)
	s, _ := startScheduler(t, b, Config{Jobs: []Job{job}}, results)

	for range 3 {
		if r := nextResults(t, results, 1)[0]; r.What != "failed" || !r.Tick.Equal(tick) {
			t.Fatalf("while the stream is gone: %+v, want the tick failed", r)
		}
	}
	restore()
	startRunner(t, b, clock.Real{}, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "the week in numbers"}})
	if r := waitResult(t, results, func(r TickResult) bool { return r.What != "failed" }); r.What != "fired" || !r.Tick.Equal(tick) {
		t.Fatalf("after the stream is back: %+v, want the tick fired", r)
	}
	reqs := requests(t, b)
	if len(reqs) != 1 || reqs[0].MsgID != MsgID("report", tick, 0) || !reqs[0].Req.ScheduledAt.Equal(tick) {
		t.Fatalf("requests = %+v, want the tick once", reqs)
	}
	st := waitState(t, b, "report", func(st State) bool { return st.LastOutcome != "" && st.Fires > 0 })
	if st.Fires != 1 || !st.LastTick.Equal(tick) || st.LastOutcome != "done" || st.Missed != 0 {
		t.Fatalf("state = %+v", st)
	}
	hist, err := jobHistory(t.Context(), b, "report", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Outcome != "done" || hist[0].Result.ScheduledAt == nil || !hist[0].Result.ScheduledAt.Equal(tick) {
		t.Fatalf("History = %+v, want the tick's run done", hist)
	}
	if got := s.Stats(); got.Fired != 1 || got.Failed < 3 {
		t.Fatalf("Stats() = %+v, want 1 fired after at least 3 failed attempts", got)
	}
}

// The bus stays down past the grace period of a job whose catch-up policy
// skips late ticks: the tick becomes a missed skip event (itself retried
// until the events stream takes it), saying what went wrong, in the
// history.
func TestUnpublishedTickBecomesMissed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Now().UTC().Add(time.Second).Truncate(time.Second)
	const grace = time.Second
	job := Job{ID: "hourly", At: &tick, Prompt: "p", Catchup: Catchup{Policy: CatchupSkip}}
	results := make(chan TickResult, 100)
	restoreRequests := dropStream(t, b, bus.StreamRequests)
	restoreEvents := dropStream(t, b, bus.StreamEvents)
	startScheduler(t, b, Config{Jobs: []Job{job}, Grace: grace}, results)

	// Failed attempts until the tick is late: then it is to be recorded as
	// missed, which fails too.
	waitResult(t, results, func(r TickResult) bool {
		if r.What != "failed" || !r.Tick.Equal(tick) {
			t.Fatalf("while the streams are gone: %+v, want the tick failed", r)
		}
		return r.At.After(tick.Add(grace))
	})
	restoreEvents()
	if r := waitResult(t, results, func(r TickResult) bool { return r.What != "failed" }); r.What != "missed" || !r.Tick.Equal(tick) {
		t.Fatalf("once events are taken again: %+v, want the tick missed", r)
	}
	restoreRequests()
	st := waitState(t, b, "hourly", func(st State) bool { return st.Missed == 1 })
	if st.Fires != 0 || !st.LastTick.Equal(tick) {
		t.Fatalf("state = %+v", st)
	}
	hist, err := jobHistory(t.Context(), b, "hourly", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Outcome != bus.OutcomeSkip || hist[0].Result.Reason != ReasonMissed ||
		!hist[0].Result.ScheduledAt.Equal(tick) || !strings.Contains(hist[0].Result.Detail, "could not be published") {
		t.Fatalf("History = %+v, want the tick as a missed skip that says why", hist)
	}
	if reqs := requests(t, b); len(reqs) != 0 {
		t.Fatalf("requests = %+v, want none (catch-up policy skip)", reqs)
	}
}

// A fire whose state write fails after the publish is handed out again:
// the tick is published again with the same message id (stored once) and
// counted once.
func TestStateWriteFailureIsRetried(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Now().UTC().Add(time.Second).Truncate(time.Second)
	job := Job{ID: "once", At: &tick, Prompt: "p"}
	states := &flakyState{KeyValue: b.State}
	states.failWrites.Store(2)
	results := make(chan TickResult, 100)
	startScheduler(t, b, Config{Jobs: []Job{job}}, results, func(s *Scheduler) { s.stateKV = states })
	st := waitState(t, b, "once", func(st State) bool { return st.LastTick != nil })
	if n := states.failWrites.Load(); n >= 0 {
		t.Fatalf("%d state writes were still to fail", n+1)
	}
	if st.Fires != 1 || !st.LastTick.Equal(tick) {
		t.Fatalf("state = %+v, want the tick counted once", st)
	}
	if reqs := requests(t, b); len(reqs) != 1 || reqs[0].MsgID != MsgID("once", tick, 0) {
		t.Fatalf("requests = %+v, want the tick stored once", reqs)
	}
}

// Ticks of a per-second job keep failing to publish (the requests stream
// is gone) when the instance stops; the stream comes back and a new
// instance starts. Every tick since the last one recorded ends fired or as
// a missed event, once: the fire that failed was not acknowledged, so the
// next instance takes it, and works the ticks out from the job's state.
func TestTicksThroughAnOutageAndRestart(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		catchup Catchup
		// want is what becomes of the ticks that failed: overtaken by
		// the ticks after them, they are late whatever the grace period;
		// run_all runs them, run_once (with on-time ticks) records them
		// missed.
		want string
	}{
		{"run_all", Catchup{Policy: CatchupRunAll, Max: 100}, "fired"},
		{"run_once", Catchup{Policy: CatchupRunOnce}, "missed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			job := secondJob("sec")
			job.Catchup = tt.catchup
			cfg := Config{Jobs: []Job{job}}
			results := make(chan TickResult, 1000)
			_, stop := startScheduler(t, b, cfg, results)
			waitResult(t, results, func(r TickResult) bool { return r.What == "fired" })

			restore := dropStream(t, b, bus.StreamRequests)
			var failed []time.Time
			// Failed attempts for two seconds: past a grace of one.
			waitResult(t, results, func(r TickResult) bool {
				if r.What == "failed" {
					failed = append(failed, r.Tick)
				}
				return len(failed) > 0 && r.At.Sub(failed[0]) > 2*time.Second
			})
			stop() // the instance stops while the ticks wait
			restore()
			results2 := make(chan TickResult, 1000)
			restarted := time.Now()
			_, stop2 := startScheduler(t, bustest.Client(t, b), cfg, results2)
			waitResult(t, results2, func(r TickResult) bool { return r.What == "fired" && r.Tick.After(restarted) })
			stop2()

			// The bus agrees: each tick from the first that failed on, once,
			// as a request (the stream came back empty) or as a missed
			// event; those that failed as want.
			seen := map[time.Time][]string{}
			for _, r := range requests(t, b) {
				seen[r.Req.ScheduledAt.UTC()] = append(seen[r.Req.ScheduledAt.UTC()], "fired")
			}
			hist, err := jobHistory(t.Context(), b, "sec", 500)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hist {
				if h.Outcome == bus.OutcomeSkip && h.Result.Reason == ReasonMissed {
					at := h.Result.ScheduledAt.UTC()
					seen[at] = append(seen[at], "missed")
					if slices.ContainsFunc(failed, at.Equal) && !strings.Contains(h.Result.Detail, "could not be published") {
						t.Errorf("missed event of %s: detail %q does not say why", at.Format(time.TimeOnly), h.Result.Detail)
					}
				}
			}
			last := failed[0]
			for at := range seen {
				if at.After(last) {
					last = at
				}
			}
			for at := failed[0]; !at.After(last); at = at.Add(time.Second) {
				if len(seen[at]) != 1 {
					t.Errorf("tick %s is on the bus as %v, want once", at.Format(time.TimeOnly), seen[at])
				}
			}
			for _, at := range failed {
				if got := seen[at]; len(got) == 0 || (got[0] != tt.want && at.Before(restarted.Add(-time.Second))) {
					t.Errorf("tick %s that failed: %v, want %s", at.Format(time.TimeOnly), got, tt.want)
				}
			}
		})
	}
}

// lostAck publishes requests for real but tells the fire that the publish
// of tick timed out, once: its acknowledgement was lost (a server frozen
// past the publish timeout, or stopped with the publish in the client's
// reconnect buffer, which sends it when the server is back).
type lostAck struct {
	tick time.Time
	lost atomic.Bool
}

func (l *lostAck) publish(ctx context.Context, b *bus.Bus, req agentwork.Request, o agentwork.PublishOptions) (agentwork.Published, error) {
	p, err := agentwork.Publish(ctx, b, req, o)
	if err == nil && req.ScheduledAt != nil && req.ScheduledAt.Equal(l.tick) && l.lost.CompareAndSwap(false, true) {
		return agentwork.Published{}, errInjected
	}
	return p, err
}

// waitRequestsSettled waits until the runner has settled every stored
// request (acked: run, skipped or found finished).
func waitRequestsSettled(t *testing.T, b *bus.Bus) {
	t.Helper()
	eventually(t, func() bool { return requestsSettled(t.Context(), b) == nil })
}

// requestsSettled returns nil once the runner's consumer has acked every
// request the stream holds, else what is left.
func requestsSettled(ctx context.Context, b *bus.Bus) error {
	st, err := b.JetStream().Stream(ctx, bus.StreamRequests)
	if err != nil {
		return err
	}
	si, err := st.Info(ctx)
	if err != nil {
		return err
	}
	c, err := st.Consumer(ctx, agentwork.ConsumerName)
	if err != nil {
		return err
	}
	ci, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if ci.AckFloor.Stream < si.State.LastSeq || ci.NumAckPending > 0 {
		return fmt.Errorf("requests acked up to %d of %d, %d waiting for an ack", ci.AckFloor.Stream, si.State.LastSeq, ci.NumAckPending)
	}
	return nil
}

// A tick's request is stored, but its fire fails all the same: the ack of
// the publish was lost, or the state write after it failed. The fire is
// handed out again once the next tick is due, which overtakes the tick
// (run_once records it missed). The tick must end in exactly one event —
// its run's, when the run took the request first, or else a missed skip,
// and then the request is not run — never both; the next tick in one too.
func TestUnconfirmedTickEndsInOneEvent(t *testing.T) {
	t.Parallel()
	for _, fail := range []struct {
		name string
		mod  func(s *Scheduler, b *bus.Bus, tick time.Time)
	}{
		{"ack lost", func(s *Scheduler, _ *bus.Bus, tick time.Time) { s.publishReq = (&lostAck{tick: tick}).publish }},
		{"state write failed", func(s *Scheduler, b *bus.Bus, _ time.Time) {
			states := &flakyState{KeyValue: b.State}
			states.failWrites.Store(1)
			s.stateKV = states
		}},
	} {
		for _, runFirst := range []bool{true, false} {
			name := fail.name + "/request run before the fire again"
			if !runFirst {
				name = fail.name + "/request taken after the fire again"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := bustest.New(t)
				job := secondJob("sec")
				last := t0.Truncate(time.Second)
				tick, next := last.Add(time.Second), last.Add(2*time.Second)
				seed(t, b, job, last.Add(-time.Hour), State{LastTick: &last})
				clk := clock.NewFake(tick)
				s, err := New(b, Config{}, WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				fail.mod(s, b, tick)
				runner := func() {
					startRunner(t, b, clk, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "hi"}})
				}

				if err := s.fireJob(t.Context(), zap.NewNop(), job.ID, 1); err == nil {
					t.Fatal("the first fire succeeded, want it failed (injected)")
				}
				if runFirst {
					runner()
					waitRequestsSettled(t, b)
				}
				// Handed out again after the next tick: the tick is overtaken.
				clk.Set(next.Add(100 * time.Millisecond))
				if err := s.fireJob(t.Context(), zap.NewNop(), job.ID, 2); err != nil {
					t.Fatalf("the fire handed out again: %v", err)
				}
				if !runFirst {
					runner()
				}
				waitRequestsSettled(t, b)

				seen := ticksEnded(t, b, job.ID)
				want := map[time.Time]string{tick: "done/", next: "done/"}
				if !runFirst {
					want[tick] = "skip/missed"
				}
				for at, w := range want {
					if len(seen[at]) != 1 || seen[at][0] != w {
						t.Errorf("tick %s has events %v, want exactly one: %s", at.Format(time.TimeOnly), seen[at], w)
					}
				}
				if len(seen) != len(want) {
					t.Errorf("events by tick = %v, want the two ticks", seen)
				}
				st, err := readState(t.Context(), b.State, job.ID)
				if err != nil {
					t.Fatal(err)
				}
				wantFires, wantMissed := 2, 0
				if !runFirst {
					wantFires, wantMissed = 1, 1
				}
				if st.LastTick == nil || !st.LastTick.Equal(next) || st.Fires != wantFires || st.Missed != wantMissed {
					t.Errorf("state = last tick %v, %d fires, %d missed; want %s, %d, %d", st.LastTick, st.Fires, st.Missed, next.Format(time.TimeOnly), wantFires, wantMissed)
				}
				// The settlement stands when asked again (a fire whose ack
				// of it was lost asks again).
				stored, _, err := s.readJob(t.Context(), job.ID)
				if err != nil {
					t.Fatal(err)
				}
				forgone, err := agentwork.Forgo(t.Context(), b, requestID(stored, tick, 0))
				if err != nil || forgone == runFirst {
					t.Errorf("Forgo of the tick's request again = %v, %v; want %v", forgone, err, !runFirst)
				}
				for _, r := range requests(t, b) {
					if want := requestID(stored, *r.Req.ScheduledAt, 0); r.Req.ID != want {
						t.Errorf("request of %s has id %s, want %s (derived from job and tick)", r.Req.ScheduledAt.Format(time.TimeOnly), r.Req.ID, want)
					}
				}
			})
		}
	}
}

// A tick's request id is the same for every publish of the tick, differs
// for another tick, retry, job or incarnation of the job, and is a UUIDv7
// whose time is the tick's.
func TestRequestID(t *testing.T) {
	t.Parallel()
	j := Job{ID: "report", CreatedAt: t0.Add(-time.Hour)}
	tick := t0.Truncate(time.Minute)
	id := requestID(j, tick, 0)
	if again := requestID(j, tick.In(time.FixedZone("x", 3600)), 0); again != id {
		t.Errorf("requestID again = %s, want %s", again, id)
	}
	recreated := j
	recreated.CreatedAt = t0
	other := j
	other.ID = "other"
	for name, got := range map[string]string{
		"next tick": requestID(j, tick.Add(time.Minute), 0), "retry": requestID(j, tick, 1),
		"other job": requestID(other, tick, 0), "job created again": requestID(recreated, tick, 0),
	} {
		if got == id {
			t.Errorf("requestID of the %s = %s, the tick's", name, got)
		}
	}
	u, err := uuid.Parse(id)
	if err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
		t.Fatalf("requestID = %s (%v): want a UUIDv7", id, err)
	}
	sec, nsec := u.Time().UnixTime()
	if at := time.Unix(sec, nsec); !at.Equal(tick) {
		t.Errorf("requestID's time = %s, want the tick's %s", at, tick)
	}
}
