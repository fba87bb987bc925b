package webhook_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/webhook"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))
	u := "https://hooks.example.com/services/" + urlToken
	for _, tc := range []struct {
		name string
		c    webhook.Config
		want string // "" for valid; else a part of the error
	}{
		{"url alone", webhook.Config{URL: u}, ""},
		{"everything", webhook.Config{URL: u, Secrets: []string{secretOld, secretNew}, Headers: map[string]string{"Authorization": "Bearer hdr-secret-123"}}, ""},
		{"no url", webhook.Config{}, "url: required"},
		{"ftp", webhook.Config{URL: "ftp://example.com/" + urlToken}, `url: scheme "ftp": want http or https`},
		{"no host", webhook.Config{URL: "https:///" + urlToken}, "url: has no host"},
		{"unparsable", webhook.Config{URL: "https://exa mple.com/" + urlToken}, "url: does not parse"},
		{"fragment", webhook.Config{URL: u + "#x"}, "url: https://hooks.example.com: want no #fragment"},
		{"private", webhook.Config{URL: "http://192.168.1.5/" + urlToken}, "url: http://192.168.1.5: 192.168.1.5 is a private address; set allow_private: true"},
		{"not whsec", webhook.Config{URL: u, Secrets: []string{"hdr-secret-123"}}, "secrets[0]: want whsec_"},
		{"short secret", webhook.Config{URL: u, Secrets: []string{secretOld, short}}, "secrets[1]: 5 bytes is too short"},
		{"reserved header", webhook.Config{URL: u, Headers: map[string]string{"Webhook-Signature": "hdr-secret-123"}}, "headers: Webhook-Signature is set by the connector"},
		{"content type", webhook.Config{URL: u, Headers: map[string]string{"content-type": "text/plain"}}, "headers: content-type is set by the connector"},
		{"bad name", webhook.Config{URL: u, Headers: map[string]string{"X Key": "v"}}, `headers: "X Key" is not a header name`},
		{"line break", webhook.Config{URL: u, Headers: map[string]string{"X-Key": "hdr-secret-123\r\nX-Evil: 1"}}, "headers.X-Key: the value contains a line break"},
	} {
		connectortest.CheckError(t, tc.name+": Validate()", tc.c.Validate(), tc.want, urlToken, "hdr-secret-123", strings.TrimPrefix(secretNew, "whsec_"))
	}
}
