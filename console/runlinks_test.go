package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/bus"
)

// A run's page links to the workflow run (and names the step) an agent
// step's run belongs to, and to each approval of its gated tool calls,
// with who decided and their comment as text.
func TestRunPageLinksItsWorkflowRunAndApprovals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const evil = `<script>alert(1)</script>`
	ev := emit(t, f.b, agentwork.Result{Source: "step", Name: "release/draft", Outcome: bus.OutcomeDone, Text: "ok",
		Metadata: map[string]string{"workflow_run": "0123456789abcdef0123456789abcdef", "workflow_step": "draft"},
		Approvals: []agentwork.CallApproval{{ID: "fedcba9876543210fedcba9876543210", Tool: "exec", Call: 2, State: "approved", Verdict: "approve",
			By: "admin", Comment: "fine " + evil, At: time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)}}})
	b := f.browser(t).login(viewerToken)
	got := b.do("GET", "/runs/"+ev.ID, nil)
	if got.status != 200 {
		t.Fatalf("GET /runs/%s = %d:\n%s", ev.ID, got.status, got.body)
	}
	for _, want := range []string{
		`<a href="/workflow-runs/0123456789abcdef0123456789abcdef" id="workflow-run">`, "step <code>draft</code>",
		`<a href="/approvals/fedcba9876543210fedcba9876543210">exec</a> (call 2)`, "approved</span> by admin",
		"fine &lt;script&gt;alert(1)&lt;/script&gt;",
	} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the run's page lacks %q:\n%s", want, got.body)
		}
	}
	if strings.Contains(got.body, evil) {
		t.Error("an approval's comment is not escaped")
	}
}
