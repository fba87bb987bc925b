package webhook

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrBlocked is the error of a connection the connector refused to make
// (see Blocked); it is permanent.
var ErrBlocked = errors.New("webhook: address refused")

var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	awsMetadata = netip.MustParseAddr("fd00:ec2::254")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// Blocked returns an error wrapping ErrBlocked when a webhook must not
// connect to ip unless allow_private is set: link-local addresses (where
// the cloud metadata services listen: 169.254.169.254, fd00:ec2::254),
// private networks (RFC 1918, fc00::/7, carrier-grade NAT 100.64.0.0/10),
// the unspecified address, multicast and broadcast. Loopback is allowed.
// An IPv4 address inside IPv6 (::ffff:a.b.c.d, NAT64 64:ff9b::/96, 6to4
// 2002::/16) is judged by its IPv4 address.
func Blocked(ip netip.Addr) error {
	ip = embedded(ip.WithZone(""))
	what := ""
	switch {
	case !ip.IsValid():
		what = "not an IP address"
	case ip.IsLoopback():
		return nil
	case ip == netip.AddrFrom4([4]byte{169, 254, 169, 254}) || ip == awsMetadata:
		what = "the cloud metadata service's address"
	case ip.IsLinkLocalUnicast():
		what = "a link-local address"
	case ip.IsPrivate() || cgnat.Contains(ip):
		what = "a private address"
	case ip.IsUnspecified():
		what = "the unspecified address"
	case ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		what = "a multicast or broadcast address"
	default:
		return nil
	}
	return &blockedError{ip: ip, what: what}
}

// blockedError is the error of Blocked; it is ErrBlocked.
type blockedError struct {
	ip   netip.Addr
	what string
}

func (e *blockedError) Error() string {
	return fmt.Sprintf("%s is %s; set allow_private: true to send there", e.ip, e.what)
}

func (e *blockedError) Is(target error) bool { return target == ErrBlocked }

// embedded returns the IPv4 address inside an IPv4-mapped, NAT64 or 6to4
// IPv6 address, else ip.
func embedded(ip netip.Addr) netip.Addr {
	switch {
	case ip.Is4In6():
		return ip.Unmap()
	case nat64.Contains(ip):
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(ip):
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return ip
}

// control is a net.Dialer Control function that refuses blocked
// addresses. It runs after the name was resolved, for each address the
// dialer tries, so a name that resolves to a blocked address (or is made
// to, by DNS rebinding) is refused too.
func control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not host:port", ErrBlocked, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", ErrBlocked, host)
	}
	return Blocked(ip)
}
