// Package bustest starts a real embedded agentwork bus for tests: a fresh
// nats-server with JetStream in a temporary directory, no TCP listener,
// closed when the test ends.
package bustest

import (
	"context"
	"testing"
	"time"

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
