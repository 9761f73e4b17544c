package dispatch

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
)

// Credentials are bound to the targets an admin allows them for:
// their AllowedTargets, each an origin (https://partner.example, with the
// port when it is not the scheme's default) optionally followed by a path
// prefix (https://partner.example/hooks/). Credentials with none may be
// sent nowhere, so a service token cannot have a partner's bearer token
// and signatures sent to a host of its own (docs/decisions/credential-allowed-targets.md).

// MaxAllowedTargets bounds a credentials' allowedTargets list.
const MaxAllowedTargets = 50

// MaxCredentialsName bounds a credentials' name, in characters.
const MaxCredentialsName = 100

// CredentialsUsage is where credentials are used: by how many
// subscriptions, and by how many live jobs (PENDING, IN_PROGRESS,
// FAILED). LiveJobs is exact up to CountLimit and "at least" past it.
type CredentialsUsage struct {
	Subscriptions     int
	LiveJobs          int
	AlertDestinations int
}

// ParseAllowedTarget validates one allowedTargets entry and returns it
// normalised: scheme and host in lower case, the scheme's default port
// dropped, a trailing dot of the host dropped, an IP address in its
// canonical form, the path percent-encoded canonically ("/" alone is the
// whole origin). The error says what is wrong with it.
func ParseAllowedTarget(raw string) (string, error) {
	if raw == "" {
		return "", fmt.Errorf("must not be empty")
	}
	if len(raw) > MaxURLLen {
		return "", fmt.Errorf("must be at most %d characters", MaxURLLen)
	}
	if strings.ContainsAny(raw, "?#") {
		return "", fmt.Errorf("must not have a query or a fragment: an origin such as https://partner.example, optionally followed by a path prefix")
	}
	for _, r := range raw {
		if r <= ' ' || r == 0x7f {
			return "", fmt.Errorf("must not contain spaces or control characters")
		}
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Opaque != "" || !u.IsAbs():
		return "", fmt.Errorf("must be an absolute http(s) URL such as https://partner.example or https://partner.example/hooks/")
	case u.Scheme != "https" && u.Scheme != "http":
		return "", fmt.Errorf("must use https or http")
	case u.User != nil:
		return "", fmt.Errorf("must not carry a user name or password")
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("must name a host")
	}
	host, ok := canonicalHost(u.Hostname())
	if !ok {
		return "", fmt.Errorf("has an invalid host %q: letters, digits, '-' and '.' (internationalised names in their xn-- form), or an IP address", u.Hostname())
	}
	port, ok := targetPort(u)
	if !ok {
		return "", fmt.Errorf("must have a port from 1 to 65535")
	}
	if u.Path != "" && !strings.HasPrefix(u.Path, "/") {
		return "", fmt.Errorf("has an invalid path")
	}
	if !cleanPath(u) {
		return "", fmt.Errorf("must not have '.' or '..' path segments, encoded slashes or backslashes in its path")
	}
	path := (&url.URL{Path: u.Path}).EscapedPath()
	if path == "/" {
		path = ""
	}
	return origin(u.Scheme, host, port) + path, nil
}

// TargetAllowed reports whether target may be sent credentials bound to
// allowed (entries as ParseAllowedTarget returns them). It reads target as
// the sender does (url.Parse) and allows it when one entry has the same
// scheme, host and port, and a path prefix that target's path starts with
// at a segment boundary: "/hooks" allows "/hooks" and "/hooks/…" but not
// "/hooksevil"; "/hooks/" allows "/hooks/…". Hosts compare without case and
// trailing dot; paths compare decoded and with case. A target whose path
// has "." or ".." segments, encoded slashes or backslashes never matches a
// path prefix (a receiver may resolve them to outside it).
func TargetAllowed(allowed []string, target string) bool {
	if len(allowed) == 0 {
		return false
	}
	t, ok := parseTarget(target)
	if !ok {
		return false
	}
	for _, a := range allowed {
		e, ok := parseAllowed(a)
		if !ok || e.origin != t.origin {
			continue
		}
		if e.path == "" || e.path == "/" {
			return true
		}
		if !t.clean {
			continue
		}
		p := t.path
		if p == "" {
			p = "/"
		}
		if strings.HasSuffix(e.path, "/") {
			if strings.HasPrefix(p, e.path) {
				return true
			}
		} else if p == e.path || strings.HasPrefix(p, e.path+"/") {
			return true
		}
	}
	return false
}

// Allows reports whether c may be sent to target (see TargetAllowed).
func (c Credentials) Allows(target string) bool { return TargetAllowed(c.AllowedTargets, target) }

// CheckTarget returns nil when c may be sent to target, or an
// EUnprocessable *Error that says what an admin can do about it.
func (c Credentials) CheckTarget(target string) error {
	if c.Allows(target) {
		return nil
	}
	return c.targetError(target)
}

func (c Credentials) targetError(target string) *Error {
	id := FormatID(c.ID)
	if len(c.AllowedTargets) == 0 {
		return Errorf(EUnprocessable, "credentials %s have no allowedTargets, so they may be sent nowhere (not to %s): an admin can bind them to their receiver's origin (PATCH /api/admin/dispatch/credentials/%s with {\"allowedTargets\": [\"%s\"]})",
			id, ShowTarget(target), id, suggestOrigin(target))
	}
	// The targets they may be sent to are not named: whoever sees this
	// (any API token, a job's lastError) need not learn another team's
	// partners; an admin reads them with the credentials.
	return Errorf(EUnprocessable, "credentials %s may not be sent to %s (it is not among their allowedTargets): an admin can add its origin to the credentials' allowedTargets (PATCH /api/admin/dispatch/credentials/%s)",
		id, ShowTarget(target), id)
}

// ShowTarget renders a target URL for a message: scheme, host, port and
// path only (its query may hold tokens), at most 200 characters.
func ShowTarget(target string) string {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		return "an invalid URL"
	}
	s := u.Scheme + "://" + u.Host + u.EscapedPath()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// suggestOrigin is target's origin in allowedTargets' form, or a placeholder.
func suggestOrigin(target string) string {
	if t, ok := parseTarget(target); ok {
		return t.origin
	}
	return "https://partner.example"
}

// parsedTarget is a URL reduced to what matching compares.
type parsedTarget struct {
	origin string // scheme://host[:port], normalised
	path   string // decoded
	clean  bool   // no dot segments, encoded slashes or backslashes
}

// allowedParsed remembers allowedTargets entries parsed: every delivery with
// credentials checks its target against them, and they are few (an admin
// writes them), where targets are many. It stops growing at
// maxAllowedParsed entries; past that, entries are parsed each time.
var allowedParsed struct {
	sync.RWMutex
	m map[string]allowedEntry
}

type allowedEntry struct {
	t  parsedTarget
	ok bool
}

const maxAllowedParsed = 4096

// parseAllowed is parseTarget for an allowedTargets entry, remembered.
func parseAllowed(raw string) (parsedTarget, bool) {
	allowedParsed.RLock()
	e, found := allowedParsed.m[raw]
	allowedParsed.RUnlock()
	if found {
		return e.t, e.ok
	}
	e.t, e.ok = parseTarget(raw)
	allowedParsed.Lock()
	if allowedParsed.m == nil {
		allowedParsed.m = make(map[string]allowedEntry)
	}
	if len(allowedParsed.m) < maxAllowedParsed {
		allowedParsed.m[raw] = e
	}
	allowedParsed.Unlock()
	return e.t, e.ok
}

func parseTarget(raw string) (parsedTarget, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return parsedTarget{}, false
	}
	host, ok := canonicalHost(u.Hostname())
	if !ok {
		return parsedTarget{}, false
	}
	port, ok := targetPort(u)
	if !ok {
		return parsedTarget{}, false
	}
	return parsedTarget{origin: origin(u.Scheme, host, port), path: u.Path, clean: cleanPath(u)}, true
}

// canonicalHost lower-cases a host name and drops one trailing dot (the
// same DNS name), or renders an IP address canonically. Anything but
// ASCII letters, digits, '-', '_' and '.' between non-empty labels is refused.
func canonicalHost(h string) (string, bool) {
	if h == "" {
		return "", false
	}
	if strings.Contains(h, ":") { // an IPv6 literal (url.Parse took its brackets off)
		a, err := netip.ParseAddr(h)
		if err != nil || a.Zone() != "" {
			return "", false
		}
		return "[" + a.Unmap().String() + "]", true
	}
	h = strings.ToLower(strings.TrimSuffix(h, "."))
	if h == "" || len(h) > 253 {
		return "", false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", false
			}
		}
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String(), true
	}
	return h, true
}

// targetPort is u's port as a number, the scheme's default when absent.
func targetPort(u *url.URL) (int, bool) {
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, true
		}
		return 80, true
	}
	n, err := strconv.Atoi(p)
	return n, err == nil && n >= 1 && n <= 65535
}

func origin(scheme, host string, port int) string {
	if (scheme == "https" && port == 443) || (scheme == "http" && port == 80) {
		return scheme + "://" + host
	}
	return scheme + "://" + host + ":" + strconv.Itoa(port)
}

// cleanPath reports whether u's path holds nothing a receiver might resolve
// to another path: no "." or ".." segment (also percent-encoded, or with
// ";parameters" after it), no encoded slash and no backslash.
func cleanPath(u *url.URL) bool {
	esc := strings.ToLower(u.EscapedPath())
	if strings.Contains(esc, "%2f") || strings.Contains(esc, "%5c") || strings.Contains(u.Path, `\`) {
		return false
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}
