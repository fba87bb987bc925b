package openai

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/model"
)

func TestDefaultMaxTokensField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		baseURL, want string
	}{
		{"", MaxCompletionTokens},
		{"https://api.openai.com/v1/", MaxCompletionTokens},
		{"http://127.0.0.1:11434/v1", MaxTokens},
		{"https://openrouter.ai/api/v1", MaxTokens},
	}
	for _, tt := range tests {
		c, err := New(model.Config{BaseURL: tt.baseURL, Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if c.maxField != tt.want {
			t.Errorf("New(base_url %q).maxField = %s, want %s", tt.baseURL, c.maxField, tt.want)
		}
		if !strings.HasSuffix(c.endpoint, "/v1/chat/completions") || strings.Contains(c.endpoint, "//chat") {
			t.Errorf("New(base_url %q).endpoint = %s, want .../v1/chat/completions", tt.baseURL, c.endpoint)
		}
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 400)
	tests := []struct{ in, want string }{
		{"  short  ", "short"},
		{"line one\nline two", "line one ..."},
		{"bad \xff byte", "bad ? byte"},
		{long, long[:300] + " ..."},
	}
	for _, tt := range tests {
		if got := clip(tt.in); got != tt.want {
			t.Errorf("clip(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
