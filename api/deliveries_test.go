package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

	// Wait for the dead letter to be written, by watching its bucket.
	w, err := f.b.DeadLetters.WatchAll(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	waitKV(t, w, func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValuePut })
	var list struct{ Deliveries []connectors.DeadLetter }
	r := f.do(t, "GET", "/v1/deliveries?connector=chat", adminToken, "")
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil {
		t.Fatalf("GET /v1/deliveries = %d %s", r.status, r.body)
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
	// Delivered on the retry: the dead letter is deleted.
	waitKV(t, w, func(e jetstream.KeyValueEntry) bool { return e.Operation() == jetstream.KeyValueDelete })
	if r := f.do(t, "GET", "/v1/deliveries/"+n.ID, adminToken, ""); r.status != 404 {
		t.Fatalf("GET the retried delivery = %d, want 404 once delivered", r.status)
	}
	if got := chat.sends.Load(); got != 2 {
		t.Fatalf("the connector got %d sends, want 2 (the failure and the retry)", got)
	}
}

// waitKV waits for an update of w that ok accepts.
func waitKV(t *testing.T, w jetstream.KeyWatcher, ok func(jetstream.KeyValueEntry) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-w.Updates():
			if e != nil && ok(e) {
				return
			}
		case <-timeout:
			t.Fatal("no such update of the bucket within 10s")
		}
	}
}
