package secret_test

import (
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

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

// TestWords: a configured value is cut whole, and the credentials of an
// "<auth scheme> <credentials>" value alone too; a value shorter than Min
// is no secret, and neither is a word of a passphrase.
func TestWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"short", nil},
		{"  hunter  ", []string{"hunter"}},
		{"hunter2", []string{"hunter2"}},
		{"Bearer ghp_0123456789", []string{"Bearer ghp_0123456789", "ghp_0123456789"}},
		{"token  ghp_0123456789 ", []string{"token  ghp_0123456789", "ghp_0123456789"}},
		{"Bearer short", []string{"Bearer short"}},
		{"correct horse battery staple", []string{"correct horse battery staple"}},
		{"Bearer", []string{"Bearer"}},
	}
	for _, tt := range tests {
		if got := secret.Words(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Words(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if secret.Min != 6 {
		t.Errorf("Min = %d, want 6", secret.Min)
	}
}

// leak returns the first run of secret.Min bytes of a form of key that s
// holds, or "".
func leak(s, key string) string {
	raw := []byte(key)
	for _, f := range []string{key, strings.ReplaceAll(key, "/", `\/`), url.QueryEscape(key), base64.StdEncoding.EncodeToString(raw)} {
		for i := 0; i+secret.Min <= len(f); i++ {
			if w := f[i : i+secret.Min]; strings.Contains(s, w) {
				return w
			}
		}
	}
	return ""
}

// TestCutAtEveryOffset: whatever byte of a secret the cap falls on, in
// any form of it, no part of it of secret.Min bytes or more is kept.
func TestCutAtEveryOffset(t *testing.T) {
	t.Parallel()
	key := "sk/live+0123456789abcdefghij"
	const max = 100
	for _, form := range []string{key, strings.ReplaceAll(key, "/", `\/`), url.QueryEscape(key), base64.StdEncoding.EncodeToString([]byte(key))} {
		for off := max - len(form) - 1; off <= max+1; off++ {
			text := strings.Repeat("é", off/2) + strings.Repeat(".", off%2) + form + strings.Repeat(" and the rest", 20)
			got, whole := secret.Cut(text, max, false, []string{key})
			cut := len(got) < whole
			if w := leak(got, key); w != "" {
				t.Errorf("Cut(%q at %d) = %q keeps %q of the secret", form, off, got, w)
			}
			if len(got) > max || !utf8.ValidString(got) || !cut {
				t.Errorf("Cut(%q at %d) = %q, %v: want at most %d bytes of valid UTF-8, cut", form, off, got, cut, max)
			}
			if !strings.HasPrefix(strings.Replace(text, form, "[redacted]", 1), got) {
				t.Errorf("Cut(%q at %d) = %q, want a prefix of the text", form, off, got)
			}
			// A reader that stopped at the cap: its end is a cut too.
			got, _ = secret.Cut(text[:off+len(form)/2], 1000, true, []string{key})
			if w := leak(got, key); w != "" || !utf8.ValidString(got) {
				t.Errorf("Cut(the first %d bytes, more) = %q keeps %q of the secret", off+len(form)/2, got, w)
			}
		}
	}
	// A secret whole within the cap is replaced, and nothing else goes.
	got, whole := secret.Cut("a "+key+" b", 1000, false, []string{key})
	if got != "a [redacted] b" || whole != len(got) {
		t.Errorf("Cut(whole) = %q, %d, want %q, %d", got, whole, "a [redacted] b", len("a [redacted] b"))
	}
	// Text that only looks like the start of a secret for fewer than Min
	// bytes stays.
	got, _ = secret.Cut("abc sk/li"+strings.Repeat("x", 20), 9, false, []string{key})
	if got != "abc sk/li" {
		t.Errorf("Cut(5 bytes of a secret at the end) = %q, want them kept", got)
	}
}

// TestMargin is the length of the longest form of any secret: what a
// reader must read past its cap to see a secret that straddles it whole.
func TestMargin(t *testing.T) {
	t.Parallel()
	if got := secret.Margin(nil); got != 0 {
		t.Errorf("Margin(nil) = %d, want 0", got)
	}
	if got, want := secret.Margin([]string{"abcdef", "0123456789"}), len(`\u0030`)*10; got != want {
		t.Errorf("Margin = %d, want %d (the \\u form of the longest)", got, want)
	}
}

// TestContext: the secrets a tool loop hands its tools.
func TestContext(t *testing.T) {
	t.Parallel()
	ctx := secret.NewContext(t.Context(), "one-secret")
	ctx = secret.NewContext(ctx, "two-secret")
	if got := secret.FromContext(ctx); !slices.Equal(got, []string{"one-secret", "two-secret"}) {
		t.Errorf("FromContext = %q, want both", got)
	}
	if got := secret.FromContext(t.Context()); got != nil {
		t.Errorf("FromContext(none) = %q, want nil", got)
	}
}
