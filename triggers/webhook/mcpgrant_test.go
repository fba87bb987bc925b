package webhook_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/triggers/webhook"
)

// A token made for the MCP server (a dashboard's read-only token, an
// approver's) sends no tasks unless its sources say so: sources default
// to [task] only for a token without an mcp section.
func TestMCPTokenSendsNoTasksByDefault(t *testing.T) {
	t.Parallel()
	const (
		dashboard = "dashboard-token-0123456789ab"
		approver  = "approver-token-0123456789abc"
		mcpTasks  = "mcptasks-token-0123456789abc"
	)
	cfg := webhook.Config{Tokens: []webhook.Token{
		{Name: "dashboard", Token: dashboard, MCP: &webhook.MCPGrant{ReadOnly: true}},
		{Name: "approver", Token: approver, MCP: &webhook.MCPGrant{Kinds: []string{"approvals"}}},
		{Name: "mcptasks", Token: mcpTasks, Grant: webhook.Grant{Sources: []string{"task"}}, MCP: &webhook.MCPGrant{}},
		{Name: "ci", Token: tokCI},
	}}
	f := newFixture(t, cfg)
	body := `{"prompt":"do something"}`
	for _, tok := range []string{dashboard, approver} {
		r := f.do(t, call{body: body, header: bearer(tok)})
		if r.status != http.StatusForbidden {
			t.Errorf("POST /v1/tasks with an mcp token without sources = %d %s, want 403", r.status, r.body)
		}
	}
	f.do(t, call{body: body, header: bearer(mcpTasks)}).accepted(t)
	f.do(t, call{body: body, header: bearer(tokCI)}).accepted(t)
	if n := len(stored(t, f.b)); n != 2 {
		t.Errorf("stored %d requests, want 2 (of the tokens whose grant allows tasks)", n)
	}
}

// The names the approval records use for who decided (admin, link,
// timeout) are no credential's: a token named admin would decide as the
// admin.
func TestReservedCredentialNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"admin", "link", "timeout"} {
		err := webhook.Config{Tokens: []webhook.Token{{Name: name, Token: tokCI}}}.Validate()
		if err == nil || !strings.Contains(err.Error(), "webhook.tokens[0].name") || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("Validate(token named %q) = %v, want webhook.tokens[0].name reserved", name, err)
		}
		err = webhook.Config{Secrets: []webhook.Secret{{Name: name, Secret: newSecret}}}.Validate()
		if err == nil || !strings.Contains(err.Error(), "webhook.secrets[0].name") {
			t.Errorf("Validate(secret named %q) = %v, want webhook.secrets[0].name reserved", name, err)
		}
	}
}
