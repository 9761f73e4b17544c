package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
)

type credentialsOut struct {
	ID             string   `json:"id"`
	AllowedTargets []string `json:"allowedTargets"`
	UpdatedAt      string   `json:"updatedAt"`
}

// countingReceiver counts the requests it gets and answers the
// verification handshake.
func countingReceiver(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		var m map[string]string
		_ = json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": m["challenge"]})
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

func (f *fixture) credentials(t *testing.T, targets ...string) credentialsOut {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"allowedTargets": targets})
	var c credentialsOut
	f.do(t, "POST", "/api/admin/dispatch/credentials", string(b)).want(t, http.StatusCreated).decode(t, &c)
	return c
}

func (f *fixture) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// PATCH /api/admin/dispatch/credentials/{id} replaces allowedTargets; a bad
// entry is a 400 that lists every bad entry, and changes nothing.
func TestPatchCredentialsAllowedTargets(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := f.credentials(t, "https://partner.example")
	path := "/api/admin/dispatch/credentials/" + c.ID

	fields := f.do(t, "PATCH", path, `{"allowedTargets":["https://ok.example","http://","https://a.example#x","https://u:p@a.example",7,"https://a.example/../b"]}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	if want := []string{"allowedTargets[1]", "allowedTargets[2]", "allowedTargets[3]", "allowedTargets[4]", "allowedTargets[5]"}; !slices.Equal(fields, want) {
		t.Errorf("details name %v, want %v", fields, want)
	}
	f.do(t, "PATCH", path, `{}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	f.do(t, "PATCH", path, `{"allowedTargets":"https://ok.example"}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	f.do(t, "PATCH", path, `{"allowedTargets":[],"bearerToken":"x"}`).errorCode(t, http.StatusBadRequest, dispatch.EInvalid)
	var got credentialsOut
	f.do(t, "GET", path, "").want(t, http.StatusOK).decode(t, &got)
	if !slices.Equal(got.AllowedTargets, []string{"https://partner.example"}) {
		t.Fatalf("after refused changes allowedTargets = %q", got.AllowedTargets)
	}

	var patched credentialsOut
	f.do(t, "PATCH", path, `{"allowedTargets":["https://Partner.example:443/Hooks/","http://127.0.0.1:8080","https://partner.example/Hooks/"]}`).
		want(t, http.StatusOK).decode(t, &patched)
	want := []string{"https://partner.example/Hooks/", "http://127.0.0.1:8080"}
	if !slices.Equal(patched.AllowedTargets, want) || patched.UpdatedAt == c.UpdatedAt {
		t.Errorf("patched = %+v, want allowedTargets %q and a new updatedAt", patched, want)
	}
	var list struct {
		Items []credentialsOut `json:"items"`
	}
	f.do(t, "GET", "/api/admin/dispatch/credentials", "").want(t, http.StatusOK).decode(t, &list)
	if len(list.Items) != 1 || !slices.Equal(list.Items[0].AllowedTargets, want) {
		t.Errorf("list = %+v", list.Items)
	}
	// The change applies at once (the cache was invalidated).
	f.do(t, "POST", "/api/dispatch/jobs", jobBody(t, "credentialsId", c.ID, "targetUrl", "https://partner.example/other")).
		errorCode(t, http.StatusUnprocessableEntity, dispatch.EUnprocessable)
	f.createJob(t, "credentialsId", c.ID, "targetUrl", "https://partner.example/Hooks/orders")

	f.do(t, "PATCH", path, `{"allowedTargets":[]}`).want(t, http.StatusOK).decode(t, &patched)
	if patched.AllowedTargets == nil || len(patched.AllowedTargets) != 0 {
		t.Errorf("cleared: allowedTargets = %#v, want []", patched.AllowedTargets)
	}
	f.do(t, "PATCH", "/api/admin/dispatch/credentials/987654321", `{"allowedTargets":[]}`).errorCode(t, http.StatusNotFound, dispatch.ENotFound)
	f.do(t, "PATCH", path, `{"allowedTargets":[]}`, bearer(apiToken)).errorCode(t, http.StatusUnauthorized, dispatch.EUnauthorized)
}

// A job, a batch, a replay, a subscription (create, change of url or of
// credentials) or a handshake whose target the credentials do not allow is
// refused with 422, says what to do, stores nothing and sends nothing.
func TestDisallowedTargetsAreRefusedWith422(t *testing.T) {
	t.Parallel()
	var f *fixture
	f = setup(t, withVerifier(func() *mediator.Verifier {
		sender := mediator.NewSender(mediator.SenderConfig{Timeout: 5 * time.Second, Guard: mediator.Guard{AllowPrivate: true}})
		return mediator.NewVerifier(f.store, sender, slog.New(slog.DiscardHandler))
	}))
	partner, partnerHits := countingReceiver(t)
	attacker, attackerHits := countingReceiver(t)
	c := f.credentials(t, partner+"/hooks")
	unbound := f.credentials(t)

	refused := func(what, method, path, body string) {
		t.Helper()
		r := f.do(t, method, path, body).want(t, http.StatusUnprocessableEntity)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		r.decode(t, &e)
		if e.Error.Code != dispatch.EUnprocessable || !strings.Contains(e.Error.Message, "allowedTargets") ||
			!strings.Contains(e.Error.Message, "PATCH /api/admin/dispatch/credentials/") {
			t.Errorf("%s: error %+v does not say what to do", what, e.Error)
		}
		// Which partners the credentials serve is for admins to read.
		if strings.Contains(e.Error.Message, attacker) && strings.Contains(e.Error.Message, partner) {
			t.Errorf("%s: error %q names the credentials' allowed targets", what, e.Error.Message)
		}
	}
	refused("job", "POST", "/api/dispatch/jobs", jobBody(t, "credentialsId", c.ID, "targetUrl", attacker+"/hooks"))
	refused("job past the prefix", "POST", "/api/dispatch/jobs", jobBody(t, "credentialsId", c.ID, "targetUrl", partner+"/hooksevil"))
	refused("job, unbound credentials", "POST", "/api/dispatch/jobs", jobBody(t, "credentialsId", unbound.ID, "targetUrl", partner+"/hooks"))
	refused("batch", "POST", "/api/dispatch/jobs/batch", `{"jobs":[`+jobBody(t, "credentialsId", c.ID, "targetUrl", partner+"/hooks/a")+`,`+
		jobBody(t, "credentialsId", c.ID, "targetUrl", attacker+"/hooks")+`]}`)
	// A batch refused for its credentials names the items invalid on their
	// own too: one answer, every problem.
	fields := f.do(t, "POST", "/api/dispatch/jobs/batch", `{"jobs":[`+jobBody(t, "source", "")+`,`+
		jobBody(t, "credentialsId", c.ID, "targetUrl", attacker+"/hooks")+`]}`).
		errorCode(t, http.StatusUnprocessableEntity, dispatch.EUnprocessable)
	if !slices.Contains(fields, "jobs[0].source") || !slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, "jobs[1]") }) {
		t.Errorf("a batch with an invalid item and one refused for its credentials names %v, want jobs[0].source and jobs[1]", fields)
	}
	refused("subscription", "POST", "/api/dispatch/subscriptions",
		`{"name":"x","url":"`+attacker+`/hooks","eventTypes":["*"],"credentialsId":"`+c.ID+`"}`)
	refused("subscription with a handshake", "POST", "/api/dispatch/subscriptions",
		`{"name":"x","url":"`+attacker+`/hooks","eventTypes":["*"],"credentialsId":"`+c.ID+`","verify":true}`)
	if n := f.count(t, "dispatch_job"); n != 0 {
		t.Errorf("%d jobs stored by refused requests", n)
	}
	if n := f.count(t, "dispatch_subscription"); n != 0 {
		t.Errorf("%d subscriptions stored by refused requests", n)
	}

	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"partner","url":"`+partner+`/hooks/in","eventTypes":["*"],"credentialsId":"`+c.ID+`"}`).
		want(t, http.StatusCreated).decode(t, &sub)
	refused("subscription url", "PATCH", "/api/dispatch/subscriptions/"+sub.ID, `{"url":"`+attacker+`/hooks/in"}`)
	refused("subscription credentials", "PATCH", "/api/dispatch/subscriptions/"+sub.ID, `{"credentialsId":"`+unbound.ID+`"}`)
	var got subscriptionOut
	f.do(t, "GET", "/api/dispatch/subscriptions/"+sub.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.URL != sub.URL {
		t.Errorf("a refused change was stored: url %s", got.URL)
	}

	j := f.createJob(t, "credentialsId", c.ID, "targetUrl", partner+"/hooks/orders")
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").want(t, http.StatusOK)
	f.do(t, "PATCH", "/api/admin/dispatch/credentials/"+c.ID, `{"allowedTargets":["https://partner.example"]}`).want(t, http.StatusOK)
	refused("replay", "POST", "/api/dispatch/jobs/"+j.ID+"/replay", "")
	refused("handshake", "POST", "/api/dispatch/subscriptions/"+sub.ID+"/verify", "")
	if n := f.count(t, "dispatch_job"); n != 1 {
		t.Errorf("%d jobs, want the one cancelled original", n)
	}
	if p, a := partnerHits.Load(), attackerHits.Load(); p != 0 || a != 0 {
		t.Errorf("receivers got %d (partner) and %d (attacker) requests, want none", p, a)
	}
}
