package bus_test

import (
	"strings"
	"testing"

	"github.com/agentwork/agentwork/bus"
)

// TestErrorsNeverShowURLCredentials: a password in bus.url stays out of
// config errors and connection errors alike.
func TestErrorsNeverShowURLCredentials(t *testing.T) {
	t.Parallel()
	const pw = "hunter2-bus-password"
	for _, u := range []string{"nats://ok:4222,http://agent:" + pw + "@nats.internal:4222", "nats://agent:" + pw + "%zz@nats.internal:4222", "nats://agent:" + pw + " x@nats.internal:4222"} {
		err := bus.Config{URL: u}.Validate()
		if err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("Validate(%q) = %v, want an error without the password", u, err)
		}
	}
	_, err := bus.Dial(t.Context(), bus.Config{URL: "nats://agent:" + pw + "@127.0.0.1:1"})
	if err == nil || strings.Contains(err.Error(), pw) {
		t.Errorf("Dial(unreachable URL with a password) = %v, want an error without the password", err)
	}
	if err != nil && !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Dial error %q should still say which server it tried", err)
	}
}
