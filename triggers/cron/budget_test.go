package cron

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
	"github.com/agentwork/agentwork/model"
	"github.com/agentwork/agentwork/model/openai"
	"github.com/agentwork/agentwork/model/openai/openaifake"
	"github.com/agentwork/agentwork/tools"
	"github.com/agentwork/agentwork/triggers/budget"
)

// A job with a daily budget of 1,000 tokens whose runs use 400 each runs
// twice, then pauses itself until the next midnight with one alert; its
// timer waits for that midnight. (The fake fails the test on a third
// model call.)
func TestBudgetPausesWithOneAlert(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fake := openaifake.New(t)
	for range 2 {
		fake.Enqueue(openaifake.Response{Reply: model.Reply{Text: "report", Usage: model.Usage{InputTokens: 300, OutputTokens: 100}}})
	}
	j := secondJob("spender")
	j.Targets = []string{"ops"}
	j.Budget = budget.Budget{DailyTokens: 1000}
	results := make(chan TickResult, 1000)
	s, _ := startScheduler(t, b, Config{Jobs: []Job{j}}, results, armAhead(48*time.Hour)) // tomorrow's tick armed
	p, err := openai.New(fake.Config())
	if err != nil {
		t.Fatal(err)
	}
	startRunnerWith(t, b, clock.Real{}, s, p)

	st := waitState(t, b, "spender", func(st State) bool { return st.Paused })
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if st.Spent == nil || st.Spent.Tokens != 800 || st.Spent.LastRun != 400 || st.Spent.Runs != 2 || st.Runs != 2 ||
		st.PausedUntil == nil || !st.PausedUntil.Equal(midnight) || !strings.Contains(st.PausedReason, "budget of 1000") {
		t.Fatalf("state = %+v (spent %+v), want 2 runs, 800 tokens, paused until %s", st, st.Spent, midnight)
	}
	var alerts []string
	eventually(t, func() bool {
		alerts = alerts[:0]
		ds := deliveries(t, b, "ops")
		for _, d := range ds {
			if d.Urgency == tools.UrgencyImportant {
				alerts = append(alerts, d.Text)
			}
		}
		return len(ds) == 3
	})
	if len(alerts) != 1 || !strings.Contains(alerts[0], "agentwork cron resume spender") || !strings.Contains(alerts[0], "800 tokens today") {
		t.Fatalf("alerts = %q, want one saying the job paused on its budget", alerts)
	}
	// The timer waits for the first tick of the next day.
	eventually(t, func() bool { return pendingDue(t, b, timerKey("spender")).Add(fireLead).Equal(midnight) })
	got, err := s.Get(t.Context(), "spender")
	if err != nil || got.Status != StatusPaused || got.Next == nil || !got.Next.Equal(midnight) {
		t.Fatalf("Get = %+v, %v; want paused, next %s", got, err, midnight)
	}
	// cron resume lets it run again today, with a fresh count.
	got, err = s.Resume(t.Context(), "spender")
	if err != nil || got.Status != StatusActive || got.State.Spent.Tokens != 0 || got.State.PausedUntil != nil {
		t.Fatalf("Resume = %+v, %v", got, err)
	}
}

// The pause of a budget lifts itself on the first fire of the job's
// timer from the next midnight in the job's time zone, and that tick runs.
func TestBudgetResumesNextDay(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone data")
	}
	j := Job{ID: "daily", Schedule: "0 * * * *", Timezone: "Europe/Berlin", Prompt: "p", Budget: budget.Budget{DailyTokens: 1000}}
	pausedAt := time.Date(2026, 5, 4, 22, 10, 0, 0, berlin)
	until := time.Date(2026, 5, 5, 0, 0, 0, 0, berlin)
	last := time.Date(2026, 5, 4, 22, 0, 0, 0, berlin).UTC()
	seed(t, b, j, pausedAt.Add(-48*time.Hour), State{
		LastTick: &last, Paused: true, PausedAt: ptr(pausedAt.UTC()), PausedUntil: ptr(until.UTC()), PausedReason: "budget",
		Spent: &budget.Spent{Day: "2026-05-04", Tokens: 800, LastRun: 400, Runs: 2},
	})
	clk := clock.NewFake(pausedAt.Add(50 * time.Minute)) // 23:00: a tick, but still paused
	s, err := New(b, Config{}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.fireJob(t.Context(), zap.NewNop(), "daily", 1); err != nil {
		t.Fatal(err)
	}
	if reqs := requests(t, b); len(reqs) != 0 {
		t.Fatalf("a paused job fired: %+v", reqs)
	}
	if due := pendingDue(t, b, timerKey("daily")).Add(fireLead); !due.Equal(until) {
		t.Fatalf("timer due %s, want the next midnight %s", due, until)
	}

	clk.Set(until.Add(2 * time.Second)) // the timer fires at midnight
	if err := s.fireJob(t.Context(), zap.NewNop(), "daily", 1); err != nil {
		t.Fatal(err)
	}
	st, err := readState(t.Context(), b.State, "daily")
	if err != nil {
		t.Fatal(err)
	}
	if st.Paused || st.PausedUntil != nil || st.Fires != 1 || st.LastTick == nil || !st.LastTick.Equal(until) {
		t.Fatalf("state = %+v, want resumed, the midnight tick fired", st)
	}
	reqs := requests(t, b)
	if len(reqs) != 1 || !reqs[0].Req.ScheduledAt.Equal(until) {
		t.Fatalf("requests = %+v, want the midnight tick", reqs)
	}
	got, err := s.Get(t.Context(), "daily")
	if err != nil || got.Status != StatusActive {
		t.Fatalf("Get = %+v, %v", got, err)
	}
}

// spend counts the day's tokens in the job's zone and foresees the next
// run: after 400, 400 + 400 fits in 1,000; after 800, 800 + 400 does not,
// so the second run pauses the job (once).
func TestSpend(t *testing.T) {
	t.Parallel()
	j := Job{ID: "j", Budget: budget.Budget{DailyTokens: 1000}}
	now := time.Date(2026, 5, 4, 23, 0, 0, 0, time.UTC)
	var st State
	if spend(&st, j, 400, now) {
		t.Fatal("first run of 400 paused the job (400 + 400 <= 1000)")
	}
	if !spend(&st, j, 400, now) || st.PausedUntil == nil || !st.PausedUntil.Equal(time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("second run of 400: state %+v, want paused until midnight", st)
	}
	if spend(&st, j, 400, now) {
		t.Error("a run while paused paused the job again (a second alert)")
	}
	next := State{Spent: &budget.Spent{Day: "2026-05-04", Tokens: 900}}
	if spend(&next, j, 10, now.Add(2*time.Hour)) || next.Spent.Day != "2026-05-05" || next.Spent.Tokens != 10 {
		t.Errorf("a run on the next day: spent %+v, want a fresh count", next.Spent)
	}
	var none State
	if spend(&none, Job{ID: "free"}, 1_000_000, now) {
		t.Error("a job without a budget paused")
	}
}
