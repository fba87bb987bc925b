package cron

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus/bustest"
)

// A start that finds a config job's definition changed writes the index
// (the new definition, updated now) and then re-arms the job's timer.
// Killed in between (kill -9), it leaves the timer armed for the old
// definition. The next start finds the index up to date, so the job
// unchanged, and a timer pending: it must still see that the timer is
// the old definition's and arm the new one's, so that the job fires on
// its new schedule, each tick once; and leave nothing for a later
// restart to check.
func TestStartKilledBetweenIndexAndRearmArmsTheNewDefinition(t *testing.T) {
	b := bustest.New(t)
	yearly := Config{Jobs: []Job{{ID: "x", Schedule: "0 0 1 1 *", Prompt: "p"}}}
	every2s := Config{Jobs: []Job{{ID: "x", Schedule: "*/2 * * * * *", Prompt: "p"}}}

	// Next year's tick armed (beyond the arm-ahead window otherwise).
	s, stop := startScheduler(t, b, yearly, make(chan TickResult, 10), armAhead(0))
	waitSwept(t, s)
	stop()
	old, ok := pendingTimer(t, b, "x")
	if !ok {
		t.Fatal("x's timer not armed")
	}

	// The start with the changed definition, killed once its index is
	// written: its reconcile runs, nothing after it.
	killed, err := New(b, every2s)
	if err != nil {
		t.Fatal(err)
	}
	if err := killed.reconcileConfig(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p, ok := pendingTimer(t, b, "x"); !ok || string(p.Data) != string(old.Data) {
		t.Fatalf("x's timer after the killed start: %v %s, want the old definition's %s still pending", ok, p.Data, old.Data)
	}

	results := make(chan TickResult, 100)
	s, _ = startScheduler(t, b, every2s, results)
	waitSwept(t, s)
	s.mu.Lock()
	updated := s.entries["x"].job.updatedAt
	s.mu.Unlock()
	p, ok := pendingTimer(t, b, "x")
	var d timerData
	if ok {
		_ = json.Unmarshal(p.Data, &d)
	}
	if !ok || !d.UpdatedAt.Equal(updated) {
		t.Errorf("x's timer after the next start: %v %s; want one armed for the new definition (updated %s)", ok, p.Data, updated)
	}
	if _, err := b.State.Get(t.Context(), rearmKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the re-arm mark after the start's arming pass: %v; want it removed (a later restart has nothing to check)", err)
	}
	fired := map[time.Time]int{}
	deadline := time.After(waitFor)
	for len(fired) < 3 {
		select {
		case r := <-results:
			if r.Job != "x" || r.What != "fired" {
				t.Errorf("unexpected tick result %+v", r)
				continue
			}
			fired[r.Tick]++
			if fired[r.Tick] > 1 {
				t.Errorf("tick %s fired twice", r.Tick)
			}
		case <-deadline:
			t.Fatalf("x fired %d ticks in %s, want it firing every 2 s on its new schedule; its timer is due %v", len(fired), waitFor, pendingDue(t, b, timerKey("x")))
		}
	}
}
