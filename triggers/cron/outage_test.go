package cron

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/agentwork/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
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

// stepRetry waits until n schedulers wait for a retry after want (the
// tick they put off) and moves the clock there.
func stepRetry(t *testing.T, clk *clock.Fake, n int, want time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitFor)
	defer cancel()
	at := clk.Now().Add(want)
	if err := clk.BlockUntilDue(ctx, at, n); err != nil {
		t.Fatalf("no retry after %v: %v", want, err)
	}
	if first, _ := clk.NextDeadline(); first.Before(at) {
		t.Fatalf("a retry after %v, want %v", first.Sub(clk.Now()), want)
	}
	clk.Set(at)
}

// flakyLocks is the locks bucket with calls that fail on demand.
type flakyLocks struct {
	jetstream.KeyValue
	failCreate, failGet atomic.Int32 // how many calls still fail
}

var errInjected = errors.New("injected: nats: timeout")

func (f *flakyLocks) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if strings.HasPrefix(key, "tick.") && f.failCreate.Add(-1) >= 0 {
		return 0, errInjected
	}
	return f.KeyValue.Create(ctx, key, value, opts...)
}

func (f *flakyLocks) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if strings.HasPrefix(key, "tick.") && f.failGet.Add(-1) >= 0 {
		return nil, errInjected
	}
	return f.KeyValue.Get(ctx, key)
}

func withFlakyLocks(b *bus.Bus, create, get int32) func(*Scheduler) {
	return func(s *Scheduler) {
		f := &flakyLocks{KeyValue: b.Locks}
		f.failCreate.Store(create)
		f.failGet.Store(get)
		s.lockKV = f
	}
}

func whats(rs []TickResult) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.What)
	}
	return out
}

// A bus blip at the weekly job's tick: the publish fails for a while, the
// tick is kept and retried with backoff, and once JetStream takes requests
// again it fires (late, once) and runs: the history shows the run.
func TestTickPublishedAfterBusRecovers(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Date(2026, 5, 4, 9, 0, 0, 0, time.UTC) // a Monday
	clk := clock.NewFake(tick.Add(-30 * time.Second))
	job := Job{ID: "weekly", Schedule: "0 9 * * 1", Prompt: "weekly report", Targets: []string{"ops"}}
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)

	restore := dropStream(t, b, bus.StreamRequests)
	advanceTo(t, clk, tick, 1)
	if r := nextResults(t, results, 1)[0]; r.What != "failed" || !r.Tick.Equal(tick) {
		t.Fatalf("at the tick: %+v, want failed", r)
	}
	for _, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		stepRetry(t, clk, 1, backoff)
		if r := nextResults(t, results, 1)[0]; r.What != "failed" || !r.Tick.Equal(tick) {
			t.Fatalf("retry while the stream is gone: %+v, want failed", r)
		}
	}

	restore()
	startRunner(t, b, clk, s, script.Rule{Match: script.Match{Source: "cron"}, Reply: script.Reply{Text: "the week in numbers"}})
	stepRetry(t, clk, 1, 8*time.Second)
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(tick) {
		t.Fatalf("after the bus recovered: %+v, want the 09:00 tick fired", r)
	}
	reqs := requests(t, b)
	if len(reqs) != 1 || reqs[0].MsgID != "weekly:2026-05-04T09:00:00Z" || !reqs[0].Req.ScheduledAt.Equal(tick) {
		t.Fatalf("requests = %+v, want the 09:00 tick once", reqs)
	}
	st := waitState(t, b, "weekly", func(st State) bool { return st.LastOutcome != "" && st.Fires > 0 })
	if st.Fires != 1 || !st.LastTick.Equal(tick) || st.LastOutcome != bus.OutcomeDone || st.Missed != 0 {
		t.Fatalf("state = %+v", st)
	}
	hist, err := History(t.Context(), b, bus.SourceCron, "weekly", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Outcome != bus.OutcomeDone || hist[0].Result.ScheduledAt == nil || !hist[0].Result.ScheduledAt.Equal(tick) {
		t.Fatalf("History = %+v, want the 09:00 run done", hist)
	}
	if got := s.Stats(); got.Fired != 1 || got.Failed != 4 || got.Lost != 0 {
		t.Fatalf("Stats() = %+v, want 1 fired after 4 failed attempts", got)
	}
	s.mu.Lock()
	left := len(s.deferred)
	s.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d tasks still put off after the tick fired", left)
	}
}

// The bus stays down past the grace period of a job whose catch-up policy
// skips late ticks: the tick becomes a missed skip event (itself kept until
// the events stream takes it), with what went wrong, in the history.
func TestUnpublishedTickBecomesMissed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	tick := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	clk := clock.NewFake(tick.Add(-30 * time.Second))
	job := Job{ID: "hourly", Schedule: "0 * * * *", Prompt: "p", Catchup: Catchup{Policy: CatchupSkip}}
	results := make(chan TickResult, 100)
	startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)

	restoreRequests := dropStream(t, b, bus.StreamRequests)
	restoreEvents := dropStream(t, b, bus.StreamEvents)
	advanceTo(t, clk, tick, 1)
	nextResults(t, results, 1)
	// Retries 1s, 2s, ... 32s after each failure: the last at 10:01:03, past
	// the grace minute, turns the tick into a missed event, which fails too.
	for _, backoff := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second} {
		stepRetry(t, clk, 1, backoff)
		if r := nextResults(t, results, 1)[0]; r.What != "failed" || !r.Tick.Equal(tick) {
			t.Fatalf("retry: %+v, want failed", r)
		}
	}
	restoreEvents()
	stepRetry(t, clk, 1, time.Minute) // the cap
	if r := nextResults(t, results, 1)[0]; r.What != "missed" || !r.Tick.Equal(tick) {
		t.Fatalf("once events are taken again: %+v, want the tick missed", r)
	}
	restoreRequests()
	st := waitState(t, b, "hourly", func(st State) bool { return st.Missed == 1 })
	if st.Fires != 0 || !st.LastTick.Equal(tick) {
		t.Fatalf("state = %+v", st)
	}
	hist, err := History(t.Context(), b, bus.SourceCron, "hourly", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 1 || hist[0].Outcome != bus.OutcomeSkip || hist[0].Result.Reason != ReasonMissed ||
		!hist[0].Result.ScheduledAt.Equal(tick) || !strings.Contains(hist[0].Result.Detail, "could not be published") {
		t.Fatalf("History = %+v, want the 10:00 tick as a missed skip that says why", hist)
	}
	if reqs := requests(t, b); len(reqs) != 0 {
		t.Fatalf("requests = %+v, want none (catch-up policy skip)", reqs)
	}
	// The next tick fires as usual.
	advanceTo(t, clk, tick.Add(time.Hour), 1)
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(tick.Add(time.Hour)) {
		t.Fatalf("next tick: %+v, want fired", r)
	}
}

// A claim that cannot be made or read (the locks bucket fails) is tried
// again, not given up as lost: the tick fires once the bucket answers, and
// a dead holder's claim is still taken over.
func TestClaimErrorsAreRetried(t *testing.T) {
	t.Parallel()
	tick := t0.Truncate(time.Minute).Add(time.Minute)
	tests := []struct {
		name                string
		failCreate, failGet int32
		deadHolder          bool
		want                []string // results in order, all for tick
	}{
		{name: "create fails", failCreate: 2, want: []string{"failed", "failed", "fired"}},
		// Another instance claimed the tick and died; reading its claim
		// fails at first.
		{name: "read of a dead holder's claim fails", failGet: 1, deadHolder: true, want: []string{"failed", "lost", "fired"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			clk := clock.NewFake(t0)
			if tt.deadHolder {
				dead, _ := json.Marshal(tickClaim{Owner: "dead-instance", State: "claimed", What: "fire", Expires: tick.Add(claimTTL)})
				if _, err := b.Locks.Create(t.Context(), tickKey("j", tick, 0), dead); err != nil {
					t.Fatal(err)
				}
			}
			results := make(chan TickResult, 100)
			startScheduler(t, b, clk, Config{Jobs: []Job{minuteJob("j")}}, results, withFlakyLocks(b, tt.failCreate, tt.failGet))
			advanceTo(t, clk, tick, 1)
			var got []TickResult
			for i := range tt.want {
				if i > 0 {
					// The next look: a backoff retry, or the dead
					// holder's claim expiring.
					ctx, cancel := context.WithTimeout(t.Context(), waitFor)
					err := clk.BlockUntilDue(ctx, tick.Add(claimTTL+time.Second), 1)
					cancel()
					if err != nil {
						t.Fatalf("nothing looks at the tick again after %v: %v", whats(got), err)
					}
					at, _ := clk.NextDeadline()
					clk.Set(at)
				}
				got = append(got, nextResults(t, results, 1)...)
			}
			if !slices.Equal(whats(got), tt.want) {
				t.Fatalf("results %v, want %v", whats(got), tt.want)
			}
			for _, r := range got {
				if !r.Tick.Equal(tick) {
					t.Fatalf("result %+v, want tick %v", r, tick)
				}
			}
			if reqs := requests(t, b); len(reqs) != 1 || !reqs[0].Req.ScheduledAt.Equal(tick) {
				t.Fatalf("requests = %+v, want the tick once", reqs)
			}
			if st := waitState(t, b, "j", func(st State) bool { return st.Fires == 1 }); !st.LastTick.Equal(tick) {
				t.Fatalf("state = %+v", st)
			}
		})
	}
}

// Two instances both fail to claim a tick and both keep it; once the
// locks bucket answers they race for it again, and exactly one fires it.
func TestTickKeptOnTwoInstancesFiresOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	tick := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	clk := clock.NewFake(tick.Add(-30 * time.Second))
	results := make(chan TickResult, 100)
	// One worker each: a scheduler's tasks run in the order it hands them out.
	cfg := Config{Jobs: []Job{{ID: "hourly", Schedule: "0 * * * *", Prompt: "p"}}, Concurrency: 1}
	s1, _ := startScheduler(t, b, clk, cfg, results, withFlakyLocks(b, 2, 0))
	s2, _ := startScheduler(t, b2, clk, cfg, results, withFlakyLocks(b2, 2, 0))

	advanceTo(t, clk, tick, 2)
	for i := range 2 {
		if rs := nextResults(t, results, 2); !slices.Equal(whats(rs), []string{"failed", "failed"}) {
			t.Fatalf("results %v, want both failed", whats(rs))
		}
		stepRetry(t, clk, 2, time.Second<<i)
	}
	rs := nextResults(t, results, 2)
	if got := whats(rs); !slices.Contains(got, "fired") || !slices.Contains(got, "lost") {
		t.Fatalf("once the bucket answers: %v, want one fired and one lost", got)
	}
	// The next tick (and the loser's look at the winner's claim before it).
	advanceTo(t, clk, tick.Add(time.Hour), 2)
	if got := whats(nextResults(t, results, 2)); !slices.Contains(got, "fired") || !slices.Contains(got, "lost") {
		t.Fatalf("next tick: %v, want one fired and one lost", got)
	}
	if fired := s1.Stats().Fired + s2.Stats().Fired; fired != 2 {
		t.Fatalf("fired %d times in all, want 2 (each tick once)", fired)
	}
	if reqs := requests(t, b); len(reqs) != 2 {
		t.Fatalf("%d requests stored, want 2", len(reqs))
	}
}

// stillRuns agrees with the catch-up policies.
func TestStillRuns(t *testing.T) {
	t.Parallel()
	s := &Scheduler{cfg: Config{}.WithDefaults()}
	sched, err := ParseSchedule("0 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	at := func(h, m int) time.Time { return time.Date(2026, 5, 4, h, m, 0, 0, time.UTC) }
	expires := at(10, 30)
	tests := []struct {
		catchup Catchup
		expires *time.Time
		now     time.Time
		want    bool
	}{
		{Catchup{Policy: CatchupSkip}, nil, at(10, 1), true}, // within grace
		{Catchup{Policy: CatchupSkip}, nil, at(10, 2), false},
		{Catchup{Policy: CatchupRunOnce}, nil, at(10, 59), true}, // the newest tick
		{Catchup{Policy: CatchupRunOnce}, nil, at(11, 0), false}, // 11:00 is due
		{Catchup{Policy: CatchupRunOnce}, &expires, at(12, 0), true},
		{Catchup{Policy: CatchupRunAll, Max: 2}, nil, at(11, 30), true},  // 11:00 late after it
		{Catchup{Policy: CatchupRunAll, Max: 2}, nil, at(12, 0), true},   // 12:00 on time
		{Catchup{Policy: CatchupRunAll, Max: 2}, nil, at(12, 30), false}, // 11:00, 12:00 late after it
	}
	for _, tt := range tests {
		j := Job{Catchup: tt.catchup, ExpiresAt: tt.expires}
		if got := s.stillRuns(j, sched, at(10, 0), tt.now); got != tt.want {
			t.Errorf("stillRuns(%s max %d, expires %v, tick 10:00, now %s) = %v, want %v",
				tt.catchup.Policy, tt.catchup.Max, tt.expires, tt.now.Format("15:04"), got, tt.want)
		}
	}
}

// A job's failed ticks are kept as one task however many pile up, and a
// long outage is summarized rather than listed tick by tick.
func TestPutOffMergesAndFolds(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	s := &Scheduler{cfg: Config{}.WithDefaults(), clock: clk, log: zap.NewNop(), wake: make(chan struct{}, 1),
		retryBase: defaultRetryBase, retryMax: defaultRetryMax, entries: map[string]*entry{}}
	job := Job{ID: "sec", Schedule: "@every 1s", Catchup: Catchup{Policy: CatchupSkip}}
	start := t0.Add(-2 * time.Hour)
	for i := range 3000 {
		s.putOff(t.Context(), s.log, task{job: job, fire: []time.Time{start.Add(time.Duration(i) * time.Second)}}, errInjected)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.deferred) != 1 || len(s.deferred[0].t.fire) != 3000 {
		t.Fatalf("%d tasks put off, want 1 with 3000 ticks", len(s.deferred))
	}
	if d := s.deferred[0]; d.t.failures != 1 || !d.at.Equal(t0.Add(time.Second)) {
		t.Fatalf("put off until %v after %d failures, want %v after 1", d.at, d.t.failures, t0.Add(time.Second))
	}
	tk, ok := s.revisit(s.deferred[0].t, t0)
	if !ok || len(tk.fire) != 0 || len(tk.stale) != maxEnumerate || tk.moreMissed != 3000-maxEnumerate || tk.moreCause == "" ||
		!tk.moreFrom.Equal(start) || !tk.stale[len(tk.stale)-1].Equal(start.Add(2999*time.Second)) {
		t.Fatalf("revisit: fire %d stale %d more %d (from %v, cause %q)", len(tk.fire), len(tk.stale), tk.moreMissed, tk.moreFrom, tk.moreCause)
	}
	if d := tk.moreDetail(); !strings.Contains(d, "2000 ticks") || !strings.Contains(d, errInjected.Error()) {
		t.Fatalf("summary detail %q", d)
	}
}

// While a job's failed tick waits out its backoff, the job's next tick
// publishes fine: the failed one follows at once instead of at its retry.
func TestFailedTickFollowsANewTickThatFired(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	job := minuteJob("m")
	job.Catchup = Catchup{Policy: CatchupRunAll, Max: 10}
	results := make(chan TickResult, 100)
	startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)
	first := t0.Truncate(time.Minute).Add(time.Minute) // 10:01

	restore := dropStream(t, b, bus.StreamRequests)
	advanceTo(t, clk, first, 1)
	nextResults(t, results, 1)
	for _, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second} {
		stepRetry(t, clk, 1, want)
		nextResults(t, results, 1)
	}
	// The next retry is due at 10:02:03, after the 10:02 tick.
	restore()
	advanceTo(t, clk, first.Add(time.Minute), 1)
	rs := nextResults(t, results, 2)
	if got := tickTimes(rs, "fired"); !slices.Equal(got, []string{"10:02", "10:01"}) {
		t.Fatalf("at 10:02: %v, want 10:02 fired, then 10:01", rs)
	}
	if now := clk.Now(); !now.Equal(first.Add(time.Minute)) {
		t.Fatalf("clock moved to %v", now)
	}
}
