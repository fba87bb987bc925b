// Package netguard keeps outgoing requests that a config or a model aims
// (a webhook connector's URL, the http_fetch tool) away from the addresses
// they must not reach: loopback, private networks, link-local addresses
// and the cloud metadata services behind them, unless a Policy allows
// them.
//
// The check that counts runs at connect time: a Policy's Control, set as a
// net.Dialer's Control, sees each address the dialer tries after the name
// was resolved, so a name that resolves to a refused address, or is made
// to by DNS rebinding between a check and the connection, is refused too.
// CheckHost refuses what can be told from a URL's host alone (the
// metadata services' names, a literal address) before any lookup, for
// errors at config time. A caller that uses it must also set no HTTP proxy
// (the proxy would connect instead) and keep no connection of one policy
// for a request of another.
package netguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
)

// ErrBlocked is the kind of every error of this package: an address a
// Policy refuses. It is permanent: asking again reaches the same address.
var ErrBlocked = errors.New("address refused")

// Kind is what an address is, as far as a Policy cares.
type Kind int

// Kinds of address. Public is what every Policy allows.
const (
	Public Kind = iota
	// Loopback: 127.0.0.0/8, ::1, and the name localhost.
	Loopback
	// Private: RFC 1918, fc00::/7 and carrier-grade NAT 100.64.0.0/10.
	Private
	// LinkLocal: 169.254.0.0/16 and fe80::/10 (but the metadata address).
	LinkLocal
	// Metadata: the cloud metadata services, 169.254.169.254,
	// fd00:ec2::254, and names such as metadata.google.internal.
	Metadata
	// Unspecified: 0.0.0.0 and ::, which reach the host itself.
	Unspecified
	// Multicast: multicast addresses and the IPv4 broadcast address.
	Multicast
	// Invalid: not an IP address.
	Invalid
)

// String reads as the end of "x is ...".
func (k Kind) String() string {
	switch k {
	case Public:
		return "a public address"
	case Loopback:
		return "a loopback address"
	case Private:
		return "a private address"
	case LinkLocal:
		return "a link-local address"
	case Metadata:
		return "the cloud metadata service's address"
	case Unspecified:
		return "the unspecified address"
	case Multicast:
		return "a multicast or broadcast address"
	default:
		return "not an IP address"
	}
}

var (
	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	metadata4   = netip.AddrFrom4([4]byte{169, 254, 169, 254})
	awsMetadata = netip.MustParseAddr("fd00:ec2::254")
	broadcast   = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215, IPv4 in its last 32 bits
	sixToFour   = netip.MustParsePrefix("2002::/16")
	v4Compat    = netip.MustParsePrefix("::/96") // deprecated IPv4-compatible ::a.b.c.d
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
)

// Classify says what ip is. An IPv4 address inside IPv6 (::ffff:a.b.c.d,
// the deprecated ::a.b.c.d, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, 6to4
// 2002::/16) is judged by its IPv4 address; 0.0.0.0/8 is unspecified; a
// zone is ignored.
func Classify(ip netip.Addr) Kind {
	ip = embedded(ip.WithZone(""))
	switch {
	case !ip.IsValid():
		return Invalid
	case ip.IsLoopback():
		return Loopback
	case ip == metadata4 || ip == awsMetadata:
		return Metadata
	case ip.IsLinkLocalUnicast():
		return LinkLocal
	case ip.IsPrivate() || cgnat.Contains(ip):
		return Private
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return Unspecified
	case ip.IsMulticast() || ip == broadcast:
		return Multicast
	}
	return Public
}

// embedded returns the IPv4 address inside an IPv4-mapped, NAT64 or 6to4
// IPv6 address, else ip.
func embedded(ip netip.Addr) netip.Addr {
	switch {
	case ip.Is4In6():
		return ip.Unmap()
	case nat64.Contains(ip), nat64Local.Contains(ip):
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[12:16]))
	case v4Compat.Contains(ip) && ip != netip.IPv6Unspecified() && ip != netip.IPv6Loopback():
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[12:16]))
	case sixToFour.Contains(ip):
		b := ip.As16()
		return netip.AddrFrom4([4]byte(b[2:6]))
	}
	return ip
}

// Policy says which addresses outside the public internet a connection
// may reach. The zero Policy allows public addresses alone. Unspecified,
// multicast and broadcast addresses are refused by every Policy.
type Policy struct {
	// AllowLoopback allows loopback addresses (127.0.0.0/8, ::1).
	AllowLoopback bool
	// AllowPrivate allows private networks (RFC 1918, fc00::/7,
	// 100.64.0.0/10), link-local addresses (169.254.0.0/16, fe80::/10)
	// and the cloud metadata services among them.
	AllowPrivate bool
}

// Allows reports whether the policy allows addresses of kind k.
func (p Policy) Allows(k Kind) bool {
	switch k {
	case Public:
		return true
	case Loopback:
		return p.AllowLoopback
	case Private, LinkLocal, Metadata:
		return p.AllowPrivate
	}
	return false
}

// Check returns a *BlockedError when p refuses ip, else nil.
func (p Policy) Check(ip netip.Addr) error {
	if k := Classify(ip); !p.Allows(k) {
		return &BlockedError{Addr: embedded(ip.WithZone("")), Kind: k}
	}
	return nil
}

// metadataNames are the names of cloud metadata services, refused by name
// before any lookup.
var metadataNames = []string{"metadata.google.internal", "metadata.goog", "metadata"}

// CheckHost refuses host, a URL's host name or literal address (without
// the port), when p refuses what it names: a literal address p refuses,
// the name of a cloud metadata service, or localhost. It does no lookup:
// any other name is checked at connect time (Control).
func (p Policy) CheckHost(host string) error {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if ip, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return p.Check(ip)
	}
	k := Public
	switch {
	case slices.Contains(metadataNames, name):
		k = Metadata
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		k = Loopback
	}
	if !p.Allows(k) {
		return &BlockedError{Host: name, Kind: k}
	}
	return nil
}

// Control is a net.Dialer Control function that refuses the addresses p
// refuses. The dialer calls it for each address it tries, after the name
// was resolved, with address as "ip:port".
func (p Policy) Control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return &BlockedError{Host: address, Kind: Invalid}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return &BlockedError{Host: host, Kind: Invalid}
	}
	return p.Check(ip)
}

// BlockedError is an address or name a Policy refused; it is ErrBlocked.
type BlockedError struct {
	// Addr is the refused address, if it was one (IPv4 for an IPv4
	// address inside IPv6).
	Addr netip.Addr
	// Host is the refused name, if it was one.
	Host string
	// Kind is what it is.
	Kind Kind
}

func (e *BlockedError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("%s is %s", e.Addr, e.Kind)
	}
	switch e.Kind {
	case Metadata:
		return fmt.Sprintf("%s is the name of a cloud metadata service", e.Host)
	case Loopback:
		return fmt.Sprintf("%s is the name of this host (loopback)", e.Host)
	}
	return fmt.Sprintf("%q is %s", e.Host, e.Kind)
}

// Is makes a BlockedError ErrBlocked.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }
