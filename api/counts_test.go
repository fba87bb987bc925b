package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// emitMany publishes n run events of source and outcome without waiting
// for each ack, as a busy runner does.
func emitMany(t *testing.T, b *bus.Bus, source, outcome string, n int) {
	t.Helper()
	bustest.EmitEvents(t, b, source, outcome, "many", agentwork.Result{Source: source, Name: "many", Outcome: outcome}, n)
}

type runCounts struct {
	Since  *time.Time        `json:"since"`
	Counts map[string]uint64 `json:"counts"`
}

// GET /v1/runs/counts counts the runs by outcome exactly, also far beyond
// the 1,000 a runs list holds, since a time and of some sources.
func TestRunCounts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	emitMany(t, f.b, "cron", bus.OutcomeDone, 3)
	st, err := f.b.JetStream().Stream(t.Context(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	mid := info.State.LastTime.Add(time.Nanosecond) // what is stored next is stored after it
	emitMany(t, f.b, "cron", bus.OutcomeDone, 1500)
	emitMany(t, f.b, "task", bus.OutcomeDone, 20)
	emitMany(t, f.b, "heartbeat", bus.OutcomeSkip, 1100)
	emitMany(t, f.b, "task", bus.OutcomeError, 4)
	emitMany(t, f.b, bus.SourceDelivery, "delivered", 30) // no runs

	for _, c := range []struct {
		query string
		want  map[string]uint64
	}{
		{"", map[string]uint64{"done": 1523, "skip": 1100, "error": 4}},
		{"?since=" + mid.Format(time.RFC3339Nano), map[string]uint64{"done": 1520, "skip": 1100, "error": 4}},
		{"?since=1h", map[string]uint64{"done": 1523, "skip": 1100, "error": 4}},
		{"?source=task", map[string]uint64{"done": 20, "skip": 0, "error": 4}},
		{"?source=task,heartbeat&outcome=skip,error", map[string]uint64{"skip": 1100, "error": 4}},
		{"?since=" + time.Now().Add(time.Hour).UTC().Format(time.RFC3339), map[string]uint64{"done": 0, "skip": 0, "error": 0}},
	} {
		r := f.do(t, "GET", "/v1/runs/counts"+c.query, adminToken, "")
		var got runCounts
		if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
			t.Errorf("GET /v1/runs/counts%s = %d %s, want 200", c.query, r.status, r.body)
			continue
		}
		if len(got.Counts) != len(c.want) {
			t.Errorf("GET /v1/runs/counts%s = %v, want %v", c.query, got.Counts, c.want)
		}
		for k, v := range c.want {
			if got.Counts[k] != v {
				t.Errorf("GET /v1/runs/counts%s: %s = %d, want %d", c.query, k, got.Counts[k], v)
			}
		}
	}

	for _, q := range []string{"?name=x", "?limit=5", "?outcome=delivered", "?since=yesterday", "?source=Bad!"} {
		if r := f.do(t, "GET", "/v1/runs/counts"+q, adminToken, ""); r.status != 400 {
			t.Errorf("GET /v1/runs/counts%s = %d %s, want 400", q, r.status, r.body)
		}
	}
	for _, tok := range []string{"", "wrong-token", taskToken} {
		if r := f.do(t, "GET", "/v1/runs/counts", tok, ""); r.status != 401 {
			t.Errorf("GET /v1/runs/counts with token %q = %d, want 401", tok, r.status)
		}
	}
	// The counts route does not hide the run route.
	ev := emit(t, f.b, "task", bus.OutcomeDone, "one")
	if r := f.do(t, "GET", "/v1/runs/"+ev.ID, adminToken, ""); r.status != 200 {
		t.Errorf("GET /v1/runs/{id} = %d %s, want 200", r.status, r.body)
	}
}
