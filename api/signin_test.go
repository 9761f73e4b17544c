package api_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch/api"
)

// loopback is the address the tests' requests come from.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// sessionCookieOf signs in and returns the session cookie the answer set.
func (f *fixture) sessionCookieOf(t *testing.T, opts ...reqOption) *http.Cookie {
	t.Helper()
	r := f.do(t, "POST", "/api/console/login", `{"token":"`+adminToken+`"}`, append([]reqOption{bearer("")}, opts...)...).want(t, http.StatusOK)
	cookies := (&http.Response{Header: r.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("login set cookies %v", cookies)
	}
	return cookies[0]
}

// The session cookie is Secure whenever the browser reached dispatch over
// https, also when a proxy in front ended TLS: DISPATCH_PUBLIC_URL says so,
// or a trusted proxy does in X-Forwarded-Proto. Anyone else's header is
// not believed.
func TestSessionCookieSecureBehindProxy(t *testing.T) {
	t.Parallel()
	https := header("X-Forwarded-Proto", "https")
	tests := []struct {
		name       string
		publicURL  string
		proxies    []netip.Prefix
		opts       []reqOption
		wantSecure bool
	}{
		{"plain http, nothing said", "", nil, nil, false},
		{"public URL https", "https://dispatch.example.com", nil, nil, true},
		{"public URL http", "http://dispatch.internal:8080", nil, nil, false},
		{"trusted proxy says https", "", loopback, []reqOption{https}, true},
		{"trusted proxy says https among several", "", loopback, []reqOption{header("X-Forwarded-Proto", "HTTPS, http")}, true},
		{"trusted proxy says http", "", loopback, []reqOption{header("X-Forwarded-Proto", "http")}, false},
		{"trusted proxy says nothing", "", loopback, nil, false},
		{"untrusted client says https", "", nil, []reqOption{https}, false},
		{"client outside the trusted proxies says https", "", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, []reqOption{https}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, withConfig(func(c *api.Config) { c.PublicURL, c.TrustedProxies = tt.publicURL, tt.proxies }))
			c := f.sessionCookieOf(t, tt.opts...)
			if c.Secure != tt.wantSecure {
				t.Errorf("session cookie Secure = %v, want %v", c.Secure, tt.wantSecure)
			}
			if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("session cookie %+v lost HttpOnly or SameSite=Strict", c)
			}
			// Signing out clears the cookie with the same attributes.
			csrf := f.csrfOf(t, c)
			r := f.do(t, "POST", "/api/console/logout", "", append([]reqOption{bearer(""), cookie(c), header("X-CSRF-Token", csrf)}, tt.opts...)...).want(t, http.StatusNoContent)
			cleared := (&http.Response{Header: r.header}).Cookies()
			if len(cleared) != 1 || cleared[0].Secure != tt.wantSecure || cleared[0].MaxAge >= 0 {
				t.Errorf("logout set %+v, want one expired cookie with Secure = %v", cleared, tt.wantSecure)
			}
		})
	}
}

// csrfOf reads the CSRF token of a signed-in session.
func (f *fixture) csrfOf(t *testing.T, c *http.Cookie) string {
	t.Helper()
	var s struct {
		CSRFToken string `json:"csrfToken"`
	}
	f.do(t, "GET", "/api/console/session", "", bearer(""), cookie(c)).want(t, http.StatusOK).decode(t, &s)
	return s.CSRFToken
}

// manualClock is a clock the test moves by hand.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func from(addr string) reqOption { return header("X-Forwarded-For", addr) }

// After MaxFailedSignIns wrong tokens from one address, every sign-in from
// it is refused with 429 and Retry-After until the window has passed, the
// right token included; other addresses sign in meanwhile.
func TestSignInThrottle(t *testing.T) {
	t.Parallel()
	clock := &manualClock{t: time.Now()}
	f := setup(t, withConfig(func(c *api.Config) { c.Now, c.TrustedProxies = clock.now, loopback }))
	login := func(token, addr string) response {
		return f.do(t, "POST", "/api/console/login", `{"token":"`+token+`"}`, bearer(""), from(addr))
	}
	const attacker, operator = "198.51.100.7", "2001:db8:1:2::10"

	for i := range api.MaxFailedSignIns {
		login("guess-"+strconv.Itoa(i), attacker).errorCode(t, http.StatusUnauthorized, "unauthorized")
	}
	clock.advance(time.Minute)
	for _, token := range []string{"guess-next", adminToken} {
		r := login(token, attacker)
		r.errorCode(t, http.StatusTooManyRequests, "too_many_requests")
		if got, want := r.header.Get("Retry-After"), strconv.Itoa(int((api.SignInWindow - time.Minute).Seconds())); got != want {
			t.Errorf("Retry-After = %q, want %q (the rest of the window)", got, want)
		}
	}
	// Another address is not held back, and its success does not free
	// the attacker's.
	login(adminToken, operator).want(t, http.StatusOK)
	login(adminToken, attacker).errorCode(t, http.StatusTooManyRequests, "too_many_requests")
	// Another address in the same IPv6 /64 is the same client.
	for i := range api.MaxFailedSignIns {
		login("guess-"+strconv.Itoa(i), "2001:db8:1:2::bad").errorCode(t, http.StatusUnauthorized, "unauthorized")
	}
	login(adminToken, "2001:db8:1:2::10").errorCode(t, http.StatusTooManyRequests, "too_many_requests")

	// When the window has passed, the right token signs in again.
	clock.advance(api.SignInWindow - time.Minute)
	login(adminToken, attacker).want(t, http.StatusOK)
	// A success forgets the failures before it.
	for i := range api.MaxFailedSignIns - 1 {
		login("guess-"+strconv.Itoa(i), attacker).errorCode(t, http.StatusUnauthorized, "unauthorized")
	}
	login(adminToken, attacker).want(t, http.StatusOK)
	for i := range api.MaxFailedSignIns {
		login("guess-"+strconv.Itoa(i), attacker).errorCode(t, http.StatusUnauthorized, "unauthorized")
	}
}

// Without trusted proxies, X-Forwarded-For is the client's own say and is
// ignored: a guesser cannot take a new address per attempt.
func TestSignInThrottleIgnoresUntrustedForwardedFor(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range api.MaxFailedSignIns {
		f.do(t, "POST", "/api/console/login", `{"token":"guess"}`, bearer(""), from("203.0.113."+strconv.Itoa(i+1))).
			errorCode(t, http.StatusUnauthorized, "unauthorized")
	}
	f.do(t, "POST", "/api/console/login", `{"token":"`+adminToken+`"}`, bearer(""), from("203.0.113.99")).
		errorCode(t, http.StatusTooManyRequests, "too_many_requests")
}

// replica serves the API over f's database a second time: another API
// replica behind the same load balancer.
func (f *fixture) replica(t *testing.T) *fixture {
	t.Helper()
	return f.replicaWith(t, api.Config{APITokens: []string{apiToken}, AdminToken: adminToken, InternalToken: internalToken})
}

// replicaWith serves the API over f's database with cfg: the same
// database after a restart with other settings.
func (f *fixture) replicaWith(t *testing.T, cfg api.Config) *fixture {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(api.New(f.store, nil, cfg, prometheus.NewRegistry()).Handler())
	t.Cleanup(srv.Close)
	other := *f
	other.url = srv.URL
	return &other
}

// A console session is every replica's: signed in on one, the console's
// requests that land on another are served, and a sign-out there ends the
// session everywhere. Sessions lived in each process, so without sticky
// routing the console was refused, and a sign-out on another replica left
// the session valid where it was made.
func TestAConsoleSessionIsEveryReplicasSession(t *testing.T) {
	t.Parallel()
	a := setup(t)
	b := a.replica(t)
	c := a.sessionCookieOf(t)
	b.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), cookie(c)).want(t, http.StatusOK)
	csrf := b.csrfOf(t, c)
	b.do(t, "POST", "/api/console/logout", "", bearer(""), cookie(c), header("X-CSRF-Token", csrf)).want(t, http.StatusNoContent)
	a.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), cookie(c)).want(t, http.StatusUnauthorized)
	a.do(t, "GET", "/api/console/session", "", bearer(""), cookie(c)).want(t, http.StatusUnauthorized)
}

// A session belongs to the admin token it was signed in with: once the
// token changes (rotated after a leak), or where insecure mode had none,
// its sessions no longer open anything, on any replica.
func TestAConsoleSessionEndsWithItsAdminToken(t *testing.T) {
	t.Parallel()
	a := setup(t)
	c := a.sessionCookieOf(t)
	rotated := a.replicaWith(t, api.Config{APITokens: []string{apiToken}, AdminToken: "a-new-admin-token", InternalToken: internalToken})
	rotated.do(t, "GET", "/api/admin/dispatch/credentials", "", bearer(""), cookie(c)).errorCode(t, http.StatusUnauthorized, "unauthorized")
	rotated.do(t, "GET", "/api/console/session", "", bearer(""), cookie(c)).want(t, http.StatusUnauthorized)

	open := a.replicaWith(t, api.Config{Insecure: true})
	r := open.do(t, "POST", "/api/console/login", `{"token":""}`, bearer("")).want(t, http.StatusOK)
	insecure := (&http.Response{Header: r.header}).Cookies()[0]
	a.do(t, "GET", "/api/admin/dispatch/credentials", "", bearer(""), cookie(insecure)).errorCode(t, http.StatusUnauthorized, "unauthorized")
	a.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), cookie(c)).want(t, http.StatusOK) // its own still works
}

// In insecure mode without an admin token anyone may sign in to the
// console. With API tokens set, that sign-in is refused, saying why (a
// session that opened those routes would be an open door; one that did
// not could show no job); and an insecure session made before the tokens
// were set opens only the routes that are open anyway.
func TestAnInsecureSessionDoesNotOpenRoutesWithTokens(t *testing.T) {
	t.Parallel()
	a := setup(t)
	open := a.replicaWith(t, api.Config{Insecure: true})
	r := open.do(t, "POST", "/api/console/login", `{"token":"anything"}`, bearer("")).want(t, http.StatusOK)
	c := (&http.Response{Header: r.header}).Cookies()[0]

	srv := a.replicaWith(t, api.Config{Insecure: true, APITokens: []string{apiToken}})
	srv.do(t, "POST", "/api/console/login", `{"token":"anything"}`, bearer("")).errorCode(t, http.StatusForbidden, "forbidden")
	srv.do(t, "GET", "/api/dispatch/jobs", "", bearer(""), cookie(c)).errorCode(t, http.StatusUnauthorized, "unauthorized")
	srv.do(t, "GET", "/api/dispatch/jobs", "", bearer(apiToken)).want(t, http.StatusOK)
	srv.do(t, "GET", "/api/admin/dispatch/credentials", "", bearer(""), cookie(c)).want(t, http.StatusOK) // no admin token: open
}
