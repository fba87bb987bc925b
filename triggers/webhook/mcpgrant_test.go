package webhook_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/triggers/webhook"
)

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
