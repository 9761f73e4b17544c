package e2e

// End-to-end test of credentials bound to their targets: a
// holder of an ordinary API token cannot make dispatch send a partner's
// bearer token and signatures anywhere but where an admin allowed them.

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// errorJSON is the API's error answer.
type errorJSON struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func TestCredentialsReachOnlyTheirAllowedTargets(t *testing.T) {
	t.Parallel()
	// A long delivery timeout: the first delivery below is held open by
	// its receiver until the test lets it go.
	in := start(t, "all", map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "20s", "DISPATCH_SHUTDOWN_TIMEOUT": "25s"})
	release := make(chan struct{})
	var releaseOnce sync.Once
	partner := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
		if n == 1 {
			<-release
		}
		return http.StatusOK
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	attacker := newReceiver(t, nil)
	const bearer = "bt_partner_only_5c2e9a7d"
	cred, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": bearer, "allowedTargets": []string{partner.URL + "/hooks"}}, http.StatusCreated)
	unbound, _ := adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": bearer + "_unbound"}, http.StatusCreated)

	refused := func(what, path string, body map[string]any, credID string) {
		t.Helper()
		var e errorJSON
		if code := in.do("POST", path, apiToken, body, &e); code != http.StatusUnprocessableEntity {
			t.Errorf("%s: status %d (%+v), want 422", what, code, e)
			return
		}
		if e.Error.Code != "unprocessable" || !strings.Contains(e.Error.Message, "credentials "+credID) ||
			!strings.Contains(e.Error.Message, "PATCH /api/admin/dispatch/credentials/"+credID) {
			t.Errorf("%s: %+v does not say which credentials, nor what an admin can do", what, e.Error)
		}
	}
	sub := func(url, credID string, verify bool) map[string]any {
		return map[string]any{"name": "s", "url": url, "eventTypes": []string{"*"}, "credentialsId": credID, "verify": verify}
	}

	// (a) A job to a receiver the credentials are not bound to.
	refused("job to another receiver", "/api/dispatch/jobs", jobBody(attacker.URL+"/hooks", map[string]any{"credentialsId": cred.ID}), cred.ID)
	refused("job outside the path prefix", "/api/dispatch/jobs", jobBody(partner.URL+"/hooksevil", map[string]any{"credentialsId": cred.ID}), cred.ID)
	refused("job through a dot-dot path", "/api/dispatch/jobs", jobBody(partner.URL+"/hooks/../admin", map[string]any{"credentialsId": cred.ID}), cred.ID)
	refused("batch with one such job", "/api/dispatch/jobs/batch", map[string]any{"jobs": []any{
		jobBody(partner.URL+"/hooks/ok", map[string]any{"credentialsId": cred.ID}),
		jobBody(attacker.URL+"/hooks", map[string]any{"credentialsId": cred.ID})}}, cred.ID)
	// (b) A subscription, and its verification handshake, likewise.
	refused("subscription", "/api/dispatch/subscriptions", sub(attacker.URL+"/hooks", cred.ID, false), cred.ID)
	refused("subscription with a handshake", "/api/dispatch/subscriptions", sub(attacker.URL+"/hooks", cred.ID, true), cred.ID)
	// (c) Credentials bound to nothing go nowhere.
	refused("job with unbound credentials", "/api/dispatch/jobs", jobBody(partner.URL+"/hooks", map[string]any{"credentialsId": unbound.ID}), unbound.ID)
	refused("subscription with unbound credentials", "/api/dispatch/subscriptions", sub(partner.URL+"/hooks", unbound.ID, true), unbound.ID)

	var page struct {
		TotalItems int `json:"totalItems"`
	}
	for _, path := range []string{"/api/dispatch/jobs", "/api/dispatch/subscriptions"} {
		if in.do("GET", path, apiToken, nil, &page); page.TotalItems != 0 {
			t.Errorf("%s: %d stored by refused requests", path, page.TotalItems)
		}
	}

	// (d) An admin narrows the credentials while a job for the old target
	// waits: it ends ERROR, unsent. The job ahead of it in its group is
	// held by the receiver until the narrowing is done.
	first := in.createJob(jobBody(partner.URL+"/hooks/a", map[string]any{"credentialsId": cred.ID, "groupId": "partner-g"}))
	eventually(t, 30*time.Second, func() bool { return partner.count() == 1 }, func() string { return "the first job was not delivered" })
	waiting := in.createJob(jobBody(partner.URL+"/hooks/b", map[string]any{"credentialsId": cred.ID, "groupId": "partner-g"}))
	subscribed := in.subscribe(sub(partner.URL+"/hooks/events", cred.ID, false))
	adminCall(t, in, "PATCH", "/api/admin/dispatch/credentials/"+cred.ID,
		map[string]any{"allowedTargets": []string{"https://partner.example"}}, http.StatusOK)
	releaseOnce.Do(func() { close(release) })
	in.waitStatus(first.ID, 30*time.Second, "COMPLETED")
	done := in.waitStatus(waiting.ID, 30*time.Second, "COMPLETED", "ERROR")
	if done.Status != "ERROR" || !strings.Contains(done.LastError, "allowedTargets") || !strings.Contains(done.LastError, "credentials "+cred.ID) {
		t.Errorf("the waiting job = %+v, want ERROR with a lastError about the credentials' allowedTargets", done)
	}
	if as := in.attempts(waiting.ID); len(as) != 1 || as[0].Status != "BLOCKED" || as[0].ResponseCode != 0 {
		t.Errorf("attempts of the waiting job = %+v, want one BLOCKED without a response", as)
	}
	// An event for the subscription made before the narrowing: its job
	// ends ERROR, unsent, too.
	e := in.publish(map[string]any{"source": "shop", "type": "order.created", "data": map[string]any{"orderId": "o-1"}}, http.StatusCreated)
	if len(e.Jobs) != 1 || e.Jobs[0].SubscriptionID != subscribed.ID {
		t.Fatalf("event jobs = %+v, want one for subscription %s", e.Jobs, subscribed.ID)
	}
	if j := in.waitStatus(e.Jobs[0].ID, 30*time.Second, "COMPLETED", "ERROR"); j.Status != "ERROR" {
		t.Errorf("the event's job = %+v, want ERROR", j)
	}

	// The bearer token and signatures went only to the allowed target,
	// only while it was allowed.
	if n := attacker.count(); n != 0 {
		t.Errorf("the other receiver got %d requests", n)
	}
	got := partner.snapshot()
	if len(got) != 1 || got[0].header.Get("X-Dispatch-Job-Id") != first.ID || got[0].header.Get("Authorization") != "Bearer "+bearer {
		t.Errorf("the partner got %d requests, want only the first job's, signed", len(got))
	}
}
