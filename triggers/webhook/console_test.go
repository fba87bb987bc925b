package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/webhook"
)

// A credential whose grant has sources: [console] may log in to the web
// console: read-only, unless console: write says otherwise. A glob source
// never grants it, it is never a task's source nor a runner source, and a
// console: setting without the source is a config error.
func TestConsoleGrant(t *testing.T) {
	t.Parallel()
	b := bustest.New(t)
	cfg := testConfig()
	const tokRead, tokWrite = "console-read-0123456789", "console-write-0123456789"
	cfg.Tokens = append(cfg.Tokens,
		webhook.Token{Name: "viewer", Token: tokRead, Grant: webhook.Grant{Sources: []string{"console"}}},
		webhook.Token{Name: "operator", Token: tokWrite, Grant: webhook.Grant{Sources: []string{"task", "console"}, Console: "write"}},
		webhook.Token{Name: "glob", Token: "console-glob-0123456789", Grant: webhook.Grant{Sources: []string{"*"}}})
	h, err := webhook.New(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(h.Sources(), api.KindConsole) {
		t.Errorf("Sources() = %v: console is not a runner source", h.Sources())
	}
	auth := func(tok string) api.Caller {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		c, err := h.Authenticate(r, nil)
		if err != nil {
			t.Fatalf("Authenticate(%s) error = %v", tok, err)
		}
		return c
	}
	for _, tt := range []struct {
		tok         string
		read, write bool
	}{
		{tokRead, true, false},
		{tokWrite, true, true},
		{"console-glob-0123456789", false, false},
		{tokCI, false, false},
	} {
		c := auth(tt.tok)
		if got := c.Allows(api.KindConsole, api.ConsoleRead); got != tt.read {
			t.Errorf("%s: Allows(console, read) = %v, want %v", c.Name, got, tt.read)
		}
		if got := c.Allows(api.KindConsole, api.ConsoleWrite); got != tt.write {
			t.Errorf("%s: Allows(console, write) = %v, want %v", c.Name, got, tt.write)
		}
	}

	// console is not a task source, even for a credential granted it.
	srv := httptest.NewServer(api.New(api.Config{AdminToken: adminToken}, api.Deps{Bus: b, PublicRoutes: []api.PublicRouter{h}}).Handler())
	t.Cleanup(srv.Close)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/tasks", strings.NewReader(`{"prompt":"x","source":"console"}`))
	req.Header = bearer(tokWrite)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST /v1/tasks with source console: %d, want 403", resp.StatusCode)
	}

	for _, tt := range []struct {
		g    webhook.Grant
		want string
	}{
		{webhook.Grant{Console: "write"}, `webhook.tokens[0].console: "write" needs sources: [console]`},
		{webhook.Grant{Sources: []string{"console"}, Console: "admin"}, `webhook.tokens[0].console: "admin": want read or write`},
	} {
		c := webhook.Config{Tokens: []webhook.Token{{Name: "x", Token: "0123456789abcdef0123", Grant: tt.g}}}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.g, err, tt.want)
		}
	}
}
