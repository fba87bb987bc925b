package connectors_test

import (
	"testing"

	"github.com/agentwork/agentwork/bus"
)

// client is bustest.Client, retried: under -race on two cores, dozens of
// parallel cases connecting at once can exceed nats.go's 2s connect timeout.
func client(t *testing.T, b *bus.Bus) *bus.Bus {
	t.Helper()
	var err error
	for range 3 {
		var c *bus.Bus
		if c, err = b.Client(t.Context()); err == nil {
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
	}
	t.Fatalf("bus.Client: %v", err)
	return nil
}
