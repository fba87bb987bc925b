package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/connectors"
)

// fakeAnswers reports when its Answer starts and stops polling.
type fakeAnswers struct {
	name        string
	start, stop chan string
}

func (f *fakeAnswers) Answer(ctx context.Context, _ connectors.Decider) error {
	f.start <- f.name
	<-ctx.Done()
	f.stop <- f.name
	return nil
}

// One instance polls a bot at a time, under its lease: the other takes
// over when the first stops; a lost lease stops polling.
func TestOnePollerPerBot(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	start, stop := make(chan string, 4), make(chan string, 4)
	ctx := t.Context()
	cancels := map[string]context.CancelFunc{}
	for _, name := range []string{"one", "two"} {
		pctx, cancel := context.WithCancel(ctx)
		cancels[name] = cancel
		p := &poller{ttl: 900 * time.Millisecond, bus: bustest.Client(t, b), name: "phone", c: &fakeAnswers{name: name, start: start, stop: stop}, log: zap.NewNop()}
		done := make(chan struct{})
		go func() { defer close(done); p.run(pctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	recv := func(ch chan string, what string) string {
		t.Helper()
		select {
		case v := <-ch:
			return v
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s", what)
		}
		return ""
	}
	first := recv(start, "poller started")
	// The lease names the instance that polls; the other waits.
	var rec answerRecord
	ent, err := b.Locks.Get(ctx, answerLeaseKey("phone"))
	if err != nil || ent == nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ent.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Connector != "phone" || rec.Token == "" {
		t.Fatalf("lease record = %+v", rec)
	}
	cancels[first]()
	if got := recv(stop, "the first poller's stop"); got != first {
		t.Fatalf("%s stopped, want %s", got, first)
	}
	second := recv(start, "the other poller taking over")
	if second == first {
		t.Fatalf("%s polls again after it stopped", first)
	}
	// The lease is lost (removed under it): polling stops, then the
	// lease is taken again and polling resumes.
	if err := b.Locks.Purge(ctx, answerLeaseKey("phone")); err != nil {
		t.Fatal(err)
	}
	if got := recv(stop, "the stop after the lease was lost"); got != second {
		t.Fatalf("%s stopped, want %s", got, second)
	}
	if got := recv(start, "polling again under a new lease"); got != second {
		t.Fatalf("%s polls, want %s", got, second)
	}
}
