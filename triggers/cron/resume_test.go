package cron

import (
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus/bustest"
)

// A job paused until a time (a budget's pause) has its timer armed for
// the first tick after the pause; resumed early through the API, its
// timer is armed again for its next tick, not left at the pause's end.
func TestEarlyResumeOfAPauseUntilRearms(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	now := time.Now().UTC()
	until := now.Add(40 * time.Second)
	seed(t, b, Job{ID: "every2", Schedule: "*/2 * * * * *", Prompt: "p"}, now.Add(-time.Hour),
		State{LastTick: ptr(now.Truncate(2 * time.Second)), Paused: true, PausedAt: &now, PausedUntil: &until, PausedBy: PausedByBudget})
	results := make(chan TickResult, 256)
	s, _ := startScheduler(t, b, Config{}, results)
	waitSwept(t, s)
	if d := pendingDue(t, b, timerKey("every2")); d.IsZero() || d.Before(until.Add(-2*time.Second)) {
		t.Fatalf("timer due %v, want about %v (paused until)", d, until)
	}
	if _, err := s.Resume(t.Context(), "every2"); err != nil {
		t.Fatal(err)
	}
	rs := nextResults(t, results, 2)
	for _, r := range rs {
		if r.What != "fired" || !r.Tick.Before(until) {
			t.Fatalf("after the resumption: %+v, want ticks fired before the pause's end %s", rs, until)
		}
	}
}
