package bus_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// TestOpenWhileTheClusterElects: serve started together with its NATS
// cluster (as an orchestrator does) finds no JetStream leader for a moment.
// Open asks again with a short timeout per attempt, instead of waiting on
// the first request for the whole ready timeout, and gets going as soon as
// the cluster answers.
func TestOpenWhileTheClusterElects(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster twice")
	}
	t.Parallel()
	c := bustest.NewCluster(t, 3)
	c.Open() // provisioned once, as a cluster that ran before
	for i := range 3 {
		c.Stop(i)
	}
	for i := range 3 {
		c.Start(i) // accepting clients; JetStream still electing
	}
	cfg := c.Config()
	cfg.ReadyTimeout = 25 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := bus.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open right after the cluster started = %v, want it to wait for the leader and go on", err)
	}
	b.Close()
}
