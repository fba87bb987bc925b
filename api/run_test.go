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
	res := agentwork.Result{Source: "task", Name: "old", Outcome: bus.OutcomeDone, Text: "hi"}
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
	d := connectors.Result{Notification: connectors.Notification{ID: bus.NewID(), Target: "console", Text: "hi", RunID: old.RunID}, Connector: "console", Attempts: 1}
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
