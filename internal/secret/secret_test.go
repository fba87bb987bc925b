package secret_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/internal/secret"
)

func TestURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://u:hunter2-pass@a:4222", "nats://***@a:4222"},
		{"nats://u:p1@a:4222, nats://u:p2@b:4222", "nats://***@a:4222,nats://***@b:4222"},
		{"https://key:s3cr3t@models.example/v1?x=1", "https://***@models.example/v1"},
		{"https://models.example/v1?api-key=s3cr3t", "https://models.example/v1"},
		{"htp//u:s3cr3t@host", "***@host"},
		{"nats://u:p%zz@host:4222", "nats://***@host:4222"},
		{"nats://u:pa@ss@host:4222", "nats://***@host:4222"},
		{"", ""},
	}
	for _, tt := range tests {
		got := secret.URL(tt.in)
		if got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
		for _, pw := range []string{"hunter2", "s3cr3t", "p1", "p2", "p%zz", "pa@ss"} {
			if strings.Contains(tt.in, pw) && strings.Contains(got, pw) {
				t.Errorf("URL(%q) = %q still shows %q", tt.in, got, pw)
			}
		}
	}
}
