package cron

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// A first start arms the timers of the ticks within the arm-ahead
// window only: a job due in three hours costs no write until its tick
// comes near, and the arming pass has a timer of its own half a window
// ahead.
func TestArmOnlyWithinWindow(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	far := time.Now().UTC().Add(3 * time.Hour)
	cfg := Config{Jobs: []Job{
		{ID: "near", Schedule: "*/2 * * * * *", Prompt: "p"},
		{ID: "far", Schedule: fmt.Sprintf("%d %d * * *", far.Minute(), far.Hour()), Prompt: "p"},
	}}
	s, _ := startScheduler(t, b, cfg, make(chan TickResult, 64))
	select {
	case <-s.Armed():
	case <-time.After(waitFor):
		t.Fatal("the start's arming pass did not end")
	}
	tm := bus.NewTimers(b)
	eventually(t, func() bool {
		_, err := tm.Pending(t.Context(), timerKey("near"))
		return err == nil
	})
	if p, err := tm.Pending(t.Context(), timerKey("far")); !isErr(err, bus.ErrNoTimer) {
		t.Fatalf("a timer for a tick three hours ahead (window %s): %+v, %v", DefaultArmAhead, p, err)
	}
	var next time.Time
	eventually(t, func() bool {
		p, err := tm.Pending(t.Context(), aheadKey)
		next = p.Due
		return err == nil
	})
	if d := time.Until(next); d < DefaultArmAhead/2-time.Minute || d > DefaultArmAhead/2 {
		t.Fatalf("the arming pass's timer is due in %s, want about %s", d, DefaultArmAhead/2)
	}
	// The API still tells the far job's next fire.
	j, err := s.Get(t.Context(), "far")
	if err != nil {
		t.Fatal(err)
	}
	if j.Next == nil || !j.Next.Equal(far.Truncate(time.Minute)) {
		t.Fatalf("far's next fire %v, want its tick at %s", j.Next, far.Truncate(time.Minute))
	}
}

// A job whose next tick is beyond the window when it fires has no timer
// until an arming pass (on its own timer, every half window) finds the
// tick within reach: every tick still fires, on time and once.
func TestArmingPassArmsTicksAsTheyComeNear(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := Config{Jobs: []Job{{ID: "every3", Schedule: "*/3 * * * * *", Prompt: "p"}}}
	results := make(chan TickResult, 64)
	// A window of a second: after each fire the next tick (3 s on, its
	// timer due 2 s on) is beyond it.
	startScheduler(t, b, cfg, results, func(s *Scheduler) { s.ahead = time.Second })
	rs := nextResults(t, results, 4)
	for i, r := range rs {
		if r.What != "fired" {
			t.Fatalf("tick %d: %+v, want fired", i, r)
		}
		if i > 0 && r.Tick.Sub(rs[i-1].Tick) != 3*time.Second {
			t.Fatalf("ticks %v then %v: one was skipped or fired twice", rs[i-1].Tick, r.Tick)
		}
	}
}
