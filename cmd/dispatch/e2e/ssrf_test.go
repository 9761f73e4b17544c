package e2e

// End-to-end tests of the SSRF guard. Network rule: every
// target here is on loopback (127.0.0.0/8 or ::1), so even a broken guard
// sends nothing off the machine. 10.x, 169.254.x and other ranges are
// covered by the classification tests in mediator/guard_test.go, never
// dialed.

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingServer is a target that counts the requests reaching it.
type countingServer struct {
	*httptest.Server
	hits atomic.Int64
}

// newCountingServer listens on addr ("127.0.0.1:0", "[::1]:0", ...) and
// answers with handle (nil: 200). It reports false when addr cannot be
// listened on.
func newCountingServer(t *testing.T, network, addr string, handle http.HandlerFunc) (*countingServer, bool) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		return nil, false
	}
	cs := &countingServer{}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.hits.Add(1)
		if handle != nil {
			handle(w, r)
		}
	}))
	cs.Listener.Close()
	cs.Listener = ln
	cs.Start()
	t.Cleanup(cs.Close)
	return cs, true
}

func (cs *countingServer) port() string {
	return strconv.Itoa(cs.Listener.Addr().(*net.TCPAddr).Port)
}

// guardedEnv runs the service as in production (private targets refused)
// except that http:// targets validate, so loopback test servers can be named.
func guardedEnv(extra map[string]string) map[string]string {
	env := map[string]string{"DISPATCH_ALLOW_PRIVATE_TARGETS": "", "DISPATCH_ALLOW_HTTP_TARGETS": "true"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// waitBlocked waits for a job's end and checks it ended ERROR after exactly
// one BLOCKED attempt, and that its message left the queue (no retry).
func waitBlocked(t *testing.T, in *instance, id string) {
	t.Helper()
	done := in.waitStatus(id, 20*time.Second, "ERROR", "COMPLETED")
	if done.Status != "ERROR" || done.AttemptCount != 1 || !strings.Contains(done.LastError, "blocked") {
		t.Errorf("job = %+v, want ERROR after 1 attempt with a lastError saying blocked", done)
	}
	at := in.attempts(id)
	if len(at) != 1 || at[0].Status != "BLOCKED" || at[0].ResponseCode != 0 {
		t.Errorf("attempts = %+v, want one BLOCKED attempt without a response", at)
	}
}

// TestPrivateTargetsAreBlocked: without DISPATCH_ALLOW_PRIVATE_TARGETS, jobs
// aimed at 127.0.0.1, at a hostname resolving to it, at its IPv4-mapped
// IPv6 form and at [::1] each end ERROR after one BLOCKED attempt, and no
// request reaches the target.
func TestPrivateTargetsAreBlocked(t *testing.T) {
	t.Parallel()
	in := start(t, "all", guardedEnv(nil))
	v4, _ := newCountingServer(t, "tcp4", "127.0.0.1:0", nil)
	v6, haveV6 := newCountingServer(t, "tcp6", "[::1]:0", nil)

	cases := []struct {
		name   string
		target func() string
		srv    *countingServer
	}{
		{"127.0.0.1", func() string { return v4.URL + "/hook" }, v4},
		{"localhost", func() string { return "http://localhost:" + v4.port() + "/hook" }, v4},
		{"IPv4-mapped ::ffff:127.0.0.1", func() string { return "http://[::ffff:127.0.0.1]:" + v4.port() + "/hook" }, v4},
		{"::1", func() string { return "http://[::1]:" + v6.port() + "/hook" }, v6},
	}
	t.Run("targets", func(t *testing.T) { // returns when its parallel subtests are done
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				if tc.srv == nil {
					t.Skip("no IPv6 loopback listener can be opened on [::1]")
				}
				j := in.createJob(jobBody(tc.target(), map[string]any{"maxRetries": 5}))
				waitBlocked(t, in, j.ID)
			})
		}
	})
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "a blocked job's message is still queued" })
	if n := v4.hits.Load(); n != 0 {
		t.Errorf("the 127.0.0.1 target got %d requests", n)
	}
	if haveV6 && v6.hits.Load() != 0 {
		t.Errorf("the [::1] target got %d requests", v6.hits.Load())
	}
}

// TestRedirectToPrivateAddressIsNotFollowed: 127.0.0.1 plays a public
// address (DISPATCH_ALLOWED_TARGET_CIDRS=127.0.0.1/32) and answers with a
// redirect to 127.0.0.2, which stays private. The job ends ERROR after one
// attempt, not retried, and 127.0.0.2 receives nothing.
func TestRedirectToPrivateAddressIsNotFollowed(t *testing.T) {
	t.Parallel()
	private, ok := newCountingServer(t, "tcp4", "127.0.0.2:0", nil)
	if !ok {
		t.Fatal("cannot listen on 127.0.0.2 (all of 127.0.0.0/8 should be loopback)")
	}
	public, _ := newCountingServer(t, "tcp4", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/redirect/")); err == nil {
			http.Redirect(w, r, private.URL+"/stolen", code)
		}
	})
	in := start(t, "all", guardedEnv(map[string]string{"DISPATCH_ALLOWED_TARGET_CIDRS": "127.0.0.1/32"}))

	// Control: the allow-listed address is reachable, so the setup is valid.
	ok200 := in.createJob(jobBody(public.URL+"/ok", nil))
	if done := in.waitStatus(ok200.ID, 20*time.Second, "COMPLETED", "ERROR"); done.Status != "COMPLETED" {
		t.Fatalf("a job to the allow-listed 127.0.0.1 = %+v, want COMPLETED", done)
	}

	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		j := in.createJob(jobBody(public.URL+"/redirect/"+strconv.Itoa(code), map[string]any{"maxRetries": 5}))
		done := in.waitStatus(j.ID, 20*time.Second, "ERROR", "COMPLETED")
		if done.Status != "ERROR" || done.AttemptCount != 1 || !strings.Contains(done.LastError, "redirects are not followed") {
			t.Errorf("%d: job = %+v, want ERROR after 1 attempt, saying redirects are not followed", code, done)
		}
		if at := in.attempts(j.ID); len(at) != 1 || at[0].ResponseCode != code {
			t.Errorf("%d: attempts = %+v, want one attempt answered %d", code, at, code)
		}
	}

	// The redirect's destination is outside the allow-list: aimed at
	// directly, it is blocked.
	direct := in.createJob(jobBody(private.URL+"/direct", nil))
	waitBlocked(t, in, direct.ID)

	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "a redirected job's message is still queued" })
	if n := private.hits.Load(); n != 0 {
		t.Errorf("127.0.0.2 received %d requests", n)
	}
	if n := public.hits.Load(); n != 6 {
		t.Errorf("127.0.0.1 received %d requests, want 6 (one per job, no retries)", n)
	}
}
