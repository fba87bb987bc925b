package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/approval"
)

func TestApprovals(t *testing.T) {
	t.Parallel()
	var svc *approval.Service
	f := newFixture(t, func(_ *api.Config, d *api.Deps) {
		svc = approval.New(d.Bus, approval.Config{PublicURL: "http://127.0.0.1:8080", LinkKey: []byte("k0123456789abcdef")})
		d.Approvals = svc
	})
	id := approval.ToolCallID("run9", 0)
	if _, _, err := svc.Ask(t.Context(), approval.Request{
		ID: id, Kind: approval.KindToolCall, Run: "run9", Source: "heartbeat", Name: "default",
		Question: "Run exec?", Tool: "exec", Args: `{"cmd":"make deploy"}`, Targets: []string{"console"}, Timeout: time.Hour,
	}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "wrong-token-0123456789"} {
		if r := f.do(t, "POST", "/v1/approvals/"+id+"/approve", tok, ""); r.status != http.StatusUnauthorized {
			t.Errorf("POST approve with token %q = %d, want 401", tok, r.status)
		}
		if r := f.do(t, "GET", "/v1/approvals", tok, ""); r.status != http.StatusUnauthorized {
			t.Errorf("GET approvals with token %q = %d, want 401", tok, r.status)
		}
	}
	if a, _ := svc.Get(t.Context(), id); a.State != approval.Pending {
		t.Fatalf("after refused calls: %s, want pending", a.State)
	}

	r := f.do(t, "GET", "/v1/approvals?state=pending", adminToken, "")
	var list struct{ Approvals []approval.Approval }
	if r.status != 200 || json.Unmarshal(r.body, &list) != nil || len(list.Approvals) != 1 || list.Approvals[0].Args != `{"cmd":"make deploy"}` {
		t.Fatalf("GET /v1/approvals?state=pending = %d %s", r.status, r.body)
	}
	if r := f.do(t, "GET", "/v1/approvals?state=maybe", adminToken, ""); r.status != 400 {
		t.Errorf("state=maybe = %d, want 400", r.status)
	}
	if r := f.do(t, "GET", "/v1/approvals/0123456789abcdef0123456789abcdef", adminToken, ""); r.status != 404 {
		t.Errorf("GET of an unknown id = %d, want 404", r.status)
	}
	if r := f.do(t, "POST", "/v1/approvals/"+id+"/approve", adminToken, `{"comment":"ok","extra":1}`); r.status != 400 {
		t.Errorf("POST with an unknown field = %d, want 400", r.status)
	}

	r = f.do(t, "POST", "/v1/approvals/"+id+"/approve", adminToken, `{"comment":"looks fine"}`)
	var a approval.Approval
	if r.status != 200 || json.Unmarshal(r.body, &a) != nil || a.State != approval.Approved || a.Decision.By != approval.ByAdmin || a.Decision.Comment != "looks fine" {
		t.Fatalf("POST approve = %d %s", r.status, r.body)
	}
	if r := f.do(t, "POST", "/v1/approvals/"+id+"/approve", adminToken, ""); r.status != 200 {
		t.Errorf("POST approve again = %d, want 200 (the recorded decision)", r.status)
	}
	r = f.do(t, "POST", "/v1/approvals/"+id+"/reject", adminToken, "")
	if d := r.problem(t); r.status != http.StatusConflict || !strings.Contains(d.Detail, "already approved by admin") {
		t.Errorf("POST reject after approve = %d %s, want 409 naming the decider", r.status, r.body)
	}
	r = f.do(t, "GET", "/v1/approvals/"+id, adminToken, "")
	if r.status != 200 || !strings.Contains(string(r.body), `"state":"approved"`) {
		t.Errorf("GET one = %d %s", r.status, r.body)
	}
	// The links' page is mounted, open: a forged link is refused.
	if r := f.do(t, "GET", "/approvals/"+id+"/approve?exp=1&sig=00", "", ""); r.status != http.StatusForbidden || !strings.Contains(string(r.body), "not valid or has expired") {
		t.Errorf("forged link = %d %s", r.status, r.body)
	}
}

// GET /v1/approvals/counts counts the approvals by state, without
// listing them; admin only; no route without approvals.
func TestApprovalCounts(t *testing.T) {
	t.Parallel()
	var svc *approval.Service
	f := newFixture(t, func(_ *api.Config, d *api.Deps) {
		svc = approval.New(d.Bus, approval.Config{PublicURL: "http://127.0.0.1:8080", LinkKey: []byte("k0123456789abcdef")})
		d.Approvals = svc
	})
	for i := range 3 {
		run := "run" + string(rune('a'+i))
		if _, _, err := svc.Ask(t.Context(), approval.Request{
			ID: approval.ToolCallID(run, 0), Kind: approval.KindToolCall, Run: run, Source: "heartbeat", Name: "default",
			Question: "Run exec?", Tool: "exec", Args: `{}`, Targets: []string{"console"}, Timeout: time.Hour,
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Decide(t.Context(), approval.ToolCallID("runa", 0), approval.Reject, approval.ByAdmin, ""); err != nil {
		t.Fatal(err)
	}
	r := f.do(t, "GET", "/v1/approvals/counts", adminToken, "")
	var got struct {
		Counts map[string]int `json:"counts"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &got) != nil {
		t.Fatalf("GET /v1/approvals/counts = %d %s, want 200", r.status, r.body)
	}
	want := map[string]int{"pending": 2, "approved": 0, "rejected": 1, "expired": 0, "cancelled": 0}
	if len(got.Counts) != len(want) {
		t.Errorf("counts = %v, want %v", got.Counts, want)
	}
	for k, v := range want {
		if n, ok := got.Counts[k]; !ok || n != v {
			t.Errorf("counts[%s] = %d (%v), want %d", k, n, ok, v)
		}
	}
	if r := f.do(t, "GET", "/v1/approvals/counts?state=pending", adminToken, ""); r.status != 400 {
		t.Errorf("GET /v1/approvals/counts?state=pending = %d, want 400 (it counts every state)", r.status)
	}
	for _, tok := range []string{"", "wrong-token-0123456789", taskToken} {
		if r := f.do(t, "GET", "/v1/approvals/counts", tok, ""); r.status != http.StatusUnauthorized {
			t.Errorf("GET /v1/approvals/counts with token %q = %d, want 401", tok, r.status)
		}
	}
	// Without approvals the route is not there, as /v1/approvals is not.
	off := newFixture(t, nil)
	if r := off.do(t, "GET", "/v1/approvals/counts", adminToken, ""); r.status != http.StatusNotFound {
		t.Errorf("GET /v1/approvals/counts without approvals = %d, want 404", r.status)
	}
}
