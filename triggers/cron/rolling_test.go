package cron

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// A config job added while another instance still runs the old config
// (a rolling change). The old instance gets the job's fire: it must not
// drop it (the index lists the job), but hand it out again for an
// instance that defines it; and a restart's arming pass must not leave
// the tick to a fire that was handled (acked) without arming the next.
func TestRollingChangeJobAddedWhileOldConfigInstanceRuns(t *testing.T) {
	b := bustest.New(t)
	b2 := bustest.Client(t, b)
	x := Job{ID: "x", Schedule: "*/2 * * * * *", Prompt: "p"}
	_, _ = startScheduler(t, b2, Config{}, make(chan TickResult, 100)) // old config: no x
	sA, stopA := startScheduler(t, b, Config{Jobs: []Job{x}}, make(chan TickResult, 100))
	waitSwept(t, sA)
	if pendingDue(t, b, timerKey("x")).IsZero() {
		t.Fatal("x not armed")
	}
	stopA()
	// x's timer fires into the consumer; only the old instance is up, and
	// has the fire delivered.
	tm := bus.NewTimers(b)
	cons, err := b.JetStream().Consumer(t.Context(), bus.StreamTimers, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool {
		f, err := tm.Fired(t.Context(), timerKey("x"))
		if err != nil {
			return false
		}
		ci, err := cons.Info(t.Context())
		return err == nil && ci.Delivered.Stream >= f.Seq
	})
	// A restarts with the new config: x fires every 2 s.
	resA := make(chan TickResult, 100)
	sA, _ = startScheduler(t, b, Config{Jobs: []Job{x}}, resA)
	waitSwept(t, sA)
	fired := 0
	deadline := time.After(waitFor)
	for fired < 2 {
		select {
		case r := <-resA:
			if r.Job == "x" && r.What == "fired" {
				fired++
			}
		case <-deadline:
			t.Fatalf("after the restart: x fired %d times in %s, its pending timer is due %v; want it firing every 2 s",
				fired, waitFor, pendingDue(t, b, timerKey("x")))
		}
	}
}

// A fired copy of a job's tick that was handled (acked) but armed no next
// timer — an instance whose config did not define the job dropped it —
// is no fire to wait for: the start's arming pass arms the job.
func TestArmingPassArmsAJobWhoseFireWasDropped(t *testing.T) {
	b := bustest.New(t)
	_, stop := startScheduler(t, b, Config{}, make(chan TickResult, 1))
	var cons jetstream.Consumer
	eventually(t, func() bool {
		var err error
		cons, err = b.JetStream().Consumer(t.Context(), bus.StreamTimers, ConsumerName)
		return err == nil
	})
	stop()
	x := Job{ID: "x", Schedule: "*/2 * * * * *", Prompt: "p", Origin: OriginConfig}
	x.normalize()
	updated := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	data, err := json.Marshal(indexShard{"x": {Hash: definitionHash(x), CreatedAt: updated, UpdatedAt: updated}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.State.Put(t.Context(), shardKey(0), data); err != nil {
		t.Fatal(err)
	}
	// The tick the start will find due (nothing recorded since updated),
	// fired and acked.
	sched, err := x.Sched()
	if err != nil {
		t.Fatal(err)
	}
	x.CreatedAt, x.UpdatedAt = updated, updated
	tick := nextTick(x, sched, State{})
	td, _ := json.Marshal(timerData{Tick: tick, UpdatedAt: updated})
	tm := bus.NewTimers(b)
	if err := tm.Set(t.Context(), timerKey("x"), time.Now(), td); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(waitFor))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := <-batch.Messages()
	if !ok {
		t.Fatalf("no fire: %v", batch.Error())
	}
	if err := m.DoubleAck(t.Context()); err != nil {
		t.Fatal(err)
	}
	results := make(chan TickResult, 100)
	s, _ := startScheduler(t, b, Config{Jobs: []Job{{ID: "x", Schedule: "*/2 * * * * *", Prompt: "p"}}}, results)
	waitSwept(t, s)
	s.mu.Lock()
	if got := s.entries["x"].job.updatedAt; !got.Equal(updated) {
		t.Errorf("x's definition changed at %v, want the index's %v", got, updated)
	}
	s.mu.Unlock()
	deadline := time.After(waitFor)
	for {
		select {
		case r := <-results:
			if r.Job == "x" && r.What == "fired" && r.Tick.After(tick) {
				return
			}
		case <-deadline:
			t.Fatalf("x never fired after the start; its pending timer is due %v", pendingDue(t, b, timerKey("x")))
		}
	}
}

// On an instance whose config does not define a job the index lists (a
// rolling change), the job's run is deferred for an instance that
// defines it, not skipped as deleted; a job neither knows is deleted.
func TestJobGateDefersAJobAnotherConfigDefines(t *testing.T) {
	b := bustest.New(t)
	old, _ := startScheduler(t, b, Config{}, make(chan TickResult, 1))
	x := Job{ID: "x", Schedule: "0 3 * * *", Prompt: "p", Origin: OriginConfig}
	x.normalize()
	data, _ := json.Marshal(indexShard{"x": {Hash: definitionHash(x), CreatedAt: t0, UpdatedAt: t0}})
	if _, err := b.State.Put(t.Context(), shardKey(0), data); err != nil {
		t.Fatal(err)
	}
	g := &jobGate{s: old}
	run := &agentwork.Run{Request: agentwork.Request{Source: bus.SourceCron, Name: "x", Metadata: map[string]string{}}}
	var d *agentwork.DeferError
	if err := g.Check(t.Context(), run); !errors.As(err, &d) {
		t.Errorf("Check(x, defined by another config) = %v, want a defer", err)
	}
	run.Request.Name = "gone"
	if err := g.Check(t.Context(), run); !isSkip(err, ReasonDeleted) {
		t.Errorf("Check(gone) = %v, want a skip, reason deleted", err)
	}
}

func isSkip(err error, reason string) bool {
	s, ok := agentwork.AsSkip(err)
	return ok && s.Reason == reason
}
