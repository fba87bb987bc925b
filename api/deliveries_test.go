package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
)

// blocked is a connector that fails for good until it is unblocked.
type blocked struct {
	down  atomic.Bool
	sends atomic.Int32
}

func (c *blocked) Send(context.Context, connectors.Notification) (connectors.Receipt, error) {
	c.sends.Add(1)
	if c.down.Load() {
		return connectors.Receipt{}, connectors.Permanent(errors.New("403 Forbidden: bot was blocked by the user"))
	}
	return connectors.Receipt{Parts: 1, MessageIDs: []string{"42"}}, nil
}

func TestDeliveries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	chat := &blocked{}
	chat.down.Store(true)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- connectors.NewDispatcher(f.b, connectors.Registry{"chat": chat}, connectors.DispatcherConfig{Backoff: []time.Duration{10 * time.Millisecond}}, nil).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	n := connectors.Notification{ID: "run-1.chat", RunID: "run-1", Source: "heartbeat", Name: "default", Text: "Disk full", Target: "chat", Time: time.Now()}
	if err := connectors.Enqueue(t.Context(), f.b, n); err != nil {
		t.Fatal(err)
	}

	var list struct{ Deliveries []connectors.DeadLetter }
	deadline := time.Now().Add(10 * time.Second)
	for len(list.Deliveries) == 0 && time.Now().Before(deadline) {
		r := f.do(t, "GET", "/v1/deliveries?connector=chat", adminToken, "")
		if r.status != 200 {
			t.Fatalf("GET /v1/deliveries = %d %s", r.status, r.body)
		}
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(list.Deliveries) != 1 || list.Deliveries[0].Notification.ID != n.ID || !list.Deliveries[0].Permanent {
		t.Fatalf("failed deliveries = %+v, want the permanent failure of %s", list.Deliveries, n.ID)
	}
	if r := f.do(t, "GET", "/metrics", "", ""); !strings.Contains(string(r.body), "\nagentwork_deliveries_failed_waiting 1\n") {
		t.Errorf("/metrics lacks agentwork_deliveries_failed_waiting 1:\n%s", r.body)
	}
	if r := f.do(t, "GET", "/v1/deliveries?connector=other", adminToken, ""); string(r.body) != "{\"deliveries\":[]}\n" {
		t.Errorf("GET /v1/deliveries?connector=other = %s, want an empty list", r.body)
	}
	if r := f.do(t, "GET", "/v1/deliveries/"+n.ID, adminToken, ""); r.status != 200 {
		t.Errorf("GET one = %d %s", r.status, r.body)
	}
	for _, path := range []string{"/v1/deliveries/nope", "/v1/deliveries/nope/retry"} {
		method := "GET"
		if path == "/v1/deliveries/nope/retry" {
			method = "POST"
		}
		if r := f.do(t, method, path, adminToken, ""); r.status != 404 || r.problem(t).Detail == "" {
			t.Errorf("%s %s = %d %s, want a 404 problem", method, path, r.status, r.body)
		}
	}
	if r := f.do(t, "GET", "/v1/deliveries", "", ""); r.status != 401 {
		t.Errorf("GET /v1/deliveries without the admin token = %d, want 401", r.status)
	}

	chat.down.Store(false)
	if r := f.do(t, "POST", "/v1/deliveries/"+n.ID+"/retry", adminToken, ""); r.status != 202 {
		t.Fatalf("POST retry = %d %s, want 202", r.status, r.body)
	}
	for time.Now().Before(deadline.Add(5 * time.Second)) {
		if r := f.do(t, "GET", "/v1/deliveries/"+n.ID, adminToken, ""); r.status == 404 {
			if got := chat.sends.Load(); got != 2 {
				t.Fatalf("the connector got %d sends, want 2 (the failure and the retry)", got)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the retried delivery is still listed")
}
