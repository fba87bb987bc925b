// Package bustest starts a real embedded agentwork bus for tests: a fresh
// nats-server with JetStream in a temporary directory, no TCP listener,
// closed when the test ends.
package bustest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentwork/agentwork/bus"
)

// New starts an embedded bus for t. Options may adjust the config.
func New(t testing.TB, mods ...func(*bus.Config)) *bus.Bus {
	t.Helper()
	cfg := bus.Config{DataDir: t.TempDir(), Listen: "off", ReadyTimeout: 20 * time.Second}
	for _, m := range mods {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("bus.Open: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// Client returns a second connection to b's server, as another instance.
func Client(t testing.TB, b *bus.Bus) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := b.Client(ctx)
	if err != nil {
		t.Fatalf("bus.Client: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// EmitEvents publishes n events of source and outcome (producer "test",
// subject name, data) without waiting for each ack, as a busy runner
// does, and waits up to a minute for all the acks.
func EmitEvents(t testing.TB, b *bus.Bus, source, outcome, name string, data any, n int) {
	t.Helper()
	js := b.JetStream()
	for range n {
		ev, err := bus.NewEvent("test", bus.TypeOf(source, outcome), name, time.Now(), data)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		Throttle(t, js)
		if _, err := js.PublishAsync(b.Subjects.Event(source, outcome), raw); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("no acks within a minute")
	}
}

// Throttle waits, before an asynchronous publish, for the acks in flight
// once a thousand are: past the client's limit (4,000) a publish fails
// ("stalled with too many outstanding async published messages") when
// the acks come slowly, as on a loaded machine.
func Throttle(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	if js.PublishAsyncPending() < 1000 {
		return
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("no acks within a minute")
	}
}
