package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
)

// A run's own tools (http_fetch, an HTTP MCP server) mark their requests
// with api.ToolHeader: the admin routes refuse them, even with the admin
// token (a run that read the token from the data dir acts as nobody).
func TestAdminRefusesToolRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(_ *api.Config, d *api.Deps) { d.Routes = []api.Router{jobs{}} })
	for _, hv := range []string{"http_fetch", ""} {
		r := f.do(t, "GET", "/v1/jobs/daily", adminToken, "", api.ToolHeader, hv)
		if r.status != http.StatusForbidden || !strings.Contains(r.problem(t).Detail, "tool") {
			t.Errorf("GET /v1/jobs/daily with the admin token and %s: %q = %d %s, want 403", api.ToolHeader, hv, r.status, r.body)
		}
	}
	if r := f.do(t, "GET", "/v1/jobs/daily", adminToken, ""); r.status != http.StatusOK {
		t.Errorf("GET /v1/jobs/daily with the admin token = %d, want 200", r.status)
	}
}
