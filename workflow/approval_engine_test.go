package workflow_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/workflow"
)

const gated = `
gated:
  inputs: {n: {type: string, required: true}}
  targets: [ops]
  steps:
    - {id: before, tool: line, args: {line: "${{ inputs.n }} before"}}
    - id: ask
      approval: {message: "Go on with ${{ inputs.n }}?", timeout: 1h}
    - id: after
      if: steps.ask.approved
      tool: line
      args: {line: "${{ inputs.n }} after by ${{ steps.ask.decided_by }}"}
`

// waitApproval waits for the approval event of run of type
// agentwork.approval.<outcome> and returns the approval it carries.
func waitApproval(t *testing.T, aw *events, run, outcome string) approval.Approval {
	t.Helper()
	var a approval.Approval
	aw.wait(t, "approval "+outcome+" of run "+run, func() bool {
		aw.mu.Lock()
		defer aw.mu.Unlock()
		for _, ev := range aw.evs {
			if ev.RunID == run && ev.Type == bus.TypeOf(approval.Source, outcome) {
				return ev.DecodeData(&a) == nil
			}
		}
		return false
	})
	return a
}

func approvalEngine(t *testing.T, b *bus.Bus, fx *sideEffects) (*engine, *approval.Service, *events) {
	t.Helper()
	aw := watchEventsOf(t, b, approval.Source)
	ap := approval.New(bustest.Client(t, b), approval.Config{})
	runInBackground(t, "approval.Service", ap.Run)
	cfg := testConfig(defs(t, gated), fx.tools())
	cfg.Approvals = ap
	return startEngine(t, b, cfg, nil), ap, aw
}

// A run waits at its approval step, through an engine restart, on a
// durable approval; the decision resumes it once: the step before does not
// run again, the guarded step runs once, with who decided.
func TestEngineApprovalApprovedAcrossRestart(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fx := newSideEffects(t)
	w := watchEvents(t, b)
	e, ap, aw := approvalEngine(t, b, fx)
	run, _, err := e.Start(t.Context(), "gated", map[string]any{"n": "r1"}, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := waitApproval(t, aw, run.ID, "requested")
	if a.Question != "Go on with r1?" || a.Run != run.ID || a.Step != "ask" || a.Kind != approval.KindWorkflowStep || len(a.Targets) != 1 || a.Targets[0] != "ops" {
		t.Fatalf("approval = %+v", a)
	}
	if r, _ := e.Get(t.Context(), run.ID); r.Status != workflow.RunWaiting || r.Steps["ask"].Approval != a.ID {
		t.Fatalf("run %s while the approval is pending, want waiting", r.Status)
	}
	// Another engine takes over: the first is gone.
	e.stop()
	cfg := testConfig(defs(t, gated), fx.tools())
	cfg.Approvals = ap
	e2 := startEngine(t, b, cfg, nil)
	if _, err := ap.Decide(t.Context(), a.ID, approval.Approve, "telegram:42", "fine"); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, w, e2, run.ID)
	if got.Status != workflow.RunDone {
		t.Fatalf("run ended %s (%v), want done", got.Status, got.Error)
	}
	lines := fx.lines(t)
	if lines["r1 before"] != 1 || lines["r1 after by telegram:42"] != 1 || len(lines) != 2 {
		t.Fatalf("lines = %v; want before and after once each", lines)
	}
	out := got.Steps["ask"].Output.(map[string]any)
	if out["approved"] != true || out["comment"] != "fine" || out["decided_by"] != "telegram:42" {
		t.Fatalf("ask output = %v", out)
	}
	// One approval for the run, asked once.
	list, err := ap.List(t.Context(), approval.Filter{})
	if err != nil || len(list) != 1 {
		t.Fatalf("approvals = %d, %v; want 1", len(list), err)
	}
}

// A rejection skips the guarded step; a cancelled run cancels its
// pending approval, which then decides nothing.
func TestEngineApprovalRejectAndCancel(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fx := newSideEffects(t)
	w := watchEvents(t, b)
	e, ap, aw := approvalEngine(t, b, fx)
	ctx := t.Context()

	rejected, _, err := e.Start(ctx, "gated", map[string]any{"n": "no"}, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := waitApproval(t, aw, rejected.ID, "requested")
	if _, err := ap.Decide(ctx, a.ID, approval.Reject, approval.ByAdmin, "not now"); err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, w, e, rejected.ID)
	if got.Status != workflow.RunDone || got.Steps["after"].Status != workflow.StepSkipped {
		t.Fatalf("run %s, after %s; want done with after skipped", got.Status, got.Steps["after"].Status)
	}

	cancelled, _, err := e.Start(ctx, "gated", map[string]any{"n": "cx"}, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a = waitApproval(t, aw, cancelled.ID, "requested")
	if _, err := e.Cancel(ctx, cancelled.ID, "by ops"); err != nil {
		t.Fatal(err)
	}
	if got := waitEnd(t, w, e, cancelled.ID); got.Status != workflow.RunCancelled {
		t.Fatalf("run %s, want cancelled", got.Status)
	}
	if c := waitApproval(t, aw, cancelled.ID, "cancelled"); c.State != approval.Cancelled || c.ID != a.ID {
		t.Fatalf("cancelled event for %s in state %s", c.ID, c.State)
	}
	if _, err := ap.Decide(ctx, a.ID, approval.Approve, approval.ByAdmin, ""); !errors.Is(err, approval.ErrCancelled) {
		t.Fatalf("Decide of the cancelled approval = %v, want ErrCancelled", err)
	}
	if lines := fx.lines(t); lines["no before"] != 1 || lines["cx before"] != 1 || len(lines) != 2 {
		t.Fatalf("lines = %v; want only the steps before the gates", lines)
	}
}

// Without an approvals service, an approval step fails saying so (the
// run does not wait for ever).
func TestEngineApprovalWithoutService(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	fx := newSideEffects(t)
	w := watchEvents(t, b)
	e := startEngine(t, b, testConfig(defs(t, gated), fx.tools()), nil)
	run, _, err := e.Start(context.Background(), "gated", map[string]any{"n": "x"}, workflow.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := waitEnd(t, w, e, run.ID)
	if got.Status != workflow.RunFailed || got.FailedStep != "ask" || got.Error == nil {
		t.Fatalf("run %s at %q (%v), want failed at ask", got.Status, got.FailedStep, got.Error)
	}
}
