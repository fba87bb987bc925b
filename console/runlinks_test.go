package console_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/agentwork"
	"github.com/agentwork/agentwork/agentwork/usage"
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

// The overview shows today's tokens by model and the budgets near their
// limit or paused by it, each linking to the list behind it.
func TestOverviewTokensAgainstBudgets(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := time.Now().UTC()
	for _, r := range []usage.Record{
		{Day: now.Format(time.DateOnly), Source: "cron", Name: "nightly", Model: "gpt-<b>", Runs: 1, InputTokens: 1200, OutputTokens: 34},
		{Day: now.AddDate(0, 0, -1).Format(time.DateOnly), Source: "cron", Name: "nightly", Model: "old", Runs: 1, InputTokens: 9000},
	} {
		raw, _ := json.Marshal(r)
		if _, err := f.b.Usage.Put(t.Context(), usage.Key(r.Day, r.Source, r.Name, r.Model), raw); err != nil {
			t.Fatal(err)
		}
	}
	b := f.browser(t).login(viewerToken)
	got := b.do("GET", "/", nil)
	if got.status != 200 {
		t.Fatalf("GET / = %d:\n%s", got.status, got.body)
	}
	for _, want := range []string{
		`<a href="/usage" id="tokens-today"><span class="num">1.2k</span> tokens today (UTC): gpt-&lt;b&gt; 1.2k</a>`,
		`2 daily budgets: <a href="/usage#budgets">budgets</a>`,
		`<a href="/jobs#job-nightly">nightly</a>: 900 of 1k (90%) — <span class="paused">paused by its budget</span>`,
	} {
		if !strings.Contains(got.body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, got.body)
		}
	}
	if strings.Contains(got.body, `href="/heartbeat">heartbeat</a>: 1.2k`) {
		t.Error("the heartbeat's budget (24% used) is listed as near its limit")
	}
}
