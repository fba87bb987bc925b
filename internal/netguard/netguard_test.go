package netguard_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentwork/agentwork/internal/netguard"
	"github.com/agentwork/agentwork/internal/netguard/netguardtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClassify(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]netguard.Kind{
		"93.184.216.34": netguard.Public, "2606:2800:220:1::": netguard.Public, "172.32.0.1": netguard.Public, "100.128.0.1": netguard.Public,
		"127.0.0.1": netguard.Loopback, "127.8.9.1": netguard.Loopback, "::1": netguard.Loopback, "::ffff:127.0.0.1": netguard.Loopback,
		"169.254.169.254": netguard.Metadata, "fd00:ec2::254": netguard.Metadata, "::ffff:169.254.169.254": netguard.Metadata,
		"64:ff9b::a9fe:a9fe": netguard.Metadata, "2002:a9fe:a9fe::1": netguard.Metadata, "64:ff9b:1::a9fe:a9fe": netguard.Metadata, "::7f00:1": netguard.Loopback, "0.1.2.3": netguard.Unspecified,
		"169.254.0.1": netguard.LinkLocal, "fe80::1%eth0": netguard.LinkLocal,
		"10.0.0.1": netguard.Private, "172.31.255.255": netguard.Private, "192.168.0.1": netguard.Private,
		"100.100.100.100": netguard.Private, "fc00::1": netguard.Private, "::ffff:10.0.0.1": netguard.Private,
		"0.0.0.0": netguard.Unspecified, "::": netguard.Unspecified,
		"224.0.0.1": netguard.Multicast, "255.255.255.255": netguard.Multicast, "ff02::1": netguard.Multicast,
	} {
		if got := netguard.Classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Classify(%s) = %v, want %v", addr, got, want)
		}
	}
	if got := netguard.Classify(netip.Addr{}); got != netguard.Invalid {
		t.Errorf("Classify(zero Addr) = %v, want %v", got, netguard.Invalid)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	strict, loopback, private := netguard.Policy{}, netguard.Policy{AllowLoopback: true}, netguard.Policy{AllowPrivate: true}
	all := netguard.Policy{AllowLoopback: true, AllowPrivate: true}
	for _, tc := range []struct {
		addr                            string
		strict, loopback, private, both bool // allowed by each policy
	}{
		{"93.184.216.34", true, true, true, true},
		{"127.0.0.1", false, true, false, true},
		{"::1", false, true, false, true},
		{"169.254.169.254", false, false, true, true},
		{"10.0.0.1", false, false, true, true},
		{"fe80::1", false, false, true, true},
		{"0.0.0.0", false, false, false, false},
		{"224.0.0.1", false, false, false, false},
	} {
		ip := netip.MustParseAddr(tc.addr)
		for _, p := range []struct {
			name    string
			policy  netguard.Policy
			allowed bool
		}{{"strict", strict, tc.strict}, {"loopback", loopback, tc.loopback}, {"private", private, tc.private}, {"both", all, tc.both}} {
			err := p.policy.Check(ip)
			if (err == nil) != p.allowed {
				t.Errorf("%s.Check(%s) = %v, want allowed %v", p.name, tc.addr, err, p.allowed)
			}
			if err != nil && !errors.Is(err, netguard.ErrBlocked) {
				t.Errorf("%s.Check(%s) = %v, want it to be ErrBlocked", p.name, tc.addr, err)
			}
		}
	}
	err := strict.Check(netip.MustParseAddr("::ffff:169.254.169.254"))
	var be *netguard.BlockedError
	if !errors.As(err, &be) || be.Kind != netguard.Metadata || err.Error() != "169.254.169.254 is the cloud metadata service's address" {
		t.Errorf("Check(::ffff:169.254.169.254) = %v, want the metadata address named in IPv4", err)
	}
}

func TestCheckHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host string
		want string // "" allowed by the zero Policy
	}{
		{"example.com", ""},
		{"metadata.google.internal", "metadata.google.internal is the name of a cloud metadata service"},
		{"METADATA.google.internal.", "metadata.google.internal is the name of a cloud metadata service"},
		{"metadata", "metadata is the name of a cloud metadata service"},
		{"localhost", "localhost is the name of this host (loopback)"},
		{"api.localhost", "api.localhost is the name of this host (loopback)"},
		{"169.254.169.254", "169.254.169.254 is the cloud metadata service's address"},
		{"[::1]", "::1 is a loopback address"},
		{"10.1.2.3", "10.1.2.3 is a private address"},
	} {
		err := netguard.Policy{}.CheckHost(tc.host)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckHost(%q) = %v, want nil", tc.host, err)
		case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, netguard.ErrBlocked)):
			t.Errorf("CheckHost(%q) = %v, want %q", tc.host, err, tc.want)
		}
	}
	if err := (netguard.Policy{AllowPrivate: true}).CheckHost("metadata.google.internal"); err != nil {
		t.Errorf("CheckHost(metadata name) with AllowPrivate = %v, want nil", err)
	}
	if err := (netguard.Policy{AllowLoopback: true}).CheckHost("localhost"); err != nil {
		t.Errorf("CheckHost(localhost) with AllowLoopback = %v, want nil", err)
	}
}

// A name that resolves to a refused address is refused when the dialer
// connects, whatever a check of the name said before: the check runs on
// the resolved address.
func TestControlChecksTheResolvedAddress(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, tc := range []struct {
		name    string
		policy  netguard.Policy
		refused bool
	}{
		{"strict", netguard.Policy{}, true},
		{"private allowed", netguard.Policy{AllowPrivate: true}, true},
		{"loopback allowed", netguard.Policy{AllowLoopback: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, queries := netguardtest.Resolver([4]byte{127, 0, 0, 1})
			if err := tc.policy.CheckHost("rebind.example.test"); err != nil {
				t.Fatalf("CheckHost(a name) = %v, want nil: a name is checked when connecting", err)
			}
			d := &net.Dialer{Timeout: 5 * time.Second, Resolver: res, Control: tc.policy.Control}
			conn, err := d.DialContext(t.Context(), "tcp4", net.JoinHostPort("rebind.example.test", port))
			if queries.Load() == 0 {
				t.Fatalf("Dial = %v without asking the test resolver", err)
			}
			if conn != nil {
				_ = conn.Close()
			}
			if tc.refused != (err != nil) || (err != nil && !errors.Is(err, netguard.ErrBlocked)) {
				t.Errorf("Dial(a name resolving to 127.0.0.1) = %v, want refused %v (ErrBlocked)", err, tc.refused)
			}
		})
	}
	if err := (netguard.Policy{}).Control("tcp", "nonsense", nil); !errors.Is(err, netguard.ErrBlocked) {
		t.Errorf("Control(not host:port) = %v, want ErrBlocked", err)
	}
}
