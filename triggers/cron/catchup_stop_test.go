package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
)

// catchupPolicies are the jobs of the catch-up tests: one per policy.
var catchupPolicies = []struct {
	id      string
	catchup Catchup
}{
	{"once", Catchup{Policy: CatchupRunOnce}},
	{"skip", Catchup{Policy: CatchupSkip}},
	{"all2", Catchup{Policy: CatchupRunAll, Max: 2}},
	{"all10", Catchup{Policy: CatchupRunAll, Max: 10}},
}

// The restart's moment after the third tick of the stop: within
// grace (1m), the latest tick is on time; after it, every tick is late.
var catchupCases = []struct {
	name  string
	after time.Duration
	// per job: the ticks (0, 1, 2: the stop's days) fired and missed
	fired, missed map[string][]int
}{
	{"late", 30 * time.Minute,
		map[string][]int{"once": {2}, "skip": nil, "all2": {1, 2}, "all10": {0, 1, 2}},
		map[string][]int{"once": {0, 1}, "skip": {0, 1, 2}, "all2": {0}, "all10": nil}},
	{"on-time", 10 * time.Second,
		map[string][]int{"once": {2}, "skip": {2}, "all2": {0, 1, 2}, "all10": {0, 1, 2}},
		map[string][]int{"once": {0, 1}, "skip": {0, 1}, "all2": nil, "all10": nil}},
}

// Catch-up across a stop, as a restart meets it: config jobs of every
// policy had their timers armed by a first start; the scheduler stopped;
// their timers fired while no instance was up (their fires wait in the
// consumer), and two more days' ticks passed; then the scheduler starts
// again. The stored fire of each job works out the stop's ticks by the
// job's policy: the fired and missed ticks, the state's counts, the
// requests and the missed events are the same whichever moment the
// restart handles the fire at (its clock is set, so the test does not
// depend on how fast the start is), and the same as on main.
func TestCatchupAcrossStop(t *testing.T) {
	t.Parallel()
	for _, tt := range catchupCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			// A daily tick two hours ahead, within the arm-ahead window:
			// the first start arms each job's timer for it and fires
			// nothing.
			at := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
			cfg := Config{}
			for _, p := range catchupPolicies {
				cfg.Jobs = append(cfg.Jobs, Job{ID: p.id, Schedule: fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour()), Prompt: "p", Catchup: p.catchup})
			}
			day0 := downPastFirstTick(t, b, cfg)
			checkCatchup(t, b, cfg, day0, tt.after, tt.fired, tt.missed)
		})
	}
}

// downPastFirstTick starts the scheduler of cfg once, with a window
// that arms every job's timer for its first tick (none fires), stops it,
// and fires each timer into the consumer unhandled, as the time engine
// does at its due time while no instance is up: the same timer, due now.
// It returns the first tick.
func downPastFirstTick(t *testing.T, b *bus.Bus, cfg Config) time.Time {
	t.Helper()
	first := make(chan TickResult, 16)
	_, stop := startScheduler(t, b, cfg, first, func(s *Scheduler) { s.ahead = 3 * time.Hour })
	for _, j := range cfg.Jobs {
		eventually(t, func() bool { return !pendingDue(t, b, timerKey(j.ID)).IsZero() })
	}
	stop()
	if len(first) > 0 {
		t.Fatalf("the first start handled ticks: %+v", <-first)
	}
	tm := bus.NewTimers(b)
	var tick0 time.Time
	for _, j := range cfg.Jobs {
		pt, err := tm.Pending(t.Context(), timerKey(j.ID))
		if err != nil {
			t.Fatal(err)
		}
		tick0 = pt.Due.Add(fireLead)
		if err := tm.Set(t.Context(), timerKey(j.ID), time.Now(), pt.Data); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range cfg.Jobs {
		eventually(t, func() bool { return pendingDue(t, b, timerKey(j.ID)).IsZero() })
	}
	return tick0
}

// checkCatchup starts the scheduler of cfg again on a clock two days
// and after past day0 (the first of the stop's three daily ticks) and
// checks that each job fired and recorded missed the stop's ticks (0,
// 1, 2: days after day0) fired and missed say: the tick results, the
// state's counts, the stored requests and the missed events.
func checkCatchup(t *testing.T, b *bus.Bus, cfg Config, day0 time.Time, after time.Duration, fired, missed map[string][]int) {
	t.Helper()
	day := func(n int) time.Time { return day0.AddDate(0, 0, n) }

	// Up again two days later: three ticks passed.
	fake := clock.NewFake(day(2).Add(after))
	results := make(chan TickResult, 64)
	startScheduler(t, b, cfg, results, func(s *Scheduler) { s.clock = fake })
	want := 0
	for _, p := range cfg.Jobs {
		want += len(fired[p.ID]) + len(missed[p.ID])
	}
	rs := nextResults(t, results, want)
	days := func(ts []time.Time) []int {
		var out []int
		for _, x := range ts {
			out = append(out, int(x.Sub(day0)/(24*time.Hour)))
		}
		slices.Sort(out)
		return out
	}
	reqs := requests(t, b)
	for _, p := range cfg.Jobs {
		var mine []TickResult
		for _, r := range rs {
			if r.Job == p.ID {
				mine = append(mine, r)
			}
		}
		if got := days(ticksOf(mine, "fired")); !slices.Equal(got, fired[p.ID]) {
			t.Errorf("%s: fired the stop's ticks %v, want %v", p.ID, got, fired[p.ID])
		}
		if got := days(ticksOf(mine, "missed")); !slices.Equal(got, missed[p.ID]) {
			t.Errorf("%s: recorded missed %v, want %v", p.ID, got, missed[p.ID])
		}
		st := waitState(t, b, p.ID, func(st State) bool { return st.LastTick != nil && st.LastTick.Equal(day(2)) })
		if st.Fires != len(fired[p.ID]) || st.Missed != len(missed[p.ID]) {
			t.Errorf("%s: state fires %d, missed %d; want %d, %d", p.ID, st.Fires, st.Missed, len(fired[p.ID]), len(missed[p.ID]))
		}
		var stored []time.Time
		for _, r := range reqs {
			if r.Req.Name == p.ID {
				stored = append(stored, r.Req.ScheduledAt.UTC())
			}
		}
		if got := days(stored); !slices.Equal(got, fired[p.ID]) {
			t.Errorf("%s: requests stored for %v, want %v", p.ID, got, fired[p.ID])
		}
		hist, err := jobHistory(t.Context(), b, p.ID, 10)
		if err != nil {
			t.Fatal(err)
		}
		var inHistory []time.Time
		for _, h := range hist {
			if h.Outcome == bus.OutcomeSkip && h.Result.Reason == ReasonMissed && h.Result.ScheduledAt != nil {
				inHistory = append(inHistory, *h.Result.ScheduledAt)
			}
		}
		if got := days(inHistory); !slices.Equal(got, missed[p.ID]) {
			t.Errorf("%s: missed events for %v, want %v", p.ID, got, missed[p.ID])
		}
	}
	// Every tick's state is written after its result: none more came.
	if len(results) > 0 {
		t.Errorf("more tick results than the policies make: %+v", <-results)
	}
}

// Catch-up across a stop when no timer was armed for the stop's ticks:
// the first start found them beyond the arm-ahead window (the job's next
// tick derives from its definition and state, so none is armed until it
// comes near), then the scheduler was down for two days. The restart's
// arming pass arms the job's timer for its first tick after its anchor,
// long past, and its fire works out the stop's ticks by the policy just
// as a stored fire does.
func TestCatchupAcrossStopWithoutTimer(t *testing.T) {
	t.Parallel()
	for _, tt := range catchupCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := bustest.New(t)
			// The first of the stop's ticks is a few minutes ago on the
			// server's clock (so the timer the restart arms for it fires
			// at once); the first start ran two hours before it.
			day0 := time.Now().UTC().Add(-3 * time.Minute).Truncate(time.Minute)
			cfg := Config{}
			for _, p := range catchupPolicies {
				cfg.Jobs = append(cfg.Jobs, Job{ID: p.id, Schedule: fmt.Sprintf("%d %d * * *", day0.Minute(), day0.Hour()), Prompt: "p", Catchup: p.catchup})
			}
			first := make(chan TickResult, 16)
			s, stop := startScheduler(t, b, cfg, first, func(s *Scheduler) { s.clock = clock.NewFake(day0.Add(-2 * time.Hour)) })
			select {
			case <-s.Armed():
			case <-time.After(waitFor):
				t.Fatal("the first start's arming pass did not end")
			}
			for _, p := range catchupPolicies {
				if _, err := bus.NewTimers(b).Pending(t.Context(), timerKey(p.id)); !isErr(err, bus.ErrNoTimer) {
					t.Fatalf("%s: a timer for a tick two hours ahead (window 1h): %v", p.id, err)
				}
			}
			stop()
			if len(first) > 0 {
				t.Fatalf("the first start handled ticks: %+v", <-first)
			}
			checkCatchup(t, b, cfg, day0, tt.after, tt.fired, tt.missed)
		})
	}
}

// A catch-up arms the job's next tick before its own writes: after a
// restart, a round of ticks due while the jobs catch up was late behind
// them (each job's catch-up armed that round's timer only once its
// request and state were written). The job's timer for the next tick is
// pending when the catch-up's request is published, and it is the only
// timer of the job once the catch-up is recorded.
func TestCatchupArmsTheNextTickFirst(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, schedule string
		period         time.Duration
		missed         int  // tick results of the missed ticks (a summary: one)
		first          bool // armed before the catch-up's publish
	}{
		// Two of the stop's three daily ticks missed, the latest (30
		// minutes late) run.
		{"daily", "%d %d * * *", 24 * time.Hour, 2, true},
		// 2,910 ticks of a job every minute missed (1,000 results: a
		// summary of the oldest, whose range comes from the clock, and
		// the latest 999): a second instance taking the early timer's
		// fire could count the summary again, so it is armed after the
		// catch-up, as before.
		{"summary", "* * * * *", time.Minute, 1000, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			catchupArmsFirst(t, tt.schedule, tt.period, tt.missed, tt.first)
		})
	}
}

func catchupArmsFirst(t *testing.T, schedule string, period time.Duration, missed int, first bool) {
	b := bustest.New(t)
	at := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	if strings.Contains(schedule, "%d") {
		schedule = fmt.Sprintf(schedule, at.Minute(), at.Hour())
	}
	cfg := Config{Jobs: []Job{{ID: "once", Schedule: schedule, Prompt: "p"}}}
	tick0 := downPastFirstTick(t, b, cfg)

	// Up again two days and 30 minutes later, with a window that holds
	// the next tick; run_once fires the latest tick.
	now := tick0.AddDate(0, 0, 2).Add(30 * time.Minute)
	fired, next := now.Add(-30*time.Minute), now.Add(-30*time.Minute+period)
	if period < 30*time.Minute {
		fired, next = now, now.Add(period) // on time
	}
	var armed atomic.Pointer[timerData] // the job's pending timer as the catch-up was published
	results := make(chan TickResult, missed+16)
	startScheduler(t, b, cfg, results, func(s *Scheduler) {
		s.clock, s.ahead = clock.NewFake(now), 72*time.Hour
		s.publishReq = func(ctx context.Context, b *bus.Bus, req agentwork.Request, o agentwork.PublishOptions) (agentwork.Published, error) {
			if pt, err := bus.NewTimers(b).Pending(ctx, timerKey("once")); err == nil {
				var d timerData
				if json.Unmarshal(pt.Data, &d) == nil {
					armed.Store(&d)
				}
			}
			return agentwork.Publish(ctx, b, req, o)
		}
	})
	rs := nextResults(t, results, missed+1)
	if got := ticksOf(rs, "fired"); len(got) != 1 || !got[0].Equal(fired) {
		t.Fatalf("fired %v, want the stop's latest tick %s", got, fired)
	}
	switch d := armed.Load(); {
	case first && (d == nil || !d.Tick.Equal(next)):
		t.Errorf("as the catch-up was published, the job's timer was %+v; want one armed for the next tick %s", d, next)
	case !first && d != nil:
		t.Errorf("as the catch-up was published, the job's timer was armed for %s; want it armed after the catch-up", d.Tick)
	}
	waitState(t, b, "once", func(st State) bool { return st.LastTick != nil && st.LastTick.Equal(fired) })
	eventually(t, func() bool {
		got, err := bus.NewTimers(b).Pending(t.Context(), timerKey("once"))
		var d timerData
		return err == nil && json.Unmarshal(got.Data, &d) == nil && d.Tick.Equal(next)
	})
}
