package cron

import (
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// A restart after timers fired while no instance was up: their fires
// wait in the consumer, and the start's arming pass, which finds those
// jobs without a pending timer, must not have a second fire of the same
// tick handled beside the stored one. Each tick is reported fired once.
func TestRestartArmingPassFiresEachTickOnce(t *testing.T) {
	const n = 300
	b := bustest.New(t)
	cfg := Config{}
	for i := range n {
		cfg.Jobs = append(cfg.Jobs, Job{ID: fmt.Sprintf("job-%03d", i), Schedule: "@every 2s", Prompt: "p"})
	}
	s, stop := startScheduler(t, b, cfg, make(chan TickResult, 4*n))
	waitSwept(t, s)
	stop()
	// Down until every timer has fired into the consumer, unhandled.
	tm := bus.NewTimers(b)
	eventually(t, func() bool {
		keys, err := tm.PendingKeys(t.Context(), "cron")
		return err == nil && len(keys) == 0
	})

	results := make(chan TickResult, 100*n)
	startScheduler(t, b, cfg, results)
	// Wait until every job reported two distinct ticks fired: a second
	// fire of the first tick (a timer the pass armed for it) comes
	// before the second tick's.
	seen := map[string]map[time.Time]int{}
	distinct := 0
	deadline := time.After(2 * waitFor)
	for distinct < n {
		select {
		case <-deadline:
			t.Fatalf("%d of %d jobs fired two ticks", distinct, n)
		case r := <-results:
			if r.What != "fired" {
				continue
			}
			if seen[r.Job] == nil {
				seen[r.Job] = map[time.Time]int{}
			}
			seen[r.Job][r.Tick]++
			if seen[r.Job][r.Tick] == 1 && len(seen[r.Job]) == 2 {
				distinct++
			}
		}
	}
	twice := 0
	for id, ticks := range seen {
		for tick, c := range ticks {
			if c > 1 {
				twice++
				if twice <= 5 {
					t.Errorf("job %s: tick %s reported fired %d times, want once", id, tick.Format(time.RFC3339), c)
				}
			}
		}
	}
	if twice > 0 {
		t.Errorf("%d ticks reported fired more than once", twice)
	}
}

// The start's arming pass yields to fires that wait for a slot: the gate
// it waits on is busy while one does, and idle again once it has its slot.
func TestFireWaitingForASlotIsQueuedWork(t *testing.T) {
	b := bustest.New(t)
	s, err := New(b, Config{Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	idle := func() bool { return !s.queued.busy() }
	release, err := s.slot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !idle() {
		t.Fatal("a fire that took a free slot counts as queued")
	}
	got := make(chan func(), 1)
	go func() {
		r, err := s.slot(t.Context())
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	eventually(t, func() bool { return !idle() })
	if w := s.sweepWidth(); w != sweepShare {
		t.Errorf("arming width while a fire waits for a slot: %d, want %d", w, sweepShare)
	}
	release()
	second := <-got
	if !idle() {
		t.Error("the fire has its slot: still counted as queued")
	}
	if w := s.sweepWidth(); w != sweepParallel {
		t.Errorf("arming width with no fire queued: %d, want %d", w, sweepParallel)
	}
	second()
}
