package api

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/gin-gonic/gin"
)

// trustProxies makes gin believe X-Forwarded-For only from the configured
// proxies. gin's default trusts every peer, so any client could name the
// address it is seen from (and so step around the sign-in throttle).
func (s *Server) trustProxies(e *gin.Engine) {
	var list []string // nil: trust no one, ClientIP is the peer's address
	for _, p := range s.cfg.TrustedProxies {
		list = append(list, p.String())
	}
	if err := e.SetTrustedProxies(list); err != nil {
		// The prefixes came parsed; gin reparses their text. Trust no one
		// rather than everyone.
		s.log.Error("trusted proxies refused; trusting none", "err", err)
		_ = e.SetTrustedProxies(nil)
	}
}

// fromTrustedProxy reports whether the request's peer is a trusted proxy.
func (s *Server) fromTrustedProxy(r *http.Request) bool {
	if len(s.cfg.TrustedProxies) == 0 {
		return false
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap().WithZone("")
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// viaHTTPS reports whether the browser reached dispatch over https, so
// that the console's cookie may be Secure: TLS ends in this process,
// DISPATCH_PUBLIC_URL is https, or a trusted proxy says so in
// X-Forwarded-Proto (the first value: the scheme the client used). The
// header of anyone else is ignored.
func (s *Server) viaHTTPS(r *http.Request) bool {
	if r.TLS != nil || s.publicHTTPS {
		return true
	}
	if !s.fromTrustedProxy(r) {
		return false
	}
	first, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
	return strings.EqualFold(strings.TrimSpace(first), "https")
}

// isHTTPS reports whether raw is an https URL.
func isHTTPS(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && strings.EqualFold(u.Scheme, "https")
}
