package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
	"github.com/agentwork/agentwork/internal/netguard/netguardtest"
)

// A name that passes the config check but resolves to the metadata
// address (DNS rebinding) is refused when the connector connects: the
// check runs on the resolved address.
func TestDialRefusesResolvedAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		addr         [4]byte
		allowPrivate bool
		refused      bool
	}{
		{"metadata", [4]byte{169, 254, 169, 254}, false, true},
		{"private", [4]byte{10, 0, 0, 7}, false, true},
		{"loopback", [4]byte{127, 0, 0, 1}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			t.Cleanup(srv.Close)
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
			c, err := New("hook", Options{URL: "http://rebind.example.test:" + port + "/hook", AllowPrivate: tc.allowPrivate})
			if err != nil {
				t.Fatalf("New = %v", err)
			}
			t.Cleanup(c.api.CloseIdleConnections)
			res, queries := netguardtest.Resolver(tc.addr)
			c.dialer.Resolver = res
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			_, err = c.Send(ctx, connectors.Notification{ID: "n1", Text: "x"})
			if queries.Load() == 0 {
				t.Fatalf("Send = %v without asking the test resolver", err)
			}
			if !tc.refused {
				if err != nil {
					t.Fatalf("Send to a name resolving to loopback = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrBlocked) || !strings.Contains(err.Error(), "allow_private") {
				t.Fatalf("Send to a name resolving to %v = %v, want a refusal", tc.addr, err)
			}
			if !connectors.IsPermanent(err) {
				t.Errorf("Send refused = %v, want permanent", err)
			}
		})
	}
}
