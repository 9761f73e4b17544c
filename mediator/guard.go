package mediator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrBlockedTarget marks a refused target address (SSRF guard).
var ErrBlockedTarget = errors.New("target address is not allowed")

// Guard decides which addresses deliveries may connect to. It is checked in
// the dialer's Control hook, on the address actually dialed after DNS
// resolution, so DNS rebinding cannot get around it.
type Guard struct {
	// AllowPrivate allows every address (local use and tests).
	AllowPrivate bool
	// Allowed lists ranges allowed even though they are private.
	Allowed []netip.Prefix
}

// metadataRanges hold cloud metadata services outside the usual private
// ranges (AWS IPv6 IMDS, Alibaba's 100.100.100.200 in shared address space).
var blockedRanges = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT, incl. Alibaba metadata
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved
	netip.MustParsePrefix("fd00:ec2::/32"),  // AWS IMDS over IPv6 (inside ULA, listed for clarity)
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64: may embed a private IPv4
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("2002::/16"),      // 6to4: embeds an IPv4 address
	netip.MustParsePrefix("2001::/32"),      // Teredo: embeds an IPv4 address
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (deprecated)
	netip.MustParsePrefix("100::/64"),       // discard-only
}

// Forbidden reports whether an address is one deliveries must not reach:
// loopback, private, link-local (169.254.0.0/16: cloud metadata), multicast,
// unspecified, broadcast, and IPv4-mapped or -embedding forms of those.
func Forbidden(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast() ||
		a.IsUnspecified() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return true
	}
	if a.Is4() && a.As4()[0] == 0 { // 0.0.0.0/8 "this network"
		return true
	}
	for _, p := range blockedRanges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Allows reports whether the guard lets a connection to a through.
func (g Guard) Allows(a netip.Addr) bool {
	if g.AllowPrivate {
		return true
	}
	a = a.Unmap()
	for _, p := range g.Allowed {
		if p.Contains(a) {
			return true
		}
	}
	return !Forbidden(a)
}

// control is a net.Dialer Control hook enforcing the guard.
func (g Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse %q", ErrBlockedTarget, address)
	}
	if !g.Allows(ap.Addr()) {
		return fmt.Errorf("%w: %s is a private, loopback, link-local or reserved address", ErrBlockedTarget, ap.Addr())
	}
	return nil
}

// DialContext dials like net.Dialer but refuses forbidden addresses before
// any packet is sent.
func (g Guard) DialContext(d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dd := *d
	dd.Control = g.control
	return dd.DialContext
}
