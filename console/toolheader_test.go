package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
)

// A run's own tool (its requests carry api.ToolHeader) cannot log in to
// the console, even with the admin token.
func TestLoginRefusesToolRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	b := f.browser(t)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", f.url+"/login", strings.NewReader(url.Values{"token": {adminToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set(api.ToolHeader, "http_fetch")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("login of a run's tool = %d (cookie %q), want 403 and no session", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
}
