package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/approval"
)

// ask asks for a tool call's approval and returns its id.
func (f *fixture) ask(t *testing.T, run, question, args string, approvers ...string) string {
	t.Helper()
	id := approval.ToolCallID(run, 0)
	if _, _, err := f.approvals.Ask(t.Context(), approval.Request{
		ID: id, Kind: approval.KindToolCall, Run: run, Source: "heartbeat", Name: "default",
		Question: question, Tool: "exec", Args: args, Targets: []string{"console"}, Approvers: approvers, Timeout: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	return id
}

// The inbox shows what waits, with the question, the tool and its
// arguments whole (escaped) and the deadline; a decision goes through the
// API as the session's user, with the comment, and shows in the decided
// list; a read-only session and an approver the approval does not name
// are refused, and the approval stays pending.
func TestApprovalsPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	viewer := f.browser(t).login(viewerToken)
	if p := viewer.do("GET", "/approvals", nil); p.status != 200 || !strings.Contains(p.body, "Nothing waits for a decision") {
		t.Errorf("the empty inbox = %d, want a page that says nothing waits:\n%s", p.status, p.body)
	}

	const evilArgs = `{"argv":["sh","-c","echo <script>alert(1)</script>"],"note":"` + "long-argument-kept-whole-0123456789-0123456789-0123456789-0123456789-0123456789-end" + `"}`
	id := f.ask(t, "run1", "Run <b>exec</b>?", evilArgs)
	if p := viewer.do("GET", "/", nil); !strings.Contains(p.body, `<span class="num skip">1</span> waiting for a decision`) {
		t.Errorf("the overview does not count the approval waiting:\n%s", p.body)
	}
	p := viewer.do("GET", "/approvals", nil)
	for _, want := range []string{"Run &lt;b&gt;exec&lt;/b&gt;?", "&lt;script&gt;alert(1)&lt;/script&gt;", "0123456789-end", `href="/approvals/` + id + `"`, "Deadline:", "(in "} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the inbox lacks %q:\n%s", want, p.body)
		}
	}
	if strings.Contains(p.body, "<script>alert") || strings.Contains(p.body, "<b>exec") {
		t.Errorf("the inbox does not escape the question or the arguments:\n%s", p.body)
	}
	if strings.Contains(p.body, `value="approve"`) {
		t.Error("the inbox offers a read-only session to approve")
	}
	if got := viewer.do("POST", "/approvals/"+id, url.Values{"csrf": {viewer.csrf}, "verdict": {"approve"}}); got.status != http.StatusForbidden {
		t.Errorf("approve, read-only = %d, want 403", got.status)
	}

	op := f.browser(t).login(opToken)
	if p := op.do("GET", "/approvals/"+id, nil); p.status != 200 || !strings.Contains(p.body, `value="approve"`) || !strings.Contains(p.body, `name="comment"`) {
		t.Fatalf("the approval's page for an operator = %d, want the decide form:\n%s", p.status, p.body)
	}
	// Without the CSRF token: refused.
	if got := op.do("POST", "/approvals/"+id, url.Values{"verdict": {"approve"}}); got.status != http.StatusForbidden {
		t.Errorf("approve without the CSRF token = %d, want 403", got.status)
	}
	if a, _ := f.approvals.Get(t.Context(), id); a.State != approval.Pending {
		t.Fatalf("after refused decisions the approval is %s, want pending", a.State)
	}
	got := op.do("POST", "/approvals/"+id, url.Values{"csrf": {op.csrf}, "verdict": {"approve"}, "comment": {"ok <i>go</i>"}, "back": {"/approvals/" + id}})
	if got.status != http.StatusSeeOther || got.header.Get("Location") != "/approvals/"+id {
		t.Fatalf("approve = %d to %q, want 303 back to the approval", got.status, got.header.Get("Location"))
	}
	a, _ := f.approvals.Get(t.Context(), id)
	if a.State != approval.Approved || a.Decision == nil || a.Decision.By != "token:oper" || a.Decision.Comment != "ok <i>go</i>" {
		t.Fatalf("after Approve: %s %+v, want approved by token:oper with the comment", a.State, a.Decision)
	}
	p = op.do("GET", "/approvals/"+id, nil)
	for _, want := range []string{"Approved: " + id, "approved</span> by <strong>token:oper</strong>", "ok &lt;i&gt;go&lt;/i&gt;"} {
		if !strings.Contains(p.body, want) {
			t.Errorf("the decided approval's page lacks %q:\n%s", want, p.body)
		}
	}
	if strings.Contains(p.body, `value="approve"`) {
		t.Error("a decided approval still offers Approve")
	}
	if p := op.do("GET", "/approvals?decided=1", nil); !strings.Contains(p.body, id) || !strings.Contains(p.body, "token:oper") {
		t.Errorf("the decided list lacks the decision:\n%s", p.body)
	}
	if p := op.do("GET", "/approvals", nil); strings.Contains(p.body, id) {
		t.Error("a decided approval is still in the inbox")
	}

	// An approval that names its approvers: the operator may not decide
	// it (the API's rule, and the page says so); the admin may.
	id2 := f.ask(t, "run2", "Deploy?", `{"argv":["deploy"]}`, "telegram:42")
	op.do("POST", "/approvals/"+id2, url.Values{"csrf": {op.csrf}, "verdict": {"reject"}, "back": {"/approvals"}})
	if p := op.do("GET", "/approvals", nil); !strings.Contains(p.body, "Refused:") || !strings.Contains(p.body, "not allowed") {
		t.Errorf("a refused decision is not shown:\n%s", p.body)
	}
	if a, _ := f.approvals.Get(t.Context(), id2); a.State != approval.Pending {
		t.Fatalf("the operator decided an approval that names its approvers: %s", a.State)
	}
	admin := f.browser(t).login(adminToken)
	admin.do("POST", "/approvals/"+id2, url.Values{"csrf": {admin.csrf}, "verdict": {"reject"}, "comment": {"not today"}})
	if a, _ := f.approvals.Get(t.Context(), id2); a.State != approval.Rejected || a.Decision.By != "admin" {
		t.Errorf("the admin's Reject: %s %+v, want rejected by admin", a.State, a.Decision)
	}
}

// The inbox pages: 25 to a page, a link to the next.
func TestApprovalsPaging(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 30 {
		f.ask(t, "run-"+strings.Repeat("x", i+1), "Q?", `{}`)
	}
	b := f.browser(t).login(viewerToken)
	card := regexp.MustCompile(`<li class="card"`)
	p := b.do("GET", "/approvals", nil)
	if n := len(card.FindAllString(p.body, -1)); n != 25 || !strings.Contains(p.body, `href="/approvals?page=2" rel="next"`) {
		t.Fatalf("the first page has %d approvals and no link to the next", n)
	}
	p = b.do("GET", "/approvals?page=2", nil)
	if n := len(card.FindAllString(p.body, -1)); n != 5 || strings.Contains(p.body, `rel="next"`) || !strings.Contains(p.body, `rel="prev"`) {
		t.Errorf("the second page has %d approvals, want 5, a link back and none on", n)
	}
}
