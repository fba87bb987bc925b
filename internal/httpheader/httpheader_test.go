package httpheader_test

import (
	"testing"

	"github.com/agentwork/agentwork/internal/httpheader"
)

func TestValid(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]bool{"X-Team": true, "Authorization": true, "x_y.z~1": true, "": false, "X Team": false, "X:Y": false, "Ä": false} {
		if got := httpheader.ValidName(k); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", k, got, want)
		}
	}
	for v, want := range map[string]bool{"Bearer abc": true, "a\tb": true, "": true, "a\r\nX-Evil: 1": false, "a\x7f": false, "a\nb": false} {
		if got := httpheader.ValidValue(v); got != want {
			t.Errorf("ValidValue(%q) = %v, want %v", v, got, want)
		}
	}
}
