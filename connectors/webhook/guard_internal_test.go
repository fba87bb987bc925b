package webhook

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentwork/agentwork/connectors"
)

// dnsServer answers every A query with addr and every other query with no
// records, over a stream connection (the Go resolver frames a stream with
// a two-byte length, as DNS over TCP). queries counts the A queries.
func dnsServer(t *testing.T, addr [4]byte, queries *atomic.Int32) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			for {
				var n uint16
				if err := binary.Read(server, binary.BigEndian, &n); err != nil {
					return
				}
				q := make([]byte, n)
				if _, err := io.ReadFull(server, q); err != nil {
					return
				}
				// The question: the name's labels, then type and class.
				end := 12
				for end < len(q) && q[end] != 0 {
					end += int(q[end]) + 1
				}
				end += 5
				if end > len(q) {
					return
				}
				qtype := binary.BigEndian.Uint16(q[end-4:])
				resp := append([]byte{}, q[:2]...)    // id
				resp = append(resp, 0x81, 0x80, 0, 1) // response, recursion; one question
				if qtype == 1 {
					queries.Add(1)
					resp = append(resp, 0, 1) // one answer
				} else {
					resp = append(resp, 0, 0)
				}
				resp = append(resp, 0, 0, 0, 0) // no authority, no additional
				resp = append(resp, q[12:end]...)
				if qtype == 1 {
					resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4)
					resp = append(resp, addr[:]...)
				}
				if err := binary.Write(server, binary.BigEndian, uint16(len(resp))); err != nil {
					return
				}
				if _, err := server.Write(resp); err != nil {
					return
				}
			}
		}()
		return client, nil
	}
}

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
			var queries atomic.Int32
			c.dialer.Resolver = &net.Resolver{PreferGo: true, Dial: dnsServer(t, tc.addr, &queries)}
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

func TestBlocked(t *testing.T) {
	t.Parallel()
	for addr, blocked := range map[string]bool{
		"127.0.0.1": false, "127.8.9.1": false, "::1": false, "93.184.216.34": false, "2606:2800:220:1::": false,
		"169.254.169.254": true, "169.254.0.1": true, "fe80::1%eth0": true, "fd00:ec2::254": true,
		"10.0.0.1": true, "172.31.255.255": true, "192.168.0.1": true, "100.100.100.100": true, "fc00::1": true,
		"0.0.0.0": true, "::": true, "224.0.0.1": true, "255.255.255.255": true, "ff02::1": true,
		"::ffff:10.0.0.1": true, "::ffff:127.0.0.1": false, "64:ff9b::a9fe:a9fe": true, "2002:a9fe:a9fe::1": true,
		"172.32.0.1": false, "100.128.0.1": false,
	} {
		err := Blocked(netip.MustParseAddr(addr))
		if (err != nil) != blocked {
			t.Errorf("Blocked(%s) = %v, want blocked %v", addr, err, blocked)
		}
		if err != nil && !errors.Is(err, ErrBlocked) {
			t.Errorf("Blocked(%s) = %v, want it to wrap ErrBlocked", addr, err)
		}
	}
	if err := control("tcp", "169.254.169.254:80", nil); !errors.Is(err, ErrBlocked) {
		t.Errorf("control(metadata) = %v, want ErrBlocked", err)
	}
	if err := control("tcp", "[::1]:80", nil); err != nil {
		t.Errorf("control(::1) = %v, want nil", err)
	}
}
