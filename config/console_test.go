package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/config"
)

// TestConsoleSessions: the console section sets how long sessions last;
// config check says what is wrong with a bad value and what to write.
func TestConsoleSessions(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("agentwork.yaml", []byte("console:\n  session_idle: 30m\n  session_max: 24h\n"), env(nil), types)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate = %v", err)
	}
	if f.Console.SessionIdle != 30*time.Minute || f.Console.SessionMax != 24*time.Hour {
		t.Errorf("console = %+v, want 30m and 24h", f.Console)
	}
	if d := (&config.File{}).Console.WithDefaults(); d.SessionIdle != 12*time.Hour || d.SessionMax != 7*24*time.Hour {
		t.Errorf("defaults = %+v, want 12h and 168h", d)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"console: {session_idle: 10s}", "console.session_idle: 10s is too short; want at least 1m0s"},
		{"console: {session_idle: -1h}", "console.session_idle: -1h0m0s is too short"},
		{"console: {session_max: 2400h}", "console.session_max: 2400h0m0s: want 1m0s to 2160h0m0s"},
		{"console: {session_idle: 12h, session_max: 1h}", "console.session_idle: 12h0m0s is longer than console.session_max (1h0m0s)"},
		{"console: {session_max: 1h}", "console.session_idle: 12h0m0s is longer than console.session_max (1h0m0s)"},
	} {
		f, err := config.Parse("agentwork.yaml", []byte(tt.yaml+"\n"), env(nil), types)
		if err == nil {
			err = f.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.yaml, err, tt.want)
		}
	}
	// Days are not a Go duration: the error names the field.
	_, err = config.Parse("agentwork.yaml", []byte("console:\n  session_max: 7d\n"), env(nil), types)
	t.Logf("session_max: 7d: %v", err)
	if err == nil || !strings.Contains(err.Error(), "session_max") {
		t.Errorf("session_max: 7d = %v, want an error naming the field", err)
	}
}
