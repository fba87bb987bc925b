package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers"
	"github.com/agentwork/agentwork/triggers/webhook"
)

const adminToken = "admin-token-0123456789abcdef"

// POST /v1/tasks mounted on the api server as a public route: webhook
// credentials and the admin token post tasks; the admin cannot claim a
// reserved source; other methods are 405; a bus that is down is 503.
func TestRouteOnTheAPIServer(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	h, err := webhook.New(b, testConfig(), webhook.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(api.Config{AdminToken: adminToken}, api.Deps{Bus: b, PublicRoutes: []api.PublicRouter{h}}).Handler())
	t.Cleanup(srv.Close)
	f := &fixture{b: b, url: srv.URL, http: srv.Client()}

	f.do(t, call{body: `{"prompt":"from ci"}`, header: bearer(tokCI)}).accepted(t)
	f.do(t, call{body: `{"prompt":"from the admin","source":"deploy"}`, header: bearer(adminToken)}).accepted(t)
	reqs := stored(t, b)
	if len(reqs) != 2 || reqs[0].Event.Source != "agentwork/webhook/ci" || reqs[1].Event.Source != "agentwork/webhook/admin" || reqs[1].Request.Source != "deploy" {
		t.Fatalf("stored %+v, want the ci task and the admin's deploy request", reqs)
	}
	tests := []struct {
		name   string
		c      call
		status int
	}{
		{"no credentials", call{body: `{"prompt":"x"}`}, http.StatusUnauthorized},
		{"admin claims cron", call{body: `{"prompt":"x","source":"cron"}`, header: bearer(adminToken)}, http.StatusForbidden},
		{"GET", call{method: http.MethodGet, header: bearer(adminToken)}, http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		r := f.do(t, tt.c)
		if r.status != tt.status {
			t.Errorf("%s: status %d, want %d; %s", tt.name, r.status, tt.status, r.body)
			continue
		}
		r.problem(t)
		if tt.status == http.StatusMethodNotAllowed && r.header.Get("Allow") != http.MethodPost {
			t.Errorf("%s: Allow = %q, want POST", tt.name, r.header.Get("Allow"))
		}
	}
	if n := len(stored(t, b)); n != 2 {
		t.Errorf("stored %d requests after the refusals, want still 2", n)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if r := f.do(t, call{body: `{"prompt":"x"}`, header: bearer(adminToken)}); r.status != http.StatusServiceUnavailable {
		t.Errorf("POST /v1/tasks as admin with the bus closed = %d, want 503", r.status)
	}
}

// The webhook as a trigger: every source its credentials may request runs
// under the runner's defaults; Run only waits.
func TestTrigger(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	h, err := webhook.New(b, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Sources(), []string{bus.SourceTask, "deploy"}; !slices.Equal(got, want) {
		t.Errorf("Sources = %v, want %v (patterns left out)", got, want)
	}
	policies, err := triggers.Policies(h)
	if _, ok := policies["deploy"]; err != nil || len(policies) != 2 || !ok {
		t.Errorf("Policies = %v, %v; want a policy for task and deploy", policies, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := h.Run(ctx); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}
