package webhook_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/model/script"
	"github.com/agentwork/agentwork/tools"
)

// End to end with the real runner: a webhook task and its replay make
// exactly one run, whose event points back at the 202's request id.
func TestOneRunPerKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	events := make(chan *nats.Msg, 16)
	sub, err := f.b.Conn().ChanSubscribe(f.b.Subjects.Events(), events)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	p, err := script.New(script.Config{Rules: []script.Rule{{Match: script.Match{Source: "task"}, Reply: script.Reply{Text: "done: {{prompt}}"}}}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tools.NewRegistry(tools.Notify())
	if err != nil {
		t.Fatal(err)
	}
	r := agentwork.NewRunner(f.b, p, reg, agentwork.Config{Concurrency: 1}) // in stream order
	r.Handle("task", agentwork.Policy{Output: []agentwork.OutputGate{agentwork.ModeGate{Default: agentwork.DeliverNone}}})
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := r.Run(ctx); err != nil {
			t.Errorf("Runner.Run = %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	body := `{"prompt":"count the open tickets","name":"tickets"}`
	first := f.do(t, call{body: body, header: signedBy("msg_once", now, body, newSecret)}).accepted(t)
	second := f.do(t, call{body: body, header: signedBy("msg_once", now.Add(time.Minute), body, oldSecret)}).accepted(t)
	if second.ID != first.ID {
		t.Fatalf("replay id = %s, want %s", second.ID, first.ID)
	}
	// Then a different task: once its event is in, the first one's would be too.
	third := f.do(t, call{body: `{"prompt":"later","name":"tickets"}`, header: merge(bearer(tokCI), http.Header{"Idempotency-Key": {"other"}})}).accepted(t)

	runs := map[string]int{}
	deadline := time.After(15 * time.Second)
	for runs[third.ID] == 0 || runs[first.ID] == 0 {
		select {
		case m := <-events:
			ev, err := bus.DecodeEvent(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type != "agentwork.task.done" {
				t.Fatalf("event %s on %s, want agentwork.task.done: %s", ev.Type, m.Subject, ev.Data)
			}
			runs[ev.CausationID]++
		case <-deadline:
			t.Fatalf("runs by request id = %v; want one for %s and %s", runs, first.ID, third.ID)
		}
	}
	// One run at a time, in stream order: a second run of the first request
	// would have ended before the third's. Flush to collect what is in flight.
	if err := f.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	for len(events) > 0 {
		ev, _ := bus.DecodeEvent((<-events).Data)
		runs[ev.CausationID]++
	}
	if runs[first.ID] != 1 || len(runs) != 2 {
		t.Fatalf("runs by request id = %v, want exactly one run of %s", runs, first.ID)
	}
}
