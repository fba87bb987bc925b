package model_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/model"
)

func TestValidateNeverShowsBaseURLCredentials(t *testing.T) {
	t.Parallel()
	const pw = "s3cr3t-in-the-url"
	for _, u := range []string{"ftp://user:" + pw + "@models.example/v1", "https//user:" + pw + "@models.example"} {
		err := model.Config{Provider: "openai", Model: "m", BaseURL: u}.Validate()
		if err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("Validate(base_url %q) = %v, want an error without the password", u, err)
		}
	}
}

const key = "sk-test-SECRET-5e1f0c9a"

func ptr[T any](v T) *T { return &v }

func TestValidateHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     model.Config
		wantErr string
	}{
		{"fine", model.Config{Provider: "openai", Model: "m", APIKey: key, Headers: map[string]string{"OpenAI-Project": "proj_1", "X-Tab": "a\tb"}}, ""},
		{"key with a newline", model.Config{Provider: "openai", Model: "m", APIKey: key + "\nX-Evil: 1"}, "model.api_key: contains a control character"},
		{"key with DEL", model.Config{Provider: "openai", Model: "m", APIKey: "sk-\x7f"}, "model.api_key"},
		{"bad header name", model.Config{Provider: "openai", Model: "m", Headers: map[string]string{"Bad Name": "v"}}, `model.headers: "Bad Name" is not a header name`},
		{"non-ASCII header name", model.Config{Provider: "openai", Model: "m", Headers: map[string]string{"X-Tëam": "v"}}, "is not a header name"},
		{"empty header name", model.Config{Provider: "openai", Model: "m", Headers: map[string]string{"": "v"}}, "is not a header name"},
		{"key ending in a newline is trimmed", model.Config{Provider: "openai", Model: "m", APIKey: key + "\n"}, ""},
		{"anthropic takes 0-1", model.Config{Provider: "anthropic", Model: "m", Temperature: ptr(1.5)}, "model.temperature: 1.5 is out of range for Anthropic"},
		{"openai takes 1.5", model.Config{Provider: "openai", Model: "m", Temperature: ptr(1.5)}, ""},
		{"bad header value", model.Config{Provider: "openai", Model: "m", Headers: map[string]string{"X-Token": key + "\r\n"}}, `model.headers: the value of "X-Token" contains a control character`},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: Validate() = %v, want an error containing %q", tt.name, err, tt.wantErr)
		case err != nil && strings.Contains(err.Error(), key):
			t.Errorf("%s: Validate() = %v quotes the secret", tt.name, err)
		}
	}
}
