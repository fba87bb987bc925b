package webhook_test

import (
	"crypto/sha256"
	"testing"

	"github.com/agentwork/agentwork/api"
	"github.com/agentwork/agentwork/bus/bustest"
	"github.com/agentwork/agentwork/triggers/webhook"
)

// Lookup finds a token credential by name with the grant Authenticate
// gives its token and its token's SHA-256 (what the console checks its
// sessions with); a name no token has, or a signing secret's, is not
// found.
func TestLookup(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	const tok = "console-write-0123456789"
	cfg.Tokens = append(cfg.Tokens, webhook.Token{Name: "operator", Token: tok, Grant: webhook.Grant{Sources: []string{"console"}, Console: "write"}})
	h, err := webhook.New(bustest.New(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, sum, ok := h.Lookup("operator")
	if !ok || c.Name != "operator" || sum != sha256.Sum256([]byte(tok)) {
		t.Fatalf("Lookup(operator) = %+v, %x, %v; want it with its token's SHA-256", c, sum, ok)
	}
	if !c.Allows(api.KindConsole, api.ConsoleWrite) || c.Allows("task", "x") {
		t.Error("Lookup(operator)'s grant is not its config's (console: write, no tasks)")
	}
	for _, name := range []string{"nobody", ""} {
		if _, _, ok := h.Lookup(name); ok {
			t.Errorf("Lookup(%q) found a credential", name)
		}
	}
	for _, s := range cfg.Secrets {
		if _, _, ok := h.Lookup(s.Name); ok {
			t.Errorf("Lookup(%q) found a signing secret: it cannot log in", s.Name)
		}
	}
}
