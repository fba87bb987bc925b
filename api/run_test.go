package api_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/connectors"
)

// GET /v1/runs/{id} finds a run however many runs ended after it (it read
// only the newest 1000), by its event id, run id or request id, with its
// deliveries, also those recorded after the newer runs.
func TestRunOlderThanTheLatest1000(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	nid := bus.NewID()
	res := agentwork.Result{Source: "task", Name: "old", Outcome: bus.OutcomeDone, Text: "hi", NotificationIDs: []string{nid}}
	old, err := bus.NewEvent("agentwork/runner", bus.TypeOf("task", bus.OutcomeDone), "old", time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	old.RunID, old.CausationID = bus.NewID(), bus.NewID()
	if _, err := f.b.Publish(t.Context(), f.b.Subjects.Event("task", bus.OutcomeDone), old, ""); err != nil {
		t.Fatal(err)
	}
	for i := range 1005 {
		emit(t, f.b, "task", bus.OutcomeDone, fmt.Sprintf("n-%d", i))
	}
	d := connectors.Result{Notification: connectors.Notification{ID: nid, Target: "console", Text: "hi", RunID: old.RunID}, Connector: "console", Attempts: 1}
	dev, err := bus.NewEvent("agentwork/connectors/console", bus.TypeOf(bus.SourceDelivery, connectors.OutcomeDelivered), "console", time.Now(), d)
	if err != nil {
		t.Fatal(err)
	}
	dev.RunID = old.RunID
	if _, err := f.b.Publish(t.Context(), f.b.Subjects.Event(bus.SourceDelivery, connectors.OutcomeDelivered), dev, ""); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{old.ID, old.RunID, old.CausationID} {
		r := f.do(t, "GET", "/v1/runs/"+id, adminToken, "")
		var got struct {
			Run        bus.Event   `json:"run"`
			Deliveries []bus.Event `json:"deliveries"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Errorf("GET /v1/runs/%s of a run 1005 runs back = %d %s, want 200", id, r.status, r.body)
			continue
		}
		if got.Run.ID != old.ID || len(got.Deliveries) != 1 || got.Deliveries[0].ID != dev.ID {
			t.Errorf("GET /v1/runs/%s = run %s with %d deliveries, want run %s with its delivery", id, got.Run.ID, len(got.Deliveries), old.ID)
		}
	}
}

// runWith publishes a done run of runID that queued the notifications ids.
func runWith(t *testing.T, b *bus.Bus, runID string, ids ...string) bus.Event {
	t.Helper()
	res := agentwork.Result{Source: "task", Name: "n", Outcome: bus.OutcomeDone, Text: "hi", NotificationIDs: ids}
	ev, err := bus.NewEvent("agentwork/runner", bus.TypeOf("task", bus.OutcomeDone), "n", time.Now(), res)
	if err != nil {
		t.Fatal(err)
	}
	ev.RunID = runID
	if _, err := b.Publish(t.Context(), b.Subjects.Event("task", bus.OutcomeDone), ev, ""); err != nil {
		t.Fatal(err)
	}
	return ev
}

// result publishes the result of notification id of runID (its retry's),
// as the dispatcher does.
func result(t *testing.T, b *bus.Bus, runID, id string, retry int, outcome string) bus.Event {
	t.Helper()
	d := connectors.Result{Notification: connectors.Notification{ID: id, Target: "console", Text: "hi", RunID: runID, Retry: retry}, Connector: "console", Attempts: 1}
	ev, err := bus.NewEvent("agentwork/connectors/console", bus.TypeOf(bus.SourceDelivery, outcome), "console", time.Now(), d)
	if err != nil {
		t.Fatal(err)
	}
	ev.RunID = runID
	msgID := fmt.Sprintf("%s.retry.%d.%s", id, retry, outcome)
	if _, err := b.Publish(t.Context(), b.Subjects.Event(bus.SourceDelivery, outcome), ev, msgID); err != nil {
		t.Fatal(err)
	}
	return ev
}

// deadLetter records the failed delivery of id as the dispatcher does
// (its last failure was retry failed; retries were asked for).
func deadLetter(t *testing.T, b *bus.Bus, runID, id string, failed, retries int) {
	t.Helper()
	raw, _ := json.Marshal(connectors.DeadLetter{
		Notification: connectors.Notification{ID: id, Target: "console", RunID: runID}, Connector: "console",
		Attempts: 8, Error: "503", FailedAt: time.Now(), FailedRetry: failed, Retries: retries,
	})
	if _, err := b.DeadLetters.Put(t.Context(), "dead."+id, raw); err != nil {
		t.Fatal(err)
	}
}

// GET /v1/runs/{id} answers each notification of the run with its latest
// result, also when that came on a retry long after the first failure
// (the read stops once each has its result, or waits for a retry, not at
// the first result), and answers runs whose deliveries are not over.
func TestRunDeliveries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	b := f.b
	noise := func() {
		for range 30 {
			result(t, b, bus.NewID(), bus.NewID(), 0, connectors.OutcomeDelivered)
		}
	}

	// Two targets: one delivered, one failed for good.
	two := runWith(t, b, "r-two", "r-two.a", "r-two.b")
	noise()
	twoA := result(t, b, "r-two", "r-two.a", 0, connectors.OutcomeDelivered)
	noise()
	twoB := result(t, b, "r-two", "r-two.b", 0, connectors.OutcomeFailed)
	deadLetter(t, b, "r-two", "r-two.b", 0, 0)

	// Failed, then sent again from the failed deliveries and delivered
	// (which removed the dead letter).
	late := runWith(t, b, "r-late", "r-late.a")
	lateFailed := result(t, b, "r-late", "r-late.a", 0, connectors.OutcomeFailed)
	noise()

	// Failed, retried, failed again: the dead letter names the retry.
	again := runWith(t, b, "r-again", "r-again.a")
	againFirst := result(t, b, "r-again", "r-again.a", 0, connectors.OutcomeFailed)
	noise()

	// Failed, a retry queued that has no result yet.
	pending := runWith(t, b, "r-pending", "r-pending.a")
	pendingFirst := result(t, b, "r-pending", "r-pending.a", 0, connectors.OutcomeFailed)
	deadLetter(t, b, "r-pending", "r-pending.a", 0, 1)

	// Queued, no result yet; and a run that queued nothing.
	waiting := runWith(t, b, "r-waiting", "r-waiting.a")
	quiet := runWith(t, b, "r-quiet")
	noise()

	// A failed run names no notification; the alert about it, queued
	// after its event, is on its page too.
	alerted := runWith(t, b, "r-alerted")
	noise()
	alert := result(t, b, "r-alerted", "r-alerted.alert", 0, connectors.OutcomeDelivered)

	lateDelivered := result(t, b, "r-late", "r-late.a", 1, connectors.OutcomeDelivered)
	againSecond := result(t, b, "r-again", "r-again.a", 1, connectors.OutcomeFailed)
	deadLetter(t, b, "r-again", "r-again.a", 1, 1)
	noise()

	for _, c := range []struct {
		name string
		run  bus.Event
		want []bus.Event
	}{
		{"two targets", two, []bus.Event{twoA, twoB}},
		{"delivered on a later retry", late, []bus.Event{lateFailed, lateDelivered}},
		{"failed again on a retry", again, []bus.Event{againFirst, againSecond}},
		{"a retry pending", pending, []bus.Event{pendingFirst}},
		{"not delivered yet", waiting, nil},
		{"queued nothing", quiet, nil},
		{"an alert after the run", alerted, []bus.Event{alert}},
	} {
		r := f.do(t, "GET", "/v1/runs/"+c.run.ID, adminToken, "")
		var got struct {
			Run        bus.Event   `json:"run"`
			Deliveries []bus.Event `json:"deliveries"`
		}
		if r.status != 200 || json.Unmarshal(r.body, &got) != nil || got.Deliveries == nil {
			t.Errorf("%s: GET /v1/runs/{id} = %d %s, want 200 with deliveries", c.name, r.status, r.body)
			continue
		}
		var ids, want []string
		for _, d := range got.Deliveries {
			ids = append(ids, d.ID)
		}
		for _, d := range c.want {
			want = append(want, d.ID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Errorf("%s: deliveries %v, want %v", c.name, ids, want)
		}
	}
}
