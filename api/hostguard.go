package api

import (
	"net"
	"net/netip"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/dispatchhq/dispatch"
)

// guardHost refuses, in insecure mode, a request whose Host names
// dispatch by a name other than localhost, a one-label name (a machine's or
// a compose service's) or DISPATCH_PUBLIC_URL's host; an IP address is
// always accepted. Insecure mode opens routes to whoever reaches the port,
// and a port on loopback is reached by any web page the developer opens
// through DNS rebinding: the attacker's name first resolves to the
// attacker, then to 127.0.0.1, and the page's scripts, now of the same
// origin, send their requests with that name as Host. A rebinding name is
// a domain the attacker holds, so it has a dot, and it is never an address
// (docs/decisions/insecure-mode-hosts.md).
func (s *Server) guardHost(c *gin.Context) {
	if hostAllowed(c.Request.Host, s.publicHost) {
		return
	}
	s.writeError(c, dispatch.Errorf(dispatch.EForbidden,
		"DISPATCH_INSECURE=true answers only requests for localhost, an IP address, a one-label name or DISPATCH_PUBLIC_URL's host, not %q (a guard against DNS rebinding)", c.Request.Host))
}

// hostAllowed reports whether hostport (a request's Host) is one that
// insecure mode answers; public is DISPATCH_PUBLIC_URL's host, lower case
// ("" when it is unset).
func hostAllowed(hostport, public string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: no browser sends it
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	switch {
	case host == "localhost", strings.HasSuffix(host, ".localhost"):
		return true
	case !strings.Contains(host, "."):
		return host != ""
	}
	return public != "" && host == public
}

// publicHost is raw's host name, lower case, without a trailing dot; ""
// when raw is empty or has none.
func publicHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
}
