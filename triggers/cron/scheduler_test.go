package cron

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

func secondJob(id string) Job {
	return Job{ID: id, Schedule: "* * * * * *", Prompt: "say hi", Targets: []string{"ops"}}
}

// consecutive reports whether ticks are whole seconds, one after another.
func consecutive(ticks []time.Time) bool {
	for i, tk := range ticks {
		if !tk.Equal(tk.Truncate(time.Second)) || (i > 0 && !tk.Equal(ticks[i-1].Add(time.Second))) {
			return false
		}
	}
	return true
}

func TestSchedulerFiresEachTick(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	s, stop := startScheduler(t, b, Config{Jobs: []Job{secondJob("hello")}}, results)
	rs := nextResults(t, results, 3)
	stop()
	if fired := ticksOf(rs, "fired"); len(fired) != 3 || !consecutive(fired) {
		t.Fatalf("results %v, want three ticks fired, one a second", rs)
	}
	for _, r := range rs {
		if late := r.At.Sub(r.Tick); late < 0 || late > 2*time.Second {
			t.Errorf("tick %s fired %s after it, want within 2s", r.Tick.Format(time.TimeOnly), late)
		}
	}
	reqs := requests(t, b)
	if len(reqs) < 3 {
		t.Fatalf("%d requests stored, want at least 3", len(reqs))
	}
	var ticks []time.Time
	for i, r := range reqs {
		tick := r.Req.ScheduledAt.UTC()
		ticks = append(ticks, tick)
		if want := "hello:" + tick.Format(time.RFC3339); r.MsgID != want {
			t.Errorf("request %d Nats-Msg-Id = %q, want %q", i, r.MsgID, want)
		}
		if r.Req.Source != "cron" || r.Req.Name != "hello" || r.Req.Manual || !slices.Equal(r.Req.Targets, []string{"ops"}) ||
			r.Req.Deliver != "auto" || r.Req.Prompt != "say hi" || r.Req.Metadata[metaCatchup] != "" {
			t.Errorf("request %d = %+v", i, r.Req)
		}
	}
	if !consecutive(ticks) {
		t.Errorf("stored ticks %v, want one a second, each once", ticks)
	}
	last := ticks[len(ticks)-1]
	st := waitState(t, b, "hello", func(st State) bool { return st.Fires == len(reqs) })
	if st.LastTick == nil || !st.LastTick.Equal(last) || st.NextFire == nil || !st.NextFire.Equal(last.Add(time.Second)) {
		t.Fatalf("state = %+v, want last tick %s", st, last)
	}
	if got := s.Stats(); got.Fired != int64(len(reqs)) || got.Failed != 0 {
		t.Fatalf("Stats() = %+v, want %d fired", got, len(reqs))
	}
}

// Two instances on one bus share the timers' fires: each tick is published
// by exactly one of them.
func TestTwoSchedulersFireEachTickOnce(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	results := make(chan TickResult, 100)
	cfg := Config{Jobs: []Job{secondJob("per-second")}}
	s1, stop1 := startScheduler(t, b, cfg, results)
	s2, stop2 := startScheduler(t, b2, cfg, results)
	nextResults(t, results, 4)
	stop1()
	stop2()
	reqs := requests(t, b)
	var ticks []time.Time
	for _, r := range reqs {
		ticks = append(ticks, r.Req.ScheduledAt.UTC())
	}
	if len(ticks) < 4 || !consecutive(ticks) {
		t.Fatalf("stored ticks %v, want at least 4, one a second, each once", ticks)
	}
	if fired := s1.Stats().Fired + s2.Stats().Fired; fired != int64(len(reqs)) {
		t.Fatalf("fired %d times in all, want %d", fired, len(reqs))
	}
}

// A job added through one instance's API is fired by another instance
// without a restart.
func TestJobAddedThroughAFiresOnB(t *testing.T) {
	t.Parallel()
	bA := bustest.New(t)
	bB := bustest.Client(t, bA)
	resultsA, resultsB := make(chan TickResult, 100), make(chan TickResult, 100)
	_, stopA := startScheduler(t, bA, Config{}, resultsA)
	sB, _ := startScheduler(t, bB, Config{}, resultsB)

	if _, err := NewClient(bA).Add(t.Context(), secondJob("added")); err != nil {
		t.Fatalf("Add: %v", err)
	}
	// The job's timer is armed; then A goes away.
	eventually(t, func() bool { return !pendingDue(t, bA, timerKey("added")).IsZero() })
	stopA()
	if r := nextResults(t, resultsB, 1)[0]; r.What != "fired" || r.Job != "added" {
		t.Fatalf("result %+v, want fired", r)
	}
	if sB.Stats().Fired < 1 {
		t.Fatalf("B fired %d, want at least 1", sB.Stats().Fired)
	}
}

// A change to a job re-arms its timer on the instances that see it: a
// daily job changed to fire every second fires within seconds; a deleted
// job's timer is gone.
func TestChangedJobIsRearmed(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, Config{}, results, armAhead(0)) // next year's tick armed too
	ctx := t.Context()
	if _, err := s.Add(ctx, Job{ID: "j", Schedule: "0 0 1 1 *", Prompt: "p"}); err != nil {
		t.Fatal(err)
	}
	yearly := time.Date(time.Now().UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC)
	eventually(t, func() bool { return pendingDue(t, b, timerKey("j")).Equal(yearly.Add(-fireLead)) })
	if _, err := s.Update(ctx, "j", []byte(`{"schedule":"* * * * * *"}`)); err != nil {
		t.Fatal(err)
	}
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || r.Job != "j" {
		t.Fatalf("after the change: %+v, want fired", r)
	}
	if err := s.Delete(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return pendingDue(t, b, timerKey("j")).IsZero() })
}

// The process was down for three days of a daily job: on start the missed
// ticks follow the job's catch-up policy and every one not run is in the
// history.
func TestRestartCatchup(t *testing.T) {
	t.Parallel()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	day := func(n int) string { return today.AddDate(0, 0, n).Format("01-02") }
	tests := []struct {
		catchup       Catchup
		fired, missed []string
	}{
		{Catchup{Policy: CatchupRunOnce}, []string{day(0)}, []string{day(-2), day(-1)}},
		{Catchup{Policy: CatchupSkip}, nil, []string{day(-2), day(-1), day(0)}},
		{Catchup{Policy: CatchupRunAll, Max: 2}, []string{day(-1), day(0)}, []string{day(-2)}},
		{Catchup{Policy: CatchupRunAll, Max: 10}, []string{day(-2), day(-1), day(0)}, nil},
	}
	dates := func(ts []time.Time) []string {
		var out []string
		for _, x := range ts {
			out = append(out, x.Format("01-02"))
		}
		return out
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s-%d", tt.catchup.Policy, tt.catchup.Max), func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			job := Job{ID: "daily", Schedule: "0 0 * * *", Prompt: "report", Catchup: tt.catchup}
			last := today.AddDate(0, 0, -3) // the last tick before the process died
			seedConfig(t, b, job, last.Add(-time.Hour), State{LastTick: &last, Fires: 1})
			results := make(chan TickResult, 100)
			// A grace of a second: the midnight tick is late too, unless
			// the test runs in the first second of the day.
			// Tomorrow's timer is within the window: the fire arms it.
			startScheduler(t, b, Config{Jobs: []Job{job}, Grace: time.Second}, results, armAhead(48*time.Hour))
			rs := nextResults(t, results, len(tt.fired)+len(tt.missed))
			if got := dates(ticksOf(rs, "fired")); !slices.Equal(got, tt.fired) {
				t.Errorf("fired %v, want %v", got, tt.fired)
			}
			if got := dates(ticksOf(rs, "missed")); !slices.Equal(got, tt.missed) {
				t.Errorf("missed %v, want %v", got, tt.missed)
			}
			st := waitState(t, b, "daily", func(st State) bool { return st.LastTick != nil && st.LastTick.Equal(today) })
			if st.Missed != len(tt.missed) || st.Fires != 1+len(tt.fired) || st.NextFire == nil || !st.NextFire.Equal(today.AddDate(0, 0, 1)) {
				t.Errorf("state %+v: want missed %d, fires %d, next fire tomorrow", st, len(tt.missed), 1+len(tt.fired))
			}
			hist, err := jobHistory(t.Context(), b, "daily", 10)
			if err != nil {
				t.Fatal(err)
			}
			var inHistory []string
			for _, h := range hist {
				if h.Outcome == bus.OutcomeSkip && h.Result.Reason == ReasonMissed && h.Result.ScheduledAt != nil {
					inHistory = append(inHistory, h.Result.ScheduledAt.Format("01-02"))
					if !strings.Contains(h.Result.Detail, "passed while no instance was up") {
						t.Errorf("missed event detail %q does not say why", h.Result.Detail)
					}
				}
			}
			slices.Sort(inHistory)
			if !slices.Equal(inHistory, tt.missed) {
				t.Errorf("missed ticks in history %v, want %v", inHistory, tt.missed)
			}
			var stored []time.Time
			for _, r := range requests(t, b) {
				stored = append(stored, r.Req.ScheduledAt.UTC())
			}
			if !slices.Equal(dates(stored), tt.fired) {
				t.Errorf("requests stored for %v, want %v", dates(stored), tt.fired)
			}
			// The fire arms the timer after it wrote the state.
			eventually(t, func() bool { return pendingDue(t, b, timerKey("daily")).Add(fireLead).Equal(today.AddDate(0, 0, 1)) })
		})
	}
}

// A one-shot job whose time was already past when the config first wrote
// it is not silently completed: its tick runs or is recorded as missed, as
// its catch-up policy says.
func TestPastAtAtFirstLoad(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		catchup Catchup
		want    string
	}{
		{Catchup{Policy: CatchupRunOnce}, "fired"},
		{Catchup{Policy: CatchupSkip}, "missed"},
	} {
		t.Run(tt.catchup.Policy, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
			results := make(chan TickResult, 10)
			s, _ := startScheduler(t, b, Config{Jobs: []Job{{ID: "once", At: &at, Prompt: "p", Catchup: tt.catchup}}}, results)
			if r := nextResults(t, results, 1)[0]; r.What != tt.want || !r.Tick.Equal(at) {
				t.Fatalf("result %+v, want the tick of %s %s", r, at, tt.want)
			}
			st := waitState(t, b, "once", func(st State) bool { return st.LastTick != nil })
			if st.Fires+st.Missed != 1 || st.NextFire != nil {
				t.Fatalf("state %+v", st)
			}
			if got, err := s.Get(t.Context(), "once"); err != nil || got.Status != StatusCompleted {
				t.Fatalf("Get = %s, %v; want completed", got.Status, err)
			}
		})
	}
}

func TestPlanCatchup(t *testing.T) {
	t.Parallel()
	at := func(m int) time.Time { return time.Date(2026, 5, 4, 10, m, 0, 0, time.UTC) }
	now := at(5).Add(30 * time.Second)
	f := func(ts []time.Time) []string {
		var out []string
		for _, x := range ts {
			out = append(out, x.Format("15:04"))
		}
		return out
	}
	tests := []struct {
		c            Catchup
		from         time.Time // ticks after it are due: 10:01 .. 10:05 from 10:00
		left         int
		fire, missed []string
		late         int
	}{
		{Catchup{Policy: CatchupRunOnce}, at(0), -1, []string{"10:05"}, []string{"10:01", "10:02", "10:03", "10:04"}, 0},
		{Catchup{Policy: CatchupSkip}, at(0), -1, []string{"10:05"}, []string{"10:01", "10:02", "10:03", "10:04"}, 0},
		{Catchup{Policy: CatchupRunAll, Max: 2}, at(0), -1, []string{"10:03", "10:04", "10:05"}, []string{"10:01", "10:02"}, 2},
		{Catchup{Policy: CatchupRunAll, Max: 2}, at(0), 1, []string{"10:03"}, []string{"10:01", "10:02"}, 1},
		{Catchup{Policy: CatchupRunOnce}, at(4), -1, []string{"10:05"}, nil, 0},
	}
	for i, tt := range tests {
		b := plan(Job{Catchup: tt.c}, Every(time.Minute), tt.from, now, time.Minute, tt.left)
		if !slices.Equal(f(b.fire), tt.fire) || !slices.Equal(f(b.missed), tt.missed) || b.late != tt.late ||
			!b.last.Equal(at(5)) || !b.next.Equal(at(6)) {
			t.Errorf("%d %+v: fire %v missed %v late %d last %v next %v, want %v %v %d, last 10:05, next 10:06",
				i, tt.c, f(b.fire), f(b.missed), b.late, b.last, b.next, tt.fire, tt.missed, tt.late)
		}
	}
	// Late ticks only (the on-time one is not due yet).
	for _, tt := range []struct {
		c            Catchup
		fire, missed []string
	}{
		{Catchup{Policy: CatchupRunOnce}, []string{"10:03"}, []string{"10:01", "10:02"}},
		{Catchup{Policy: CatchupSkip}, nil, []string{"10:01", "10:02", "10:03"}},
	} {
		b := plan(Job{Catchup: tt.c}, Every(time.Minute), at(0), at(3).Add(30*time.Second), 0, -1)
		if !slices.Equal(f(b.fire), tt.fire) || !slices.Equal(f(b.missed), tt.missed) {
			t.Errorf("%+v, ticks 10:01-10:03 late: fire %v missed %v, want %v %v", tt.c, f(b.fire), f(b.missed), tt.fire, tt.missed)
		}
	}
	// Nothing due: the next tick only.
	if b := plan(Job{}, Every(time.Minute), at(5), now, time.Minute, -1); len(b.fire)+len(b.missed) != 0 || !b.last.IsZero() || !b.next.Equal(at(6)) {
		t.Errorf("nothing due: %+v", b)
	}
	// Expiry ends the ticks.
	exp := at(3)
	if b := plan(Job{ExpiresAt: &exp}, Every(time.Minute), at(0), now, time.Minute, -1); !slices.Equal(f(b.fire), []string{"10:03"}) || !b.next.IsZero() {
		t.Errorf("expiring at 10:03: fire %v next %v, want [10:03] and none", f(b.fire), b.next)
	}
}

// A paused job does not fire (its timer is cancelled); resuming arms it
// again and does not catch up the ticks of the pause.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	// A second job marks the passing seconds.
	s, _ := startScheduler(t, b, Config{Jobs: []Job{secondJob("metronome")}}, results)
	ctx := t.Context()
	if _, err := s.Add(ctx, secondJob("p")); err != nil {
		t.Fatal(err)
	}
	next := func(job string) TickResult {
		t.Helper()
		for {
			if r := nextResults(t, results, 1)[0]; r.Job == job {
				return r
			}
		}
	}
	next("p")
	st, err := s.Pause(ctx, "p", "holiday")
	if err != nil || st.Status != StatusPaused || st.State.PausedReason != "holiday" || st.Next != nil {
		t.Fatalf("Pause = %+v, %v", st, err)
	}
	eventually(t, func() bool { return pendingDue(t, b, timerKey("p")).IsZero() })
	pausedAt := *st.State.PausedAt
	// Two ticks of the metronome pass; p does not fire (but for a fire
	// already under way when the pause came).
	for n := 0; n < 2; {
		r := nextResults(t, results, 1)[0]
		switch {
		case r.Job == "metronome":
			if r.Tick.After(pausedAt) {
				n++
			}
		case r.What != "fired" || r.Tick.After(pausedAt):
			t.Fatalf("after the pause: %+v", r)
		}
	}
	st, err = s.Resume(ctx, "p")
	if err != nil || st.Status != StatusActive || st.State.ResumedAt == nil {
		t.Fatalf("Resume = %+v, %v", st, err)
	}
	r := next("p")
	if r.What != "fired" || !r.Tick.After(*st.State.ResumedAt) {
		t.Fatalf("after resume: %+v, want the next tick after %s fired", r, st.State.ResumedAt)
	}
	if got := s.Stats(); got.Missed != 0 {
		t.Fatalf("Stats() = %+v: ticks of the pause were recorded", got)
	}
}

// max_runs and one-shot jobs stop after their fires: no timer is left.
func TestMaxRunsAndAt(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	at := time.Now().UTC().Add(1500 * time.Millisecond)
	jobs := []Job{
		{ID: "twice", Schedule: "* * * * * *", Prompt: "p", MaxRuns: 2},
		{ID: "once", At: &at, Prompt: "p"},
	}
	s, _ := startScheduler(t, b, Config{Jobs: jobs}, results)
	waitState(t, b, "twice", func(st State) bool { return st.Fires == 2 })
	waitState(t, b, "once", func(st State) bool { return st.Fires == 1 })
	for _, id := range []string{"twice", "once"} {
		eventually(t, func() bool { return pendingDue(t, b, timerKey(id)).IsZero() })
		st, err := s.Get(t.Context(), id)
		if err != nil || st.Status != StatusCompleted || st.Next != nil || st.State.NextFire != nil {
			t.Errorf("Get(%s) = %s next %v, state next %v, %v; want completed", id, st.Status, st.Next, st.State.NextFire, err)
		}
	}
	if got := s.Stats().Fired; got != 3 {
		t.Errorf("fired %d, want 3", got)
	}
}

// After long downtime the oldest missed ticks are summarized, and a
// per-second job down for days does not make the fire count forever.
func TestPlanLongDowntime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 4, 10, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		down               time.Duration
		fire, listed, more int
		atLeast            bool
	}{
		// The latest tick is on time; the 60 before it, though within the
		// grace minute, were overtaken by it and are late like the rest
		// (run_once: missed). Of the late ones the newest are listed one
		// by one, the rest summarized.
		{time.Hour, 1, maxEnumerate - 1, 3600 - maxEnumerate, false},
		{48 * time.Hour, 1, maxEnumerate - 1, maxScan - (maxEnumerate - 61), true},
	} {
		j := Job{ID: "sec", Schedule: "@every 1s", Catchup: Catchup{Policy: CatchupRunOnce}}
		b := plan(j, Every(time.Second), now.Add(-tt.down), now, DefaultGrace, -1)
		if len(b.fire) != tt.fire || len(b.missed) != tt.listed || b.moreN != tt.more || b.moreAtLeast != tt.atLeast {
			t.Errorf("down %s: fire %d missed %d more %d atLeast %v, want %d %d %d %v",
				tt.down, len(b.fire), len(b.missed), b.moreN, b.moreAtLeast, tt.fire, tt.listed, tt.more, tt.atLeast)
		}
		if !b.fire[len(b.fire)-1].Equal(now) || !b.last.Equal(now) || !b.next.Equal(now.Add(time.Second)) {
			t.Errorf("down %s: last fired %v, last %v, next %v; want %v, %v, %v", tt.down, b.fire[len(b.fire)-1], b.last, b.next, now, now, now.Add(time.Second))
		}
		if d := moreDetail(j, b, 1, ""); !strings.Contains(d, "passed while no instance was up") {
			t.Errorf("summary detail %q", d)
		}
	}
}

// A one-shot moved while its fire waits for its tick (the timer fires a
// second ahead) does not fire at its old time: the fire sees the change
// after the wait and works from the job as it is now. It fires once, at
// its new time.
func TestOneShotMovedWhileItsFireWaits(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, Config{}, results)
	ctx := t.Context()
	at := time.Now().UTC().Add(3 * time.Second).Truncate(time.Second)
	if _, err := s.Add(ctx, Job{ID: "once", At: &at, Prompt: "p"}); err != nil {
		t.Fatal(err)
	}
	// The timer fires a second ahead; its fire then waits for the tick.
	eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.inFire["once"] != nil
	})
	moved := at.Add(2 * time.Second)
	if _, err := s.Update(ctx, "once", []byte(`{"at":"`+moved.Format(time.RFC3339)+`"}`)); err != nil {
		t.Fatal(err)
	}
	if r := nextResults(t, results, 1)[0]; r.What != "fired" || !r.Tick.Equal(moved) {
		t.Fatalf("result %+v, want fired at the new time %s", r, moved)
	}
	reqs := requests(t, b)
	if len(reqs) != 1 || !reqs[0].Req.ScheduledAt.Equal(moved) {
		var got []string
		for _, r := range reqs {
			got = append(got, r.Req.ScheduledAt.Format(time.TimeOnly))
		}
		t.Fatalf("requests for %v, want one, for %s", got, moved.Format(time.TimeOnly))
	}
}
