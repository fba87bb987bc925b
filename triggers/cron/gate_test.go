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
	pol := s.Policy()
	gate := pol.Input[0]
	run := func(id, job string, manual bool) *agentwork.Run {
		// As the runner makes it: the policy's overlap mode to start with.
		return &agentwork.Run{ID: id, Request: agentwork.Request{Source: "cron", Name: job, ScheduledAt: &tick, Manual: manual}, Overlap: pol.Overlap.Mode}
	}
	check := func(r *agentwork.Run, want string) {
		t.Helper()
		if got := checkResult(gate.Check(ctx, r)); got != want {
			t.Fatalf("Check(%s of %s) = %s, want %s", r.ID, r.Request.Name, got, want)
		}
	}

	// The run takes its job's overlap mode, which the runner's overlap
	// lease applies (skip by default).
	for job, want := range map[string]string{"skip": agentwork.OverlapSkip, "queue": agentwork.OverlapQueue, "allow": agentwork.OverlapAllow} {
		r := run("r-"+job, job, false)
		check(r, "go")
		if r.Overlap != want {
			t.Errorf("Check(run of %s) left overlap %q, want %q", job, r.Overlap, want)
		}
	}

	// The ticks a catch-up fired together queue behind each other (allow
	// still lets them overlap).
	for job, want := range map[string]string{"skip": agentwork.OverlapQueue, "queue": agentwork.OverlapQueue, "allow": agentwork.OverlapAllow} {
		r := run("c-"+job, job, false)
		r.Request.Metadata = map[string]string{metaCatchup: "true"}
		check(r, "go")
		if r.Overlap != want {
			t.Errorf("Check(caught-up run of %s) left overlap %q, want %q", job, r.Overlap, want)
		}
	}

	// paused, disabled, expired, deleted; manual runs bypass all but deleted.
	check(run("p1", "paused", false), "skip paused")
	check(run("p2", "paused", true), "go")
	check(run("d1", "disabled", false), "skip disabled")
	check(run("d2", "disabled", true), "go")
	check(run("e1", "expired", false), "skip expired")
	check(run("x1", "gone", false), "skip deleted")
	check(run("x2", "gone", true), "skip deleted")
}
