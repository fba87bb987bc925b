package cron

import (
	"testing"

	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
)

// A create whose quota lease another create took over meanwhile (this
// one stalled past its lease between the count and the write) does not
// write: its count may be stale. One that still holds it renews it.
func TestAgentJobsQuotaWriteIsFenced(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	other := bustest.Client(t, b)
	s, _ := startScheduler(t, b, Config{}, make(chan TickResult, 100))
	ctx := t.Context()

	h, err := s.holdQuota(ctx, alice, "agent-1")
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

	h, err = s.holdQuota(ctx, alice, "agent-2")
	if err != nil {
		t.Fatal(err)
	}
	defer h.release()
	// Another create takes the lease, as it may once this one's lapsed.
	theirs := quotaRecord{Job: "agent-3", Owner: bob.String()}
	if _, err := bus.Acquire(ctx, other, other.Locks, QuotaLeaseKey, quotaLease, &theirs, func(*quotaRecord) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := h.check(ctx); err == nil {
		t.Fatal("check after another create took the quota lease over = nil, want an error (the count may be stale)")
	}
}
