package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/webhook"
	"github.com/agentwork/agentwork/workflow"
)

// Webhook credentials start workflows through the api server's POST
// /v1/workflows/{name}/runs when their grant has sources: [workflow] and
// the name: a token, a signed request (its webhook-id the run's key), and
// a 403 for the rest; workflow is never a task's source.
func TestWorkflowGrant(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := testConfig()
	const tokWF = "workflow-token-0123456789"
	cfg.Tokens = append(cfg.Tokens, webhook.Token{Name: "wf", Token: tokWF, Grant: webhook.Grant{Sources: []string{"workflow"}, Names: []string{"deploy"}}})
	cfg.Secrets[1].Grant = webhook.Grant{Sources: []string{"workflow"}}
	h, err := webhook.New(b, cfg, webhook.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.Sources(), bus.SourceWorkflow) {
		t.Errorf("Sources() = %v: workflow is not a runner source", h.Sources())
	}
	var n yaml.Node
	if err := yaml.Unmarshal([]byte("deploy:\n  on: [{webhook: {}}]\n  steps: [{id: a, wait: 1h}]\nother:\n  on: [{webhook: {}}]\n  steps: [{id: a, wait: 1h}]\n"), &n); err != nil {
		t.Fatal(err)
	}
	set, err := workflow.Decode(&n, "workflows")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{AdminToken: adminToken}, api.Deps{Bus: b, PublicRoutes: []api.PublicRouter{h},
		Workflows: workflow.NewEngine(b, workflow.Config{Definitions: set}), Callers: h.Authenticate}).Handler())
	t.Cleanup(srv.Close)
	post := func(path, body string, hdr http.Header) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header = hdr.Clone()
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, tt := range []struct {
		name, path string
		hdr        http.Header
		status     int
	}{
		{"granted token", "/v1/workflows/deploy/runs", bearer(tokWF), 202},
		{"token, another workflow", "/v1/workflows/other/runs", bearer(tokWF), 403},
		{"task-only token", "/v1/workflows/deploy/runs", bearer(tokCI), 403},
		{"wrong token", "/v1/workflows/deploy/runs", bearer("not-a-token-0123456789"), 401},
		{"signed, granted", "/v1/workflows/other/runs", signedBy("msg_9", now, `{}`, newSecret), 202},
		{"signed, task-only secret", "/v1/workflows/other/runs", signedBy("msg_9", now, `{}`, oldSecret), 403},
		{"signed, bad signature", "/v1/workflows/other/runs", signedBy("msg_9", now, `{"x":1}`, newSecret), 401},
		{"workflow as a task source", "/v1/tasks", bearer(tokAny), 403},
	} {
		body := `{}`
		if tt.path == "/v1/tasks" {
			body = `{"prompt":"x","source":"workflow"}`
		}
		if status, raw := post(tt.path, body, tt.hdr); status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, status, raw, tt.status)
		}
	}
	// The signed request's webhook-id is the run's key: sent again, the
	// same run.
	_, first := post("/v1/workflows/other/runs", `{}`, signedBy("msg_10", now, `{}`, newSecret))
	_, again := post("/v1/workflows/other/runs", `{}`, signedBy("msg_10", now, `{}`, newSecret))
	if id := strings.Split(first, `"`)[3]; !strings.Contains(again, id) || !strings.Contains(again, `"duplicate":true`) {
		t.Errorf("the same webhook-id twice: %s then %s", first, again)
	}
}
