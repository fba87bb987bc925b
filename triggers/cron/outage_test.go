package cron

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

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
	failKeys            sync.Map     // keys whose Create always fails
	hangKeys            sync.Map     // key -> chan struct{}: Create closes it and hangs until ctx ends
}

var errInjected = errors.New("injected: nats: timeout")

func (f *flakyLocks) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if _, ok := f.failKeys.Load(key); ok {
		return 0, errInjected
	}
	if ch, ok := f.hangKeys.LoadAndDelete(key); ok {
		close(ch.(chan struct{}))
		<-ctx.Done()
		return 0, ctx.Err()
	}
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

// flakyState is the state bucket whose writes of cron.* keys fail on demand.
type flakyState struct {
	jetstream.KeyValue
	failWrites atomic.Int32 // how many writes still fail
}

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

// waitingTicks is the union of the ticks st lists as waiting.
func waitingTicks(st State) []time.Time {
	var out []time.Time
	for _, w := range st.Waiting {
		out = append(out, w.Ticks...)
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
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
	hist, err := jobHistory(t.Context(), b, "weekly", 5)
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
	hist, err := jobHistory(t.Context(), b, "hourly", 5)
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
				dead, _ := json.Marshal(tickClaim{State: "claimed", What: "fire", Lease: bus.Lease{Owner: "dead-instance", Token: "t", Expires: tick.Add(claimTTL)}})
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

// A tick put off during an outage survives a restart: a per-second job's
// ticks fail to publish, the bus flaps (a newer tick gets through, so the
// job's last tick moves past them, while their own retries keep failing),
// the instance stops, the bus recovers and a new instance starts. Every
// tick ends fired or as a missed event in the history, once; none vanishes.
func TestWaitingTicksSurviveRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// restartAfter is how long after the last tick the new instance
		// starts: within the grace period the waiting ticks still run;
		// past it catch-up policy run_once no longer runs them.
		restartAfter time.Duration
		// failStateWrites: the first state writes fail too (the bus is
		// down): the next write that succeeds lists the waiting ticks.
		failStateWrites int32
		wantWaiting     string // what becomes of the waiting ticks: fired | missed
	}{
		{name: "restart within grace", restartAfter: 0, wantWaiting: "fired"},
		{name: "restart past grace", restartAfter: 61 * time.Second, wantWaiting: "missed"},
		{name: "state write fails at first", failStateWrites: 1, wantWaiting: "fired"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			clk := clock.NewFake(t0)
			job := Job{ID: "sec", Schedule: "* * * * * *", Prompt: "p"} // catch-up run_once
			cfg := Config{Jobs: []Job{job}}
			var waiting []time.Time // 10:00:31 .. 10:00:35
			for i := 1; i <= 5; i++ {
				waiting = append(waiting, t0.Add(time.Duration(i)*time.Second))
			}
			newer := t0.Add(6 * time.Second)
			locks := &flakyLocks{KeyValue: b.Locks}
			states := &flakyState{KeyValue: b.State}
			states.failWrites.Store(tt.failStateWrites)
			results := make(chan TickResult, 1000)
			_, stop := startScheduler(t, b, clk, cfg, results, func(s *Scheduler) { s.lockKV, s.stateKV = locks, states })

			// The requests stream is gone: the five ticks cannot be published.
			restore := dropStream(t, b, bus.StreamRequests)
			advanceTo(t, clk, waiting[4], 1)
			if r := nextResults(t, results, 1)[0]; r.What != "failed" || !r.Tick.Equal(waiting[0]) {
				t.Fatalf("at %v: %+v, want the tick of %v failed", waiting[4], r, waiting[0])
			}
			// The bus flaps: the stream is back and the newer tick fires,
			// but the claims of the five keep failing.
			restore()
			for _, w := range waiting {
				locks.failKeys.Store(tickKey(job.ID, w, 0), true)
			}
			advanceTo(t, clk, newer, 1)
			// The job's last tick is now past the five: its state must list them.
			waitState(t, b, job.ID, func(st State) bool {
				return st.LastTick != nil && st.LastTick.Equal(newer) && slices.EqualFunc(waitingTicks(st), waiting, time.Time.Equal)
			})
			if n := states.failWrites.Load(); n >= 0 {
				t.Fatalf("%d state writes were to fail, %d did not happen", tt.failStateWrites, n+1)
			}
			stop() // the instance stops while the five wait

			// The bus recovers; a new instance starts on it.
			clk.Set(newer.Add(tt.restartAfter))
			results2 := make(chan TickResult, 1000)
			startScheduler(t, bustest.Client(t, b), clk, cfg, results2)
			var all []time.Time // every tick up to now, but the one the first instance fired
			for tk := waiting[0]; !tk.After(clk.Now()); tk = tk.Add(time.Second) {
				if !tk.Equal(newer) {
					all = append(all, tk)
				}
			}
			got := map[time.Time]string{}
			deadline := time.After(waitFor)
			for len(got) < len(all) {
				select {
				case r := <-results2:
					if r.What == "fired" || r.What == "missed" {
						if prev, ok := got[r.Tick]; ok {
							t.Fatalf("tick %v %s, then %s", r.Tick, prev, r.What)
						}
						got[r.Tick] = r.What
					}
				case <-deadline:
					var gone []string
					for _, tk := range all {
						if _, ok := got[tk]; !ok {
							gone = append(gone, tk.Format("15:04:05"))
						}
					}
					t.Fatalf("after the restart these ticks were neither fired nor recorded as missed: %v", gone)
				}
			}
			for _, w := range waiting {
				if got[w] != tt.wantWaiting {
					t.Errorf("tick %v: %s, want %s", w.Format("15:04:05"), got[w], tt.wantWaiting)
				}
			}

			// The bus agrees: each tick once, as a request or as a missed event.
			seen := map[time.Time]int{}
			for _, r := range requests(t, b) {
				seen[r.Req.ScheduledAt.UTC()]++
			}
			hist, err := jobHistory(t.Context(), b, job.ID, 500)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range hist {
				if h.Outcome != bus.OutcomeSkip || h.Result.Reason != ReasonMissed {
					continue
				}
				at := h.Result.ScheduledAt.UTC()
				seen[at]++
				if slices.ContainsFunc(waiting, at.Equal) && !strings.Contains(h.Result.Detail, "could not be published") {
					t.Errorf("missed event of %v: detail %q does not say why", at, h.Result.Detail)
				}
			}
			for _, tk := range append(all, newer) {
				if seen[tk] != 1 {
					t.Errorf("tick %v is on the bus %d times (requests and missed events), want once", tk.Format("15:04:05"), seen[tk])
				}
			}
			if len(seen) != len(all)+1 {
				t.Errorf("%d ticks on the bus, want %d", len(seen), len(all)+1)
			}
			// Nothing waits any more, on either instance's list.
			waitState(t, b, job.ID, func(st State) bool { return len(st.Waiting) == 0 && st.Fires+st.Missed == len(all)+1 })
		})
	}
}

// What an instance lists as waiting is bounded: beyond 1,000 ticks the
// oldest are counted. An instance that starts takes up the lists of two
// that stopped: the ticks once each, overlapping summaries once, ticks
// after the job's last tick left to the catch-up.
func TestWaitingBoundedAndTakenUp(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(t0)
	s, err := New(nil, Config{}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	job := Job{ID: "sec", Schedule: "@every 1s", Catchup: Catchup{Policy: CatchupSkip}}
	start := t0.Add(-2 * time.Hour)
	at := func(i int) time.Time { return start.Add(time.Duration(i) * time.Second) }
	var stale []time.Time
	for i := range 3000 {
		stale = append(stale, at(i))
	}
	s.mu.Lock()
	s.addDeferredLocked(task{job: job, stale: stale, failures: 1, kept: true, cause: errInjected.Error()}, t0)
	w := s.waitingOf(job.ID, time.Time{})
	s.mu.Unlock()
	if len(w.Ticks) != maxWaiting || w.More != 3000-maxWaiting || !w.MoreFrom.Equal(at(0)) || !w.MoreTo.Equal(at(3000-maxWaiting-1)) ||
		!w.Ticks[0].Equal(at(3000-maxWaiting)) || w.Error != errInjected.Error() {
		t.Fatalf("waitingOf: %d ticks from %v, %d more (%v to %v), error %q; want %d, %d more",
			len(w.Ticks), w.Ticks[0], w.More, w.MoreFrom, w.MoreTo, w.Error, maxWaiting, 3000-maxWaiting)
	}

	// A new instance: the same list from two instances (one also holds
	// two newer ticks, one of them after the job's last tick).
	s2, err := New(nil, Config{}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	w2 := w
	w2.Ticks = append(slices.Clone(w.Ticks), at(3000), at(3002))
	last := at(3001)
	e := &entry{job: job, sched: Every(time.Second), index: -1, state: State{LastTick: &last, Waiting: map[string]Waiting{"a": w, "b": w2}}}
	s2.mu.Lock()
	s2.entries[job.ID] = e
	s2.adopt(e, t0)
	if len(s2.deferred) != 1 || !slices.Equal(s2.adopted[job.ID], []string{"a", "b"}) {
		t.Fatalf("adopt: %d tasks put off, adopted %v; want 1, [a b]", len(s2.deferred), s2.adopted[job.ID])
	}
	tk := s2.deferred[0].t
	tk, ok := s2.revisit(tk, t0)
	s2.mu.Unlock()
	// 3001 ticks (at(3002) is after the last tick): the newest 1,000
	// listed, the rest in one summary.
	if !ok || len(tk.fire) != 0 || len(tk.stale) != maxEnumerate || tk.moreMissed != 3001-maxEnumerate || !tk.moreFrom.Equal(at(0)) ||
		!tk.stale[len(tk.stale)-1].Equal(at(3000)) || !strings.Contains(tk.moreDetail(), errInjected.Error()) {
		t.Fatalf("taken up: fire %d stale %d (last %v) more %d from %v, detail %q", len(tk.fire), len(tk.stale), tk.stale[len(tk.stale)-1],
			tk.moreMissed, tk.moreFrom, tk.moreDetail())
	}
	if !e.cursor.IsZero() {
		t.Fatalf("cursor %v: the catch-up must still start after the last tick", e.cursor)
	}
}

// A tick still being claimed (the bus does not answer) when a newer tick
// of its job fires: the write that records the newer tick lists the older
// one as waiting, so even an instance killed then, writing nothing more,
// leaves it to the next one, which fires it.
func TestTickInFlightAtStopSurvivesRestart(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	cfg := Config{Jobs: []Job{{ID: "sec", Schedule: "* * * * * *", Prompt: "p"}}}
	first, second := t0.Add(time.Second), t0.Add(2*time.Second)
	locks := &flakyLocks{KeyValue: b.Locks}
	states := &flakyState{KeyValue: b.State}
	hanging := make(chan struct{})
	locks.hangKeys.Store(tickKey("sec", first, 0), hanging)
	results := make(chan TickResult, 100)
	_, stop := startScheduler(t, b, clk, cfg, results, func(s *Scheduler) { s.lockKV, s.stateKV = locks, states })

	advanceTo(t, clk, first, 1)
	select {
	case <-hanging:
	case <-time.After(waitFor):
		t.Fatal("the first tick was never claimed")
	}
	advanceTo(t, clk, second, 1)
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(second) {
		t.Fatalf("second tick: %+v, want fired", r)
	}
	st := waitState(t, b, "sec", func(st State) bool { return st.LastTick != nil && st.LastTick.Equal(second) })
	if !slices.EqualFunc(waitingTicks(st), []time.Time{first}, time.Time.Equal) {
		t.Fatalf("waiting once the second tick is recorded: %v, want the first tick", waitingTicks(st))
	}
	states.failWrites.Store(1 << 20) // killed: nothing more is written
	stop()

	results2 := make(chan TickResult, 100)
	startScheduler(t, bustest.Client(t, b), clk, cfg, results2)
	if r := nextResults(t, results2, 1)[0]; r.What != "fired" || !r.Tick.Equal(first) {
		t.Fatalf("after the restart: %+v, want the first tick fired", r)
	}
	reqs := requests(t, b)
	if len(reqs) != 2 || !reqs[0].Req.ScheduledAt.Equal(second) || !reqs[1].Req.ScheduledAt.Equal(first) {
		t.Fatalf("requests = %+v, want the second tick, then the first", reqs)
	}
	waitState(t, b, "sec", func(st State) bool { return len(st.Waiting) == 0 && st.Fires == 2 })
}

// Two instances: A cannot claim a tick that B fires, and stops while it
// still holds it. The instance that starts next does not fire the tick
// again (its claim is done), and no list is left waiting.
func TestWaitingTickFiredByAnotherInstance(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	tick := t0.Truncate(time.Minute).Add(time.Minute)
	cfg := Config{Jobs: []Job{minuteJob("m")}}
	locks := &flakyLocks{KeyValue: b.Locks}
	locks.failKeys.Store(tickKey("m", tick, 0), true)
	resultsA, resultsB := make(chan TickResult, 100), make(chan TickResult, 100)
	_, stopA := startScheduler(t, b, clk, cfg, resultsA, func(s *Scheduler) { s.lockKV = locks })
	startScheduler(t, bustest.Client(t, b), clk, cfg, resultsB)

	advanceTo(t, clk, tick, 2)
	if r := nextResults(t, resultsA, 1)[0]; r.What != "failed" {
		t.Fatalf("A: %+v, want failed", r)
	}
	if r := nextResults(t, resultsB, 1)[0]; r.What != "fired" {
		t.Fatalf("B: %+v, want fired", r)
	}
	waitState(t, b, "m", func(st State) bool { return st.Fires == 1 })
	stopA()

	resultsC := make(chan TickResult, 100)
	startScheduler(t, bustest.Client(t, b), clk, cfg, resultsC)
	waitState(t, b, "m", func(st State) bool { return len(st.Waiting) == 0 })
	for len(resultsC) > 0 {
		if r := <-resultsC; r.What != "lost" {
			t.Fatalf("C: %+v, want the tick lost to B's claim or not looked at", r)
		}
	}
	if reqs := requests(t, b); len(reqs) != 1 {
		t.Fatalf("%d requests, want the tick once", len(reqs))
	}
	hist, err := jobHistory(t.Context(), b, "m", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 0 {
		t.Fatalf("history %+v, want no missed event (the tick fired)", hist)
	}
}

// A write that records ticks removes them from the lists of other
// instances too, so a list left by an instance that stopped for good does
// not outlive the claims that keep its ticks once (7 days).
func TestSaveRemovesResolvedTicksFromOtherLists(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s, err := New(b, Config{})
	if err != nil {
		t.Fatal(err)
	}
	x, y := t0, t0.Add(time.Minute)
	s.entries["m"] = &entry{job: minuteJob("m"), index: -1}
	if _, err := updateState(t.Context(), b.State, "m", func(st *State) bool {
		st.Waiting = map[string]Waiting{"gone": {Ticks: []time.Time{x, y}}, "gone-too": {Ticks: []time.Time{x}}}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	progress := func(st *State) bool { st.Fires++; return true }
	if err := s.save(t.Context(), "m", progress, []time.Time{x}); err != nil {
		t.Fatal(err)
	}
	st, err := readState(t.Context(), b.State, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Waiting) != 1 || !slices.EqualFunc(st.Waiting["gone"].Ticks, []time.Time{y}, time.Time.Equal) || st.Fires != 1 {
		t.Fatalf("state after recording %v: waiting %+v, fires %d; want only gone: [%v], fires 1", x, st.Waiting, st.Fires, y)
	}
}
