package cron

import (
	"errors"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/internal/clock"
)

func checkResult(err error) string {
	if err == nil {
		return "go"
	}
	if s, ok := agentwork.AsSkip(err); ok {
		return "skip " + s.Reason
	}
	var d *agentwork.DeferError
	if errors.As(err, &d) {
		return "defer"
	}
	return "error " + err.Error()
}

func TestJobGate(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	clk := clock.NewFake(t0)
	s, err := New(b, Config{Timeout: time.Minute}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tick := t0.Add(30 * time.Second)
	expires := tick.Add(-time.Second)
	off := false
	for _, j := range []Job{
		{ID: "skip", Schedule: "* * * * *", Prompt: "p"},
		{ID: "queue", Schedule: "* * * * *", Prompt: "p", Overlap: OverlapQueue},
		{ID: "allow", Schedule: "* * * * *", Prompt: "p", Overlap: OverlapAllow},
		{ID: "paused", Schedule: "* * * * *", Prompt: "p"},
		{ID: "disabled", Schedule: "* * * * *", Prompt: "p", Enabled: &off},
		{ID: "expired", Schedule: "* * * * *", Prompt: "p", ExpiresAt: &expires},
	} {
		if _, err := s.Add(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Pause(ctx, "paused", "maintenance"); err != nil {
		t.Fatal(err)
	}
	gate := s.Policy().Input[0]
	rel := gate.(agentwork.Releaser)
	run := func(id, job string, manual bool) *agentwork.Run {
		return &agentwork.Run{ID: id, Request: agentwork.Request{Source: "cron", Name: job, ScheduledAt: &tick, Manual: manual}}
	}
	check := func(r *agentwork.Run, want string) {
		t.Helper()
		if got := checkResult(gate.Check(ctx, r)); got != want {
			t.Fatalf("Check(%s of %s) = %s, want %s", r.ID, r.Request.Name, got, want)
		}
	}

	// overlap skip: the second run is busy until the first releases.
	r1, r2 := run("r1", "skip", false), run("r2", "skip", false)
	check(r1, "go")
	check(r2, "skip busy")
	check(r1, "go") // a retry of the same run keeps its lease
	rel.Release(ctx, r1)
	check(r2, "go")
	// A crashed holder's lease expires (timeout + 1m) and is taken over;
	// the old holder's late release does not free the new holder's lease.
	r3 := run("r3", "skip", false)
	check(r3, "skip busy")
	clk.Advance(2*time.Minute + time.Second)
	check(r3, "go")
	rel.Release(ctx, r2)
	check(run("r4", "skip", false), "skip busy")
	rel.Release(ctx, r3)
	check(run("r4", "skip", false), "go")

	// overlap queue defers; allow never blocks.
	check(run("q1", "queue", false), "go")
	check(run("q2", "queue", false), "defer")
	check(run("a1", "allow", false), "go")
	check(run("a2", "allow", false), "go")

	// paused, disabled, expired, deleted; manual runs bypass all but deleted.
	check(run("p1", "paused", false), "skip paused")
	check(run("p2", "paused", true), "go")
	check(run("d1", "disabled", false), "skip disabled")
	check(run("d2", "disabled", true), "go")
	check(run("e1", "expired", false), "skip expired")
	check(run("x1", "gone", false), "skip deleted")
	check(run("x2", "gone", true), "skip deleted")
}
