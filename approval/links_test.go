package approval_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/approval"
	"github.com/agentwork/agentwork/bus/bustest"
)

func TestLinks(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	s := newService(t, b)
	mux := http.NewServeMux()
	s.PublicRoutes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	id := approval.WorkflowStepID("run1", "ask", 1)
	r := request(id)
	r.Question = `Deploy <script>alert(1)</script>?`
	a, _, err := s.Ask(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	local := func(link string) string {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return srv.URL + u.RequestURI()
	}
	approve, reject := local(s.Link(a, approval.Approve)), local(s.Link(a, approval.Reject))
	get := func(u string) (int, string, http.Header) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}
	post := func(u string, form url.Values) (int, string) {
		t.Helper()
		resp, err := http.PostForm(u, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	// GET shows the question, escaped, and changes nothing.
	for range 2 {
		code, body, h := get(approve)
		if code != http.StatusOK || !strings.Contains(body, "<form method=\"post\">") || !strings.Contains(body, ">Approve</button>") {
			t.Fatalf("GET = %d\n%s", code, body)
		}
		if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("the question is not escaped:\n%s", body)
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "script-src") {
			t.Errorf("CSP = %q", csp)
		}
	}
	if a, _ := s.Get(t.Context(), id); a.State != approval.Pending {
		t.Fatalf("after GETs: %s, want pending", a.State)
	}

	// A forged or expired signature, or another verb under a signature: 403.
	u, _ := url.Parse(approve)
	q := u.Query()
	forged := *u
	q2 := url.Values{"exp": q["exp"], "sig": {strings.Repeat("0", 64)}}
	forged.RawQuery = q2.Encode()
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)
	expired := *u
	expired.RawQuery = url.Values{"exp": {past}, "sig": {approval.Sign(s, id, "approve", past)}}.Encode()
	swapped := strings.Replace(approve, "/approve?", "/reject?", 1)
	for name, link := range map[string]string{"forged": forged.String(), "expired": expired.String(), "other verb": swapped} {
		if code, body, _ := get(link); code != http.StatusForbidden || !strings.Contains(body, "not valid or has expired") {
			t.Errorf("GET %s link = %d\n%s", name, code, body)
		}
		if code, _ := post(link, url.Values{"comment": {"x"}}); code != http.StatusForbidden {
			t.Errorf("POST %s link = %d, want 403", name, code)
		}
	}
	if a, _ := s.Get(t.Context(), id); a.State != approval.Pending {
		t.Fatalf("after refused links: %s, want pending", a.State)
	}

	// POST decides, by link; the name is shown as given.
	code, body := post(approve, url.Values{"comment": {"ship it"}, "name": {"<b>Ann</b>"}})
	if code != http.StatusOK || !strings.Contains(body, "Recorded: approved") || strings.Contains(body, "<b>Ann") {
		t.Fatalf("POST approve = %d\n%s", code, body)
	}
	a, _ = s.Get(t.Context(), id)
	if a.State != approval.Approved || a.Decision.By != approval.ByLink || a.Decision.Comment != "ship it" || a.Decision.Name != "<b>Ann</b>" {
		t.Fatalf("after POST: %+v %+v", a, a.Decision)
	}
	// The page of a decided approval shows who decided, and no form.
	if code, body, _ := get(reject); code != http.StatusOK || strings.Contains(body, "<form") || !strings.Contains(body, "approved by link") {
		t.Errorf("GET after the decision = %d\n%s", code, body)
	}
	if code, body := post(reject, nil); code != http.StatusConflict || !strings.Contains(body, "already approved by link") {
		t.Errorf("POST reject after approve = %d\n%s", code, body)
	}
}
