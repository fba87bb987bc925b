package workflow

import (
	"testing"

	"go.uber.org/zap"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// A start or release whose workflow lease another one took over meanwhile
// (this one stalled past its lease between the count and the write) does
// not write: its count may be stale. One that still holds it renews it.
func TestConcurrencyWriteIsFenced(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	other := bustest.Client(t, b)
	e := &Engine{bus: b, log: zap.NewNop()}
	ctx := t.Context()

	h, err := e.hold(ctx, "busy", "run-1")
	if err != nil {
		t.Fatal(err)
	}
	before := h.rev
	if err := h.check(ctx); err != nil {
		t.Fatalf("check of a lease still held = %v, want nil", err)
	}
	if h.rev == before {
		t.Fatal("check did not renew the lease")
	}
	h.release()

	h, err = e.hold(ctx, "busy", "run-2")
	if err != nil {
		t.Fatal(err)
	}
	defer h.release()
	// Another start takes the lease, as it may once this one's lapsed.
	theirs := slotRecord{Workflow: "busy", Run: "run-3"}
	if _, err := bus.Acquire(ctx, other, other.Locks, concurrencyKey("busy"), concurrencyLease, &theirs, func(*slotRecord) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := h.check(ctx); err == nil {
		t.Fatal("check after another start took the lease over = nil, want an error (the count may be stale)")
	}
}
