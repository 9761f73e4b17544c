package dispatch_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

func TestParseAllowedTarget(t *testing.T) {
	valid := []struct{ in, want string }{
		{"https://partner.example", "https://partner.example"},
		{"https://partner.example/", "https://partner.example"},
		{"HTTPS://Partner.EXAMPLE", "https://partner.example"},
		{"https://partner.example:443", "https://partner.example"},
		{"http://partner.example:80/", "http://partner.example"},
		{"https://partner.example:8443", "https://partner.example:8443"},
		{"https://partner.example:08443", "https://partner.example:8443"},
		{"http://partner.example:443", "http://partner.example:443"},
		{"https://partner.example.", "https://partner.example"},
		{"https://partner.example/hooks/", "https://partner.example/hooks/"},
		{"https://partner.example/hooks", "https://partner.example/hooks"},
		{"https://partner.example/%68ooks/", "https://partner.example/hooks/"},
		{"https://partner.example/my%20hooks", "https://partner.example/my%20hooks"},
		{"https://partner.example/Hooks", "https://partner.example/Hooks"}, // paths keep their case
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"https://[2001:DB8:0::1]:8443/h", "https://[2001:db8::1]:8443/h"},
		{"https://xn--prtner-wxa.example", "https://xn--prtner-wxa.example"},
	}
	for _, c := range valid {
		got, err := dispatch.ParseAllowedTarget(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseAllowedTarget(%q) = %q, %v; want %q", c.in, got, err, c.want)
			continue
		}
		if again, err := dispatch.ParseAllowedTarget(got); err != nil || again != got {
			t.Errorf("ParseAllowedTarget(%q) = %q, %v; a normalised entry must stay as it is", got, again, err)
		}
	}
	invalid := []string{
		"", "partner.example", "//partner.example", "/hooks", "ftp://partner.example", "javascript:alert(1)",
		"https:partner.example", "https://", "https://:443", "https://partner.example?x=1", "https://partner.example/?",
		"https://partner.example#f", "https://partner.example/#", "https://user@partner.example",
		"https://user:pw@partner.example", "https://partner.example@evil.test", "https://partner.example:0",
		"https://partner.example:65536", "https://partner.example:x", "https://partner..example", "https://.partner.example",
		"https://partner.example..", "https://pärtner.example", "https://*.partner.example", "https://partner.example/../admin",
		"https://partner.example/hooks/..", "https://partner.example/hooks/%2e%2e/admin", "https://partner.example/a%2fb",
		"https://partner.example/a%5Cb", "https://partner.example/ hooks", "https://partner.example/\x00",
		"https://[fe80::1%25eth0]", " https://partner.example", "https://partner.example\\evil.test",
		"https://" + strings.Repeat("a", dispatch.MaxURLLen),
	}
	for _, in := range invalid {
		if got, err := dispatch.ParseAllowedTarget(in); err == nil {
			t.Errorf("ParseAllowedTarget(%q) = %q; want an error", in, got)
		}
	}
}

func TestTargetAllowed(t *testing.T) {
	cases := []struct {
		name    string
		allowed []string
		target  string
		want    bool
	}{
		{"no entries: nowhere", nil, "https://partner.example/h", false},
		{"same origin", []string{"https://partner.example"}, "https://partner.example/hooks/orders", true},
		{"origin, no path", []string{"https://partner.example"}, "https://partner.example", true},
		{"origin, query", []string{"https://partner.example"}, "https://partner.example/h?token=x", true},
		{"another host", []string{"https://partner.example"}, "https://evil.test/h", false},
		{"a subdomain", []string{"https://partner.example"}, "https://a.partner.example/h", false},
		{"a parent domain", []string{"https://a.partner.example"}, "https://partner.example/h", false},
		{"host as a prefix", []string{"https://partner.example"}, "https://partner.example.evil.test/h", false},
		{"host as a suffix", []string{"https://partner.example"}, "https://evilpartner.example/h", false},
		{"userinfo looks like the host", []string{"https://partner.example"}, "https://partner.example@evil.test/h", false},
		{"userinfo on the right host", []string{"https://partner.example"}, "https://user:pw@partner.example/h", false},
		{"http, not https", []string{"https://partner.example"}, "http://partner.example/h", false},
		{"https, not http", []string{"http://partner.example"}, "https://partner.example/h", false},
		{"another port", []string{"https://partner.example"}, "https://partner.example:8443/h", false},
		{"default port written out", []string{"https://partner.example"}, "https://partner.example:443/h", true},
		{"default port with a zero", []string{"https://partner.example"}, "https://partner.example:0443/h", true},
		{"empty port", []string{"https://partner.example"}, "https://partner.example:/h", true},
		{"port entry, default target", []string{"https://partner.example:8443"}, "https://partner.example/h", false},
		{"port entry, same port", []string{"https://partner.example:8443"}, "https://partner.example:8443/h", true},
		{"http's port 443", []string{"https://partner.example"}, "http://partner.example:443/h", false},
		{"host case", []string{"https://partner.example"}, "https://PARTNER.Example/h", true},
		{"scheme case", []string{"https://partner.example"}, "HTTPS://partner.example/h", true},
		{"trailing dot on the target", []string{"https://partner.example"}, "https://partner.example./h", true},
		{"two trailing dots", []string{"https://partner.example"}, "https://partner.example../h", false},
		{"path prefix", []string{"https://partner.example/hooks"}, "https://partner.example/hooks/orders", true},
		{"path prefix exactly", []string{"https://partner.example/hooks"}, "https://partner.example/hooks", true},
		{"path prefix is not a string prefix", []string{"https://partner.example/hooks"}, "https://partner.example/hooksevil", false},
		{"slash prefix, bare", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks", false},
		{"slash prefix, below", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks/a", true},
		{"slash prefix, not a segment", []string{"https://partner.example/hooks/"}, "https://partner.example/hooksevil/a", false},
		{"another path", []string{"https://partner.example/hooks"}, "https://partner.example/admin", false},
		{"root path", []string{"https://partner.example/hooks"}, "https://partner.example", false},
		{"path case", []string{"https://partner.example/hooks"}, "https://partner.example/HOOKS/a", false},
		{"dot-dot out of the prefix", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks/../admin", false},
		{"dot-dot at the end", []string{"https://partner.example/hooks"}, "https://partner.example/hooks/..", false},
		{"dot segment", []string{"https://partner.example/hooks"}, "https://partner.example/hooks/./a", false},
		{"encoded dot-dot", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks/%2e%2e/admin", false},
		{"encoded dot-dot, upper case", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks/%2E%2E/admin", false},
		{"dot-dot with a parameter", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks/..;/admin", false},
		{"encoded slash", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks%2f..%2fadmin", false},
		{"encoded backslash", []string{"https://partner.example/hooks/"}, "https://partner.example/hooks/..%5cadmin", false},
		{"dot-dot, origin entry", []string{"https://partner.example"}, "https://partner.example/a/../b", true},
		{"percent-encoded letters", []string{"https://partner.example/hooks"}, "https://partner.example/%68ooks/a", true},
		{"percent-encoded prefix entry", []string{"https://partner.example/my%20hooks/"}, "https://partner.example/my%20hooks/a", true},
		{"percent-encoded host", []string{"https://partner.example"}, "https://partner%2eexample/h", false},
		{"second entry", []string{"https://a.example", "https://partner.example/hooks/"}, "https://partner.example/hooks/x", true},
		{"IPv4", []string{"http://127.0.0.1:8080"}, "http://127.0.0.1:8080/h", true},
		{"IPv4, another port", []string{"http://127.0.0.1:8080"}, "http://127.0.0.1:8081/h", false},
		{"IPv4, as localhost", []string{"http://127.0.0.1:8080"}, "http://localhost:8080/h", false},
		{"IPv6 spelled another way", []string{"https://[2001:db8::1]"}, "https://[2001:DB8:0:0::1]/h", true},
		{"IPv6 with a zone", []string{"https://[fe80::1]"}, "https://[fe80::1%25eth0]/h", false},
		{"not a URL", []string{"https://partner.example"}, "://partner.example", false},
		{"opaque", []string{"https://partner.example"}, "https:partner.example", false},
		{"another scheme", []string{"https://partner.example"}, "ftp://partner.example/h", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := dispatch.TargetAllowed(c.allowed, c.target); got != c.want {
				t.Errorf("TargetAllowed(%q, %q) = %v, want %v", c.allowed, c.target, got, c.want)
			}
		})
	}
}

// CheckTarget's refusal is a 422 that names the credentials, the target
// without its query (it may hold tokens) and what an admin can do.
func TestCredentialsCheckTarget(t *testing.T) {
	c := dispatch.Credentials{ID: 123, AllowedTargets: []string{"https://partner.example/hooks/"}}
	if err := c.CheckTarget("https://partner.example/hooks/a"); err != nil {
		t.Fatalf("allowed target refused: %v", err)
	}
	err := c.CheckTarget("https://evil.test/x?token=s3cret")
	if dispatch.ErrorCode(err) != dispatch.EUnprocessable {
		t.Fatalf("code %q, want %q (%v)", dispatch.ErrorCode(err), dispatch.EUnprocessable, err)
	}
	for _, want := range []string{"credentials 123", "https://evil.test/x", "allowedTargets", "PATCH /api/admin/dispatch/credentials/123"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("message %q shows the target's query", err)
	}
	unbound := dispatch.Credentials{ID: 7}
	err = unbound.CheckTarget("http://127.0.0.1:9/h")
	if dispatch.ErrorCode(err) != dispatch.EUnprocessable || !strings.Contains(err.Error(), "no allowedTargets") ||
		!strings.Contains(err.Error(), `"http://127.0.0.1:9"`) {
		t.Errorf("unbound credentials: %v", err)
	}
}

// FuzzTargetAllowed: a normalised entry stays as it is and allows its own
// URL, and whatever an entry allows is sent to the entry's scheme, host and
// port as the sender reads the target.
func FuzzTargetAllowed(f *testing.F) {
	for _, s := range [][2]string{
		{"https://partner.example", "https://partner.example/h"},
		{"https://partner.example/hooks", "https://partner.example/hooksevil"},
		{"http://127.0.0.1:8080/a/", "http://127.0.0.1:8080/a/../b"},
		{"https://partner.example", "https://partner.example@evil.test/"},
		{"https://[::1]:8443", "https://[::1]:8443/x"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, entry, target string) {
		n, err := dispatch.ParseAllowedTarget(entry)
		if err != nil {
			return
		}
		if again, err := dispatch.ParseAllowedTarget(n); err != nil || again != n {
			t.Fatalf("%q normalised to %q, which normalises to %q, %v", entry, n, again, err)
		}
		if !dispatch.TargetAllowed([]string{n}, n) {
			t.Fatalf("%q does not allow itself", n)
		}
		if !dispatch.TargetAllowed([]string{n}, target) {
			return
		}
		e, _ := url.Parse(n)
		u, err := url.Parse(target)
		if err != nil || u.User != nil || !strings.EqualFold(u.Scheme, e.Scheme) ||
			!strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), e.Hostname()) && !strings.Contains(e.Hostname(), ":") {
			t.Fatalf("%q allows %q", n, target)
		}
	})
}
