package cron

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
)

func minuteJob(id string) Job {
	return Job{ID: id, Schedule: "* * * * *", Prompt: "say hi", Targets: []string{"ops"}}
}

func TestSchedulerFiresEachTick(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{minuteJob("hello")}}, results)

	first := t0.Truncate(time.Minute).Add(time.Minute)
	for i := range 3 {
		tick := first.Add(time.Duration(i) * time.Minute)
		advanceTo(t, clk, tick, 1)
		if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(tick) {
			t.Fatalf("tick %d: %+v, want fired at %v", i, r, tick)
		}
	}
	reqs := requests(t, b)
	if len(reqs) != 3 {
		t.Fatalf("%d requests stored, want 3", len(reqs))
	}
	for i, r := range reqs {
		tick := first.Add(time.Duration(i) * time.Minute)
		if want := "hello:" + tick.Format(time.RFC3339); r.MsgID != want {
			t.Errorf("request %d Nats-Msg-Id = %q, want %q", i, r.MsgID, want)
		}
		if r.Req.ScheduledAt == nil || !r.Req.ScheduledAt.Equal(tick) || r.Req.Source != "cron" || r.Req.Name != "hello" ||
			r.Req.Manual || !slices.Equal(r.Req.Targets, []string{"ops"}) || r.Req.Deliver != "auto" || r.Req.Prompt != "say hi" {
			t.Errorf("request %d = %+v", i, r.Req)
		}
	}
	st := waitState(t, b, "hello", func(st State) bool { return st.Fires == 3 })
	if last := first.Add(2 * time.Minute); st.LastTick == nil || !st.LastTick.Equal(last) || st.NextFire == nil || !st.NextFire.Equal(last.Add(time.Minute)) {
		t.Fatalf("state = %+v", st)
	}
	if got := s.Stats(); got.Fired != 3 || got.Lost != 0 {
		t.Fatalf("Stats() = %+v", got)
	}
}

// Two instances on one bus compute the same ticks; each tick is claimed and
// published by exactly one of them.
func TestTwoSchedulersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	cfg := Config{Jobs: []Job{minuteJob("per-minute")}}
	s1, _ := startScheduler(t, b, clk, cfg, results)
	s2, _ := startScheduler(t, b2, clk, cfg, results)

	first := t0.Truncate(time.Minute).Add(time.Minute)
	const n = 4
	for i := range n {
		tick := first.Add(time.Duration(i) * time.Minute)
		advanceTo(t, clk, tick, 2)
		rs := nextResults(t, results, 2)
		if got := tickTimes(rs, "fired"); len(got) != 1 {
			t.Fatalf("tick %v: results %v, want one fired and one lost", tick, rs)
		}
		if got := tickTimes(rs, "lost"); len(got) != 1 {
			t.Fatalf("tick %v: results %v, want one fired and one lost", tick, rs)
		}
	}
	if reqs := requests(t, b); len(reqs) != n {
		t.Fatalf("%d requests stored, want %d", len(reqs), n)
	}
	if fired := s1.Stats().Fired + s2.Stats().Fired; fired != n {
		t.Fatalf("fired %d times in all, want %d", fired, n)
	}
}

// A job added through one instance's API is fired by another instance
// without a restart.
func TestJobAddedThroughAFiresOnB(t *testing.T) {
	t.Parallel()
	bA := bustest.New(t)
	bB := bustest.Client(t, bA)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	_, stopA := startScheduler(t, bA, clk, Config{}, results)
	sB, _ := startScheduler(t, bB, clk, Config{}, results)

	if _, err := NewClient(bA).Add(t.Context(), minuteJob("added")); err != nil {
		t.Fatalf("Add: %v", err)
	}
	tick := t0.Truncate(time.Minute).Add(time.Minute)
	// Both instances learn the job from the bucket; then A goes away.
	ctx := t.Context()
	if err := clk.BlockUntilDue(ctx, tick, 2); err != nil {
		t.Fatal(err)
	}
	stopA()
	advanceTo(t, clk, tick, 1)
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || r.Job != "added" {
		t.Fatalf("result %+v, want fired", r)
	}
	if sB.Stats().Fired != 1 {
		t.Fatalf("B fired %d, want 1", sB.Stats().Fired)
	}
}

// The process stops between ticks; on restart the missed ticks follow the
// job's catch-up policy and every one not run is in the history.
func TestRestartCatchup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		catchup       Catchup
		fired, missed []string
	}{
		{Catchup{Policy: CatchupRunOnce}, []string{"13:00"}, []string{"11:00", "12:00"}},
		{Catchup{Policy: CatchupSkip}, nil, []string{"11:00", "12:00", "13:00"}},
		{Catchup{Policy: CatchupRunAll, Max: 2}, []string{"12:00", "13:00"}, []string{"11:00"}},
		{Catchup{Policy: CatchupRunAll, Max: 10}, []string{"11:00", "12:00", "13:00"}, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s-%d", tt.catchup.Policy, tt.catchup.Max), func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			clk := clock.NewFake(time.Date(2026, 5, 4, 9, 59, 0, 0, time.UTC))
			job := Job{ID: "hourly", Schedule: "0 * * * *", Prompt: "report", Catchup: tt.catchup}
			results := make(chan TickResult, 100)
			_, stop := startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)
			advanceTo(t, clk, time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC), 1)
			if rs := nextResults(t, results, 1); rs[0].What != "fired" {
				t.Fatalf("first tick: %+v", rs)
			}
			waitState(t, b, "hourly", func(st State) bool { return st.Fires == 1 })
			stop() // the process dies

			clk.Set(time.Date(2026, 5, 4, 13, 30, 0, 0, time.UTC))
			startScheduler(t, b, clk, Config{Jobs: []Job{job}}, results)
			rs := nextResults(t, results, len(tt.fired)+len(tt.missed))
			if got := tickTimes(rs, "fired"); !slices.Equal(got, tt.fired) {
				t.Errorf("fired %v, want %v", got, tt.fired)
			}
			if got := tickTimes(rs, "missed"); !slices.Equal(got, tt.missed) {
				t.Errorf("missed %v, want %v", got, tt.missed)
			}
			st := waitState(t, b, "hourly", func(st State) bool { return st.LastTick != nil && st.LastTick.Hour() == 13 })
			if st.Missed != len(tt.missed) || st.Fires != 1+len(tt.fired) {
				t.Errorf("state %+v: want missed %d, fires %d", st, len(tt.missed), 1+len(tt.fired))
			}
			hist, err := jobHistory(t.Context(), b, "hourly", 10)
			if err != nil {
				t.Fatal(err)
			}
			var inHistory []string
			for _, h := range hist {
				if h.Outcome == bus.OutcomeSkip && h.Result.Reason == ReasonMissed && h.Result.ScheduledAt != nil {
					inHistory = append(inHistory, h.Result.ScheduledAt.Format("15:04"))
				}
			}
			slices.Sort(inHistory)
			if !slices.Equal(inHistory, tt.missed) {
				t.Errorf("missed ticks in history %v, want %v", inHistory, tt.missed)
			}
			if got := len(requests(t, b)); got != 1+len(tt.fired) {
				t.Errorf("%d requests stored, want %d", got, 1+len(tt.fired))
			}
		})
	}
}

func TestApplyCatchup(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 4, 10, 5, 30, 0, time.UTC)
	due := []time.Time{}
	for m := 1; m <= 5; m++ {
		due = append(due, time.Date(2026, 5, 4, 10, m, 0, 0, time.UTC))
	}
	s := &Scheduler{cfg: Config{}.WithDefaults()}
	tests := []struct {
		c            Catchup
		fire, missed []string
		due          []time.Time
	}{
		{Catchup{Policy: CatchupRunOnce}, []string{"10:05"}, []string{"10:01", "10:02", "10:03", "10:04"}, due},
		{Catchup{Policy: CatchupSkip}, []string{"10:05"}, []string{"10:01", "10:02", "10:03", "10:04"}, due},
		{Catchup{Policy: CatchupRunAll, Max: 2}, []string{"10:03", "10:04", "10:05"}, []string{"10:01", "10:02"}, due},
		{Catchup{Policy: CatchupRunOnce}, []string{"10:03"}, []string{"10:01", "10:02"}, due[:3]},
		{Catchup{Policy: CatchupSkip}, nil, []string{"10:01", "10:02", "10:03"}, due[:3]},
		{Catchup{Policy: CatchupRunOnce}, []string{"10:05"}, nil, due[4:]},
	}
	f := func(ts []time.Time) []string {
		var out []string
		for _, x := range ts {
			out = append(out, x.Format("15:04"))
		}
		return out
	}
	for i, tt := range tests {
		tk := task{job: Job{Catchup: tt.c}}
		s.applyCatchup(&tk, tt.due, now)
		if !slices.Equal(f(tk.fire), tt.fire) || !slices.Equal(f(tk.missed), tt.missed) {
			t.Errorf("%d %+v: fire %v missed %v, want %v %v", i, tt.c, f(tk.fire), f(tk.missed), tt.fire, tt.missed)
		}
	}
}

// A paused or disabled job does not fire; resuming does not catch up the
// ticks of the pause.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, clk, Config{}, results)
	ctx := t.Context()
	if _, err := s.Add(ctx, minuteJob("p")); err != nil {
		t.Fatal(err)
	}
	st, err := s.Pause(ctx, "p", "holiday")
	if err != nil || st.Status != StatusPaused || st.State.PausedReason != "holiday" || st.Next != nil {
		t.Fatalf("Pause = %+v, %v", st, err)
	}
	// Once the scheduler has taken the job off its queue, ten minutes pass.
	eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.entries["p"]
		return e != nil && e.state.Paused && e.index < 0
	})
	clk.Advance(10 * time.Minute)
	if len(results) != 0 {
		t.Fatalf("paused job fired: %v", <-results)
	}
	st, err = s.Resume(ctx, "p")
	if err != nil || st.Status != StatusActive {
		t.Fatalf("Resume = %+v, %v", st, err)
	}
	tick := clk.Now().Truncate(time.Minute).Add(time.Minute)
	if st.Next == nil || !st.Next.Equal(tick) {
		t.Fatalf("next after resume = %v, want %v", st.Next, tick)
	}
	advanceTo(t, clk, tick, 1)
	rs := nextResults(t, results, 1)
	if rs[0].What != "fired" || !rs[0].Tick.Equal(tick) {
		t.Fatalf("after resume: %+v, want only the next tick fired", rs)
	}
	if got := s.Stats(); got.Missed != 0 || got.Fired != 1 {
		t.Fatalf("Stats() = %+v: ticks of the pause were caught up", got)
	}
	if !strings.Contains(fmt.Sprint(st.State.ResumedAt), "2026") {
		t.Fatalf("ResumedAt not set: %+v", st.State)
	}
}

// max_runs and one-shot jobs stop after their fires.
func TestMaxRunsAndAt(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	results := make(chan TickResult, 100)
	at := t0.Add(time.Minute) // 10:01:30
	jobs := []Job{
		{ID: "twice", Schedule: "* * * * *", Prompt: "p", MaxRuns: 2},
		{ID: "once", At: &at, Prompt: "p"},
	}
	s, _ := startScheduler(t, b, clk, Config{Jobs: jobs}, results)
	first := t0.Truncate(time.Minute).Add(time.Minute)
	advanceTo(t, clk, first, 1)
	nextResults(t, results, 1)
	waitState(t, b, "twice", func(st State) bool { return st.Fires == 1 })
	advanceTo(t, clk, at, 1)
	if r := nextResults(t, results, 1)[0]; r.Job != "once" || r.What != "fired" {
		t.Fatalf("%+v", r)
	}
	advanceTo(t, clk, first.Add(time.Minute), 1)
	if r := nextResults(t, results, 1)[0]; r.Job != "twice" || r.What != "fired" {
		t.Fatalf("%+v", r)
	}
	waitState(t, b, "twice", func(st State) bool { return st.Fires == 2 })
	waitState(t, b, "once", func(st State) bool { return st.Fires == 1 })
	for _, id := range []string{"twice", "once"} {
		st, err := s.Get(t.Context(), id)
		if err != nil || st.Status != StatusCompleted || st.Next != nil {
			t.Errorf("Get(%s) = %s next %v, %v; want completed", id, st.Status, st.Next, err)
		}
	}
}

// An instance that claimed a tick and died before publishing it: another
// instance takes the expired claim over and fires the tick.
func TestDeadClaimHolderIsTakenOver(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	tick := t0.Truncate(time.Minute).Add(time.Minute)
	dead, _ := json.Marshal(tickClaim{State: "claimed", What: "fire", Lease: bus.Lease{Owner: "dead-instance", Token: "t", Expires: tick.Add(claimTTL)}})
	if _, err := b.Locks.Create(t.Context(), tickKey("j", tick, 0), dead); err != nil {
		t.Fatal(err)
	}
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, clk, Config{Jobs: []Job{minuteJob("j")}}, results)
	advanceTo(t, clk, tick, 1)
	if r := nextResults(t, results, 1)[0]; r.What != "lost" {
		t.Fatalf("at the tick: %+v, want lost (another instance holds the claim)", r)
	}
	advanceTo(t, clk, tick.Add(claimTTL+time.Second), 1)
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(tick) {
		t.Fatalf("after the claim expired: %+v, want the tick fired", r)
	}
	reqs := requests(t, b)
	if len(reqs) != 1 || !reqs[0].Req.ScheduledAt.Equal(tick) {
		t.Fatalf("requests = %+v", reqs)
	}
	if st := waitState(t, b, "j", func(st State) bool { return st.Fires == 1 }); !st.LastTick.Equal(tick) {
		t.Fatalf("state = %+v", st)
	}
	if got := s.Stats(); got.Fired != 1 || got.Lost != 1 {
		t.Fatalf("Stats() = %+v", got)
	}
}

// An earlier process on this data dir claimed a tick and was killed before
// publishing it: the claim is taken over at once, whatever its expiry.
func TestClaimOfAStoppedProcessIsTakenOverAtOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	tick := t0.Truncate(time.Minute).Add(time.Minute)
	dead, _ := json.Marshal(tickClaim{State: "claimed", What: "fire", Lease: bus.Lease{Owner: "killed", Token: "t", Boot: "deadbeef", Expires: tick.Add(time.Hour)}})
	if _, err := b.Locks.Create(t.Context(), tickKey("j", tick, 0), dead); err != nil {
		t.Fatal(err)
	}
	results := make(chan TickResult, 100)
	startScheduler(t, b, clk, Config{Jobs: []Job{minuteJob("j")}}, results)
	advanceTo(t, clk, tick, 1)
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(tick) {
		t.Fatalf("at the tick: %+v, want it fired", r)
	}
}

// After long downtime the oldest missed ticks are summarized, and a
// per-second job down for days does not make the loop count forever.
func TestTakeLongDowntime(t *testing.T) {
	t.Parallel()
	s := &Scheduler{cfg: Config{}.WithDefaults()}
	now := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		down               time.Duration
		fire, listed, more int
		atLeast            bool
	}{
		// Ticks within the grace minute are on time (61 of them); of the
		// late ones the newest are listed one by one, the rest summarized.
		{time.Hour, 61, maxEnumerate - 61, 3600 - maxEnumerate, false},
		{48 * time.Hour, 61, maxEnumerate - 61, maxScan - (maxEnumerate - 61), true},
	} {
		last := now.Add(-tt.down)
		e := &entry{job: Job{ID: "sec", Schedule: "@every 1s", Catchup: Catchup{Policy: CatchupRunOnce}}, sched: Every(time.Second), index: -1}
		e.state.LastTick = &last
		e.next = e.sched.Next(e.anchor())
		tk, ok := s.take(e, now)
		if !ok || len(tk.fire) != tt.fire || len(tk.missed) != tt.listed || tk.moreMissed != tt.more || tk.moreAtLeast != tt.atLeast {
			t.Errorf("down %s: fire %d missed %d more %d atLeast %v, want %d %d %d %v",
				tt.down, len(tk.fire), len(tk.missed), tk.moreMissed, tk.moreAtLeast, tt.fire, tt.listed, tt.more, tt.atLeast)
		}
		if !tk.fire[len(tk.fire)-1].Equal(now) || !e.cursor.Equal(now) {
			t.Errorf("down %s: last fired %v, cursor %v; want both %v", tt.down, tk.fire[len(tk.fire)-1], e.cursor, now)
		}
		if n := e.sched.Next(e.anchor()); !n.Equal(now.Add(time.Second)) {
			t.Errorf("down %s: next after take = %v, want %v", tt.down, n, now.Add(time.Second))
		}
	}
}
