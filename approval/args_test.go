package approval_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus/bustest"
)

// toolCall is the request of a gated tool call with arguments args.
func toolCall(id, args string) approval.Request {
	return approval.Request{
		ID: id, Kind: approval.KindToolCall, Run: "run1", Source: "heartbeat", Name: "default",
		Question: "Allow this call?", Tool: "exec", Args: args,
		Targets: []string{"phone"}, Timeout: time.Hour,
	}
}

// The approver sees the whole arguments: the record (so the API and
// approvals show) and the link's page keep them whole, secrets cut out;
// the chat question shows the start and says it is cut and where to see
// all of it. The damaging part past any preview is never hidden.
func TestToolCallArgsShownWhole(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	const secretValue = "sk-live-0123456789abcdef"
	s := approval.New(b, approval.Config{PublicURL: "https://aw.example.com", LinkKey: linkKey, Connectors: []string{"phone"}, Secrets: []string{secretValue}})
	args := `{"cmd":"echo ` + strings.Repeat("harmless ", 1000) + ` token=` + secretValue + `; rm -rf /srv/data"}`
	id := approval.ToolCallID("run1", 0)
	a, _, err := s.Ask(t.Context(), toolCall(id, args))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.Args, "rm -rf /srv/data") || strings.Contains(a.Args, secretValue) || strings.Contains(a.Args, "cut") {
		t.Fatalf("record's args (%d bytes) lack the end, or keep the secret, or are cut: ...%s", len(a.Args), a.Args[max(0, len(a.Args)-120):])
	}
	if got, _ := s.Get(t.Context(), id); got.Args != a.Args {
		t.Errorf("stored args differ from the returned ones")
	}
	q := queued(t, b, id)
	if len(q) != 1 {
		t.Fatalf("%d questions queued, want 1", len(q))
	}
	if text := q[0].Text; len(text) > 6000 || !strings.Contains(text, "cut") || !strings.Contains(text, "agentwork approvals show "+id) || strings.Contains(text, secretValue) {
		t.Errorf("chat question (%d bytes) = %q, want a preview that says it is cut and where to see it all", len(text), text[:min(len(text), 400)])
	}

	mux := http.NewServeMux()
	s.PublicRoutes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(s.Link(a, approval.Approve))
	resp, err := http.Get(srv.URL + u.RequestURI())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "rm -rf /srv/data") || strings.Contains(string(body), secretValue) {
		t.Errorf("the link's page lacks the end of the arguments, or shows the secret")
	}
}

// Arguments too long to show a person whole are not asked about: Ask
// refuses them (ErrInvalid, saying why), so the call is refused.
func TestToolCallArgsTooLong(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.ToolCallID("run1", 0)
	_, _, err := s.Ask(t.Context(), toolCall(id, `"`+strings.Repeat("x", 70_000)+`"`))
	if !errors.Is(err, approval.ErrInvalid) || !strings.Contains(err.Error(), "arguments") {
		t.Fatalf("Ask with 70 KB of arguments = %v, want ErrInvalid about the arguments", err)
	}
	if _, err := s.Get(t.Context(), id); !errors.Is(err, approval.ErrNoApproval) {
		t.Errorf("after the refusal: %v, want no approval recorded", err)
	}
}

// An approval is bound to its call: asking with the same id for another
// tool or other arguments is an error, never the earlier decision.
func TestToolCallBoundToItsCall(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	id := approval.ToolCallID("run1", 0)
	if _, _, err := s.Ask(t.Context(), toolCall(id, `{"cmd":"ls"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Decide(t.Context(), id, approval.Approve, approval.ByAdmin, ""); err != nil {
		t.Fatal(err)
	}
	if a, created, err := s.Ask(t.Context(), toolCall(id, `{"cmd":"ls"}`)); err != nil || created || a.State != approval.Approved {
		t.Fatalf("the same call again = %s, created %v, %v; want the approved approval", a.State, created, err)
	}
	other := toolCall(id, `{"cmd":"rm -rf /"}`)
	if a, _, err := s.Ask(t.Context(), other); !errors.Is(err, approval.ErrMismatch) {
		t.Errorf("another call with the same id = %s, %v; want ErrMismatch", a.State, err)
	}
	other = toolCall(id, `{"cmd":"ls"}`)
	other.Tool = "delete_everything"
	if a, _, err := s.Ask(t.Context(), other); !errors.Is(err, approval.ErrMismatch) {
		t.Errorf("another tool with the same id = %s, %v; want ErrMismatch", a.State, err)
	}
}
