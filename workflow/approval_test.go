package workflow_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/agentwork/agentwork/workflow"
)

const approvalFlow = `targets: [ops]
steps:
  - id: analyse
    tool: x
  - id: ask
    approval:
      message: "Revert ${{ steps.analyse.output.commit }}?"
      approvers: ["telegram:123456789", link]
      timeout: 4h
      on_timeout: %s
      reminder: 1h
  - id: revert
    if: steps.ask.approved
    tool: revert
    args: {by: "${{ steps.ask.decided_by }}", why: "${{ steps.ask.comment }}"}
`

func approvalSim(t *testing.T, onTimeout string) (*sim, workflow.AskApproval) {
	t.Helper()
	w := def(t, fmt.Sprintf(approvalFlow, onTimeout))
	s := newSim(t, w, nil)
	s.do(workflow.Started{})
	eff := s.do(workflow.StepFinished{Step: "analyse", Attempt: 1, Output: map[string]any{"commit": "abc123"}})
	ask := one[workflow.AskApproval](t, eff)
	if len(only[workflow.CallTool](eff)) != 0 {
		t.Fatalf("a tool was called before the approval: %s", show(eff))
	}
	return s, ask
}

// An approval step asks (the question rendered, the workflow's targets by
// default) and waits without a worker; an approval lets the guarded step
// run with who decided and why.
func TestDecideApprovalApproved(t *testing.T) {
	t.Parallel()
	s, ask := approvalSim(t, "reject")
	want := workflow.AskApproval{
		IdempotencyKey: "wf.r1.ask.all.a1.g0", Work: workflow.Work{Run: "r1", Step: "ask", Item: -1, Attempt: 1},
		ID: workflow.ApprovalID("r1", "ask", 0, 1), Message: "Revert abc123?", Targets: []string{"ops"},
		Approvers: []string{"telegram:123456789", "link"}, Timeout: 4 * time.Hour, OnTimeout: "reject", Reminder: time.Hour,
	}
	if !reflect.DeepEqual(ask, want) {
		t.Fatalf("AskApproval =\n%+v\nwant\n%+v", ask, want)
	}
	st := s.run.Steps["ask"]
	if st.Status != workflow.StepWaiting || s.run.Status != workflow.RunWaiting || st.Approval != ask.ID {
		t.Fatalf("step %s (approval %q), run %s; want both waiting, the approval on the step", st.Status, st.Approval, s.run.Status)
	}
	// A decision of another attempt or an older generation changes nothing.
	for _, stale := range []workflow.ApprovalDecided{
		{Step: "ask", Item: -1, Attempt: 2, ID: ask.ID, State: "approved", Verdict: "approve", By: "telegram:1"},
		{Step: "ask", Item: -1, Attempt: 1, Gen: 1, ID: ask.ID, State: "approved", Verdict: "approve", By: "telegram:1"},
	} {
		if eff := s.do(stale); len(eff) != 0 {
			t.Fatalf("stale decision %+v gave %s", stale, show(eff))
		}
	}
	at := t0.Add(10 * time.Minute)
	eff := s.do(workflow.ApprovalDecided{Step: "ask", Item: -1, Attempt: 1, ID: ask.ID, State: "approved", Verdict: "approve", By: "telegram:123456789", Comment: "go", At: at})
	call := one[workflow.CallTool](t, eff)
	if call.Name != "revert" || !reflect.DeepEqual(call.Args, map[string]any{"by": "telegram:123456789", "why": "go"}) {
		t.Fatalf("after approval: %+v", call)
	}
	out := s.run.Steps["ask"].Output.(map[string]any)
	if out["approved"] != true || out["verdict"] != "approve" || out["decided_by"] != "telegram:123456789" || out["comment"] != "go" || out["decided_at"] != at.Format(time.RFC3339Nano) {
		t.Fatalf("ask output = %v", out)
	}
	if s.run.Steps["ask"].Status != workflow.StepDone {
		t.Fatalf("ask = %s, want done", s.run.Steps["ask"].Status)
	}
}

// A rejection is an answer, not a failure: the step is done with approved
// false, the guarded step is skipped, and the run ends done.
func TestDecideApprovalRejectedSkips(t *testing.T) {
	t.Parallel()
	s, ask := approvalSim(t, "reject")
	eff := s.do(workflow.ApprovalDecided{Step: "ask", Item: -1, Attempt: 1, ID: ask.ID, State: "rejected", Verdict: "reject", By: "admin", At: t0})
	if len(only[workflow.CallTool](eff)) != 0 {
		t.Fatalf("the guarded step ran after a rejection: %s", show(eff))
	}
	if st := s.run.Steps["revert"]; st.Status != workflow.StepSkipped || st.Condition != false {
		t.Fatalf("revert = %s (condition %v), want skipped on false", st.Status, st.Condition)
	}
	if s.run.Status != workflow.RunDone || s.run.Steps["ask"].Output.(map[string]any)["approved"] != false {
		t.Fatalf("run %s, ask output %v", s.run.Status, s.run.Steps["ask"].Output)
	}
}

// Expiry follows on_timeout: approve and reject are answers (by
// "timeout"), fail fails the step and the run.
func TestDecideApprovalExpired(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		onTimeout  string
		step       workflow.StepStatus
		run        workflow.RunStatus
		revertRuns bool
	}{
		{"reject", workflow.StepDone, workflow.RunDone, false},
		{"approve", workflow.StepDone, workflow.RunRunning, true},
		{"fail", workflow.StepTimedOut, workflow.RunFailed, false},
	} {
		t.Run(tc.onTimeout, func(t *testing.T) {
			t.Parallel()
			s, ask := approvalSim(t, tc.onTimeout)
			eff := s.do(workflow.ApprovalDecided{Step: "ask", Item: -1, Attempt: 1, ID: ask.ID, State: "expired", Verdict: tc.onTimeout, By: "timeout", At: t0.Add(4 * time.Hour)})
			if st := s.run.Steps["ask"].Status; st != tc.step || s.run.Status != tc.run {
				t.Fatalf("ask %s, run %s; want %s, %s", st, s.run.Status, tc.step, tc.run)
			}
			if ran := len(only[workflow.CallTool](eff)) > 0; ran != tc.revertRuns {
				t.Fatalf("revert ran: %v, want %v (%s)", ran, tc.revertRuns, show(eff))
			}
			if tc.onTimeout == "fail" && (s.run.FailedStep != "ask" || s.run.Error.Kind != workflow.ErrTimeout) {
				t.Fatalf("failed step %q error %+v", s.run.FailedStep, s.run.Error)
			}
		})
	}
}

// Cancelling the run (or its timeout) cancels the pending approval; an
// approval that could not be asked fails the step.
func TestDecideApprovalCancelAndAskError(t *testing.T) {
	t.Parallel()
	s, ask := approvalSim(t, "reject")
	eff := s.do(workflow.Cancel{Reason: "by ops"})
	c := one[workflow.CancelApproval](t, eff)
	if c.ID != ask.ID || c.Reason != "workflow run r1 ended: cancelled: by ops" || s.run.Status != workflow.RunCancelled {
		t.Fatalf("CancelApproval = %+v, run %s", c, s.run.Status)
	}
	if eff := s.do(workflow.ApprovalDecided{Step: "ask", Item: -1, Attempt: 1, ID: ask.ID, State: "approved", Verdict: "approve", By: "admin"}); len(eff) != 0 {
		t.Fatalf("a decision after the cancel gave %s", show(eff))
	}

	s, ask = approvalSim(t, "reject")
	s.do(workflow.ApprovalDecided{Step: "ask", Item: -1, Attempt: 1, ID: ask.ID, Err: &workflow.StepError{Kind: workflow.ErrPermanent, Message: "no connector named \"ops\""}})
	if st := s.run.Steps["ask"]; st.Status != workflow.StepFailed || s.run.Status != workflow.RunFailed || st.Error.Message != `no connector named "ops"` {
		t.Fatalf("ask %s (%v), run %s; want failed with the reason", st.Status, st.Error, s.run.Status)
	}
}

// A retried run asks afresh: its approval has another id.
func TestDecideApprovalRetryAsksAgain(t *testing.T) {
	t.Parallel()
	s, ask := approvalSim(t, "fail")
	s.do(workflow.ApprovalDecided{Step: "ask", Item: -1, Attempt: 1, ID: ask.ID, State: "expired", Verdict: "fail", By: "timeout"})
	eff := s.do(workflow.RetryFrom{From: "ask"})
	again := one[workflow.AskApproval](t, eff)
	if again.ID == ask.ID || again.ID != workflow.ApprovalID("r1", "ask", 1, 1) || again.Gen != 1 {
		t.Fatalf("retry asked %+v; want a new approval of generation 1 (the first was %s)", again, ask.ID)
	}
}
