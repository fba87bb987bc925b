package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// TestFullStore: with JetStream's store full, a webhook caller reads 507
// naming bus.max_store, /readyz says not ready, the gauge says full, the log
// says it once, and once space is freed everything goes on by itself.
func TestFullStore(t *testing.T) {
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	addr := freeAddr(t)
	const token = "store-token-0123456789abcdef"
	cfg := writeConfig(t, dir, `
bus:
  listen: 127.0.0.1:0
  max_store: 8388608
http:
  listen: `+addr+`
heartbeat: {enabled: false}
webhook:
  tokens: [{name: ci, token: `+token+`}]
model:
  script:
    rules: [{match: {source: task}, text: "ok"}]
`)
	_, stop := startServe(t, cfg, dataDir)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	post := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tasks", strings.NewReader(`{"prompt":"hello"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		tick := time.NewTicker(20 * time.Millisecond) // polling: HTTP has no event to wait on
		defer tick.Stop()
		for deadline := time.Now().Add(30 * time.Second); !ok(); <-tick.C {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 30s", what)
			}
		}
	}
	waitFor("ready", func() bool { c, _ := get("/readyz"); return c == http.StatusOK })

	// Fill the store from outside, as other data on the same server would.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := bus.Dial(ctx, bus.Config{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js := c.JetStream()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 512<<10)
	for i := 0; ; i++ {
		if _, err := js.Publish(ctx, "filler.x", chunk); err != nil {
			if !bus.IsStoreFull(err) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
		if i > 100 {
			t.Fatal("the store never filled")
		}
	}

	code, body := post()
	if code != http.StatusInsufficientStorage || !strings.Contains(body, "bus.max_store") || !strings.Contains(body, "store-full") {
		t.Fatalf("POST /v1/tasks with the store full = %d %s; want 507 naming bus.max_store", code, body)
	}
	for range 5 {
		post()
	}
	waitFor("/readyz 503", func() bool { c, _ := get("/readyz"); return c == http.StatusServiceUnavailable })
	if _, m := get("/metrics"); !strings.Contains(m, "agentwork_bus_store_full 1") {
		t.Errorf("/metrics while full lacks agentwork_bus_store_full 1")
	}

	// Free the space: everything goes on without a restart.
	if err := js.DeleteStream(ctx, "FILLER"); err != nil {
		t.Fatal(err)
	}
	waitFor("/readyz 200 after space was freed", func() bool { c, _ := get("/readyz"); return c == http.StatusOK })
	if code, body := post(); code != http.StatusAccepted {
		t.Fatalf("POST after space was freed = %d %s, want 202", code, body)
	}
	if _, m := get("/metrics"); !strings.Contains(m, "agentwork_bus_store_full 0") {
		t.Errorf("/metrics after space was freed lacks agentwork_bus_store_full 0")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
