package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// Behind a TLS-terminating proxy: DISPATCH_PUBLIC_URL makes the console's
// cookie Secure, and DISPATCH_TRUSTED_PROXIES makes the sign-in throttle
// count the client the proxy names, not the proxy.
func TestConsoleBehindProxy(t *testing.T) {
	t.Parallel()
	in := start(t, "api", map[string]string{
		"DISPATCH_PUBLIC_URL":      "https://dispatch.example.com",
		"DISPATCH_TRUSTED_PROXIES": "127.0.0.1",
	})
	login := func(token, client string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", in.apiURL+"/api/console/login", strings.NewReader(`{"token":"`+token+`"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Forwarded-For", client)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for range 5 {
		if r := login("not-the-admin-token", "198.51.100.1"); r.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a wrong token: %d", r.StatusCode)
		}
	}
	if r := login(adminToken, "198.51.100.1"); r.StatusCode != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("the guesser's next sign-in: %d, Retry-After %q", r.StatusCode, r.Header.Get("Retry-After"))
	}
	r := login(adminToken, "198.51.100.2")
	if r.StatusCode != http.StatusOK {
		t.Fatalf("another client behind the same proxy: %d", r.StatusCode)
	}
	if c := r.Cookies(); len(c) != 1 || !c[0].Secure || !c[0].HttpOnly {
		t.Errorf("session cookie %+v, want Secure and HttpOnly", c)
	}
}
