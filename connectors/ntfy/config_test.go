package ntfy_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/connectors/connectortest"
	"github.com/agentwork/agentwork/connectors/ntfy"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := ntfy.Config{Topic: topic}
	for _, tc := range []struct {
		name string
		c    ntfy.Config
		want string // "" for valid; else a part of the error
	}{
		{"topic only", ok, ""},
		{"token", ntfy.Config{Topic: topic, Token: token}, ""},
		{"basic", ntfy.Config{Topic: topic, Username: "phil", Password: "pw-secret-1"}, ""},
		{"self-hosted with a path", ntfy.Config{BaseURL: "https://example.com/ntfy/", Topic: topic}, ""},
		{"no topic", ntfy.Config{}, "topic: required"},
		{"topic with a slash", ntfy.Config{Topic: "a/b"}, "topic: want 1-64 characters"},
		{"topic too long", ntfy.Config{Topic: strings.Repeat("a", 65)}, "topic: want 1-64 characters"},
		{"disallowed topic", ntfy.Config{Topic: "docs"}, "path of the ntfy server"},
		{"ftp", ntfy.Config{BaseURL: "ftp://ntfy.sh", Topic: topic}, "base_url: \"ftp://ntfy.sh\": want an http(s) URL"},
		{"user info", ntfy.Config{BaseURL: "https://phil:pw-secret-1@ntfy.sh", Topic: topic}, "base_url: \"https://***@ntfy.sh\": put credentials in token"},
		{"query", ntfy.Config{BaseURL: "https://ntfy.sh/?auth=x", Topic: topic}, "want no query"},
		{"token and password", ntfy.Config{Topic: topic, Token: token, Username: "phil", Password: "pw-secret-1"}, "either token or username"},
		{"token without tk_", ntfy.Config{Topic: topic, Token: "pw-secret-1"}, "token: want an ntfy access token (tk_"},
		{"username alone", ntfy.Config{Topic: topic, Username: "phil"}, "password: required with username"},
		{"password alone", ntfy.Config{Topic: topic, Password: "pw-secret-1"}, "username: required with password"},
		{"title with a newline", ntfy.Config{Topic: topic, Title: "a\nb"}, "title: may not contain"},
		{"tag with a comma", ntfy.Config{Topic: topic, Tags: []string{"a,b"}}, "tags[0]"},
		{"empty tag", ntfy.Config{Topic: topic, Tags: []string{"ok", " "}}, "tags[1]"},
	} {
		connectortest.CheckError(t, tc.name+": Validate()", tc.c.Validate(), tc.want, token, "pw-secret-1", topic)
	}
}

func TestCheckDestination(t *testing.T) {
	t.Parallel()
	for dest, ok := range map[string]bool{"team-b": true, "Alerts_2": true, "a/b": false, "a b": false, "v1": false, "": false} {
		err := ntfy.Config{Topic: topic}.CheckDestination(dest)
		if (err == nil) != ok {
			t.Errorf("CheckDestination(%q) = %v, want ok %v", dest, err, ok)
		}
	}
}
