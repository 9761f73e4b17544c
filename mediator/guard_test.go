package mediator_test

import (
	"net/netip"
	"testing"

	"github.com/dispatchhq/dispatch/mediator"
)

// These tests classify addresses as pure functions: no test ever dials a
// non-loopback address, even to check that the guard refuses it.

var forbiddenAddrs = []string{
	"10.0.0.1", "172.16.0.1", "192.168.1.1", // private
	"127.0.0.1", "127.1.2.3", "::1", // loopback
	"169.254.169.254",         // link-local: cloud metadata
	"100.100.100.200",         // Alibaba metadata, shared address space
	"fe80::1", "fe80::1%eth0", // link-local IPv6
	"fc00::1", "fd00:ec2::254", // unique local, AWS IMDS over IPv6
	"::ffff:127.0.0.1", "::ffff:169.254.169.254", "::ffff:10.0.0.1", // IPv4-mapped
	"0.0.0.0", "0.1.2.3", "::", // unspecified, "this network"
	"224.0.0.1", "239.255.255.250", "ff02::1", // multicast
	"255.255.255.255",    // broadcast
	"240.0.0.1",          // reserved
	"64:ff9b::a00:1",     // NAT64 embedding 10.0.0.1
	"64:ff9b::a9fe:a9fe", // NAT64 embedding 169.254.169.254
	"2002:a00:1::1",      // 6to4 embedding 10.0.0.1
	"2001:0:a00:1::1",    // Teredo
	"::a00:1",            // IPv4-compatible
	"198.18.0.1",         // benchmarking
	"192.0.0.170",        // IETF protocol assignments
}

var allowedAddrs = []string{
	"8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700::1111", "2001:4860:4860::8888",
	"::ffff:8.8.8.8", "172.32.0.1", "192.169.0.1", "100.128.0.1",
}

func TestForbidden(t *testing.T) {
	for _, s := range forbiddenAddrs {
		if !mediator.Forbidden(netip.MustParseAddr(s)) {
			t.Errorf("Forbidden(%s) = false", s)
		}
	}
	for _, s := range allowedAddrs {
		if mediator.Forbidden(netip.MustParseAddr(s)) {
			t.Errorf("Forbidden(%s) = true", s)
		}
	}
	if !mediator.Forbidden(netip.Addr{}) {
		t.Errorf("the zero Addr is allowed")
	}
}

func TestGuardAllows(t *testing.T) {
	strict := mediator.Guard{}
	open := mediator.Guard{AllowPrivate: true}
	for _, s := range forbiddenAddrs {
		a := netip.MustParseAddr(s)
		if strict.Allows(a) {
			t.Errorf("strict guard allows %s", s)
		}
		if !open.Allows(a) {
			t.Errorf("AllowPrivate guard refuses %s", s)
		}
	}
	for _, s := range allowedAddrs {
		if !strict.Allows(netip.MustParseAddr(s)) {
			t.Errorf("strict guard refuses public %s", s)
		}
	}
}

func TestGuardAllowList(t *testing.T) {
	g := mediator.Guard{Allowed: []netip.Prefix{
		netip.MustParsePrefix("10.20.0.0/16"),
		netip.MustParsePrefix("fd12:3456::/32"),
	}}
	tests := []struct {
		addr string
		want bool
	}{
		{"10.20.0.1", true},
		{"10.20.255.254", true},
		{"::ffff:10.20.0.1", true}, // mapped form of an allowed address
		{"10.21.0.1", false},
		{"10.0.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false},
		{"127.0.0.1", false},
		{"fd12:3456::1", true},
		{"fd12:3457::1", false},
		{"8.8.8.8", true},
	}
	for _, tt := range tests {
		if got := g.Allows(netip.MustParseAddr(tt.addr)); got != tt.want {
			t.Errorf("Allows(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
