package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/store"
)

// unknownCredentials is an id no credentials have.
const unknownCredentials = "987654321"

// wantFields fails unless fields (sorted) are want (sorted).
func wantFields(t *testing.T, what string, fields []string, want ...string) {
	t.Helper()
	fields, want = slices.Clone(fields), slices.Clone(want)
	slices.Sort(fields)
	slices.Sort(want)
	if !slices.Equal(fields, want) {
		t.Errorf("%s: the refusal names %v, want %v", what, fields, want)
	}
}

// A body with a bad field and credentials that do not exist is refused
// once, naming both, and stores nothing: the credentials were named only by
// a second refusal, once the first problem was mended. A job, a
// subscription (create and change), an alert destination, a batch's item.
func TestUnknownCredentialsAreNamedWithTheOtherBadFields(t *testing.T) {
	t.Parallel()
	f := setup(t)

	r := f.do(t, "POST", "/api/dispatch/jobs", `{"source":"s","type":"t","targetUrl":"ftp://x","payload":"","credentialsId":"`+unknownCredentials+`"}`)
	wantFields(t, "job", r.errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "targetUrl", "credentialsId")
	var e apiError
	r.decode(t, &e)
	for _, d := range e.Error.Details {
		if d.Field == "credentialsId" && d.Message != "credentials "+unknownCredentials+" do not exist" {
			t.Errorf("credentialsId: %q, want that they do not exist", d.Message)
		}
	}
	// As a number too; credentials that exist are not named.
	c := f.credentials(t, "https://example.com")
	wantFields(t, "job, credentialsId a number", f.do(t, "POST", "/api/dispatch/jobs",
		`{"source":"s","type":"t","targetUrl":"ftp://x","payload":"","credentialsId":`+unknownCredentials+`}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "targetUrl", "credentialsId")
	wantFields(t, "job, credentialsId not an id", f.do(t, "POST", "/api/dispatch/jobs", jobBody(t, "targetUrl", "ftp://x", "credentialsId", -3)).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "targetUrl", "credentialsId")
	wantFields(t, "job, credentials that exist", f.do(t, "POST", "/api/dispatch/jobs", jobBody(t, "targetUrl", "ftp://x", "credentialsId", c.ID)).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "targetUrl")

	wantFields(t, "subscription", f.do(t, "POST", "/api/dispatch/subscriptions",
		`{"name":"n","url":"ftp://x","eventTypes":["*"],"credentialsId":"`+unknownCredentials+`"}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "url", "credentialsId")
	var sub subscriptionOut
	f.do(t, "POST", "/api/dispatch/subscriptions", `{"name":"n","url":"https://example.com/in","eventTypes":["*"]}`).
		want(t, http.StatusCreated).decode(t, &sub)
	wantFields(t, "subscription change", f.do(t, "PATCH", "/api/dispatch/subscriptions/"+sub.ID,
		`{"url":"ftp://x","credentialsId":"`+unknownCredentials+`"}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "url", "credentialsId")
	var got subscriptionOut
	f.do(t, "GET", "/api/dispatch/subscriptions/"+sub.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.URL != sub.URL {
		t.Errorf("a refused change was stored: url %s", got.URL)
	}

	wantFields(t, "alert destination", f.do(t, "POST", "/api/admin/dispatch/alerts/destinations",
		`{"name":"ops","kind":"webhook","url":"ftp://x","credentialsId":"`+unknownCredentials+`"}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "url", "credentialsId")

	// A batch's item refused on its own names its unknown credentials; the
	// valid items are created, as in any batch.
	var out struct {
		Results []struct {
			Status int `json:"status"`
			Error  struct {
				Details []struct {
					Field string `json:"field"`
				} `json:"details"`
			} `json:"error"`
		} `json:"results"`
	}
	f.do(t, "POST", "/api/dispatch/jobs/batch", `{"jobs":[`+jobBody(t, "targetUrl", "ftp://x", "credentialsId", unknownCredentials)+`,`+jobBody(t)+`]}`).
		want(t, http.StatusOK).decode(t, &out)
	if len(out.Results) != 2 || out.Results[0].Status != http.StatusBadRequest || out.Results[1].Status != http.StatusCreated {
		t.Fatalf("batch results %+v, want 400 and 201", out.Results)
	}
	var fields []string
	for _, d := range out.Results[0].Error.Details {
		fields = append(fields, d.Field)
	}
	wantFields(t, "batch item", fields, "targetUrl", "credentialsId")
	// Refused whole for a valid item's unknown credentials, the batch names
	// the invalid item's too.
	wantFields(t, "batch refused", f.do(t, "POST", "/api/dispatch/jobs/batch",
		`{"jobs":[`+jobBody(t, "targetUrl", "ftp://x", "credentialsId", unknownCredentials)+`,`+jobBody(t, "credentialsId", unknownCredentials)+`]}`).
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "jobs[0].targetUrl", "jobs[0].credentialsId", "jobs[1].credentialsId")

	if n := f.count(t, "dispatch_job"); n != 1 {
		t.Errorf("%d jobs, want the batch's one valid item", n)
	}
	if n := f.count(t, "dispatch_subscription"); n != 1 {
		t.Errorf("%d subscriptions, want the one created", n)
	}
	if n := f.count(t, "dispatch_alert_destination"); n != 0 {
		t.Errorf("%d alert destinations stored by refused creates", n)
	}
}

// A retry of a stored create is still answered with its job (200) when its
// body no longer passes and names credentials deleted since: the key is
// looked up first.
func TestARetryWhoseCredentialsWereDeletedIsAnsweredWithItsJob(t *testing.T) {
	t.Parallel()
	clock := &manualClock{t: time.Now()}
	f := setup(t, withConfig(func(c *api.Config) { c.Now = clock.now }))
	c := f.credentials(t, "https://example.com")
	body := jobBody(t, "idempotencyKey", "order-9-created", "credentialsId", c.ID,
		"expiresAt", clock.now().Add(time.Minute).UTC().Format(time.RFC3339Nano))
	var first, again job
	f.do(t, "POST", "/api/dispatch/jobs", body).want(t, http.StatusCreated).decode(t, &first)
	clock.advance(2 * time.Minute) // past its expiresAt
	f.do(t, "DELETE", "/api/admin/dispatch/credentials/"+c.ID, "").want(t, http.StatusNoContent)
	f.do(t, "POST", "/api/dispatch/jobs", body).want(t, http.StatusOK).decode(t, &again)
	if again.ID != first.ID {
		t.Errorf("the retry answered job %s, want %s", again.ID, first.ID)
	}
	fresh := strings.Replace(body, "order-9-created", "never-stored", 1)
	wantFields(t, "a new key", f.do(t, "POST", "/api/dispatch/jobs", fresh).errorCode(t, http.StatusBadRequest, dispatch.EInvalid),
		"expiresAt", "credentialsId")
}

// Replaying a job whose credentials were deleted is refused for what the
// job refers to (422), as the redrive reports it: the request named no
// credentials, so a 400 naming credentialsId pointed at nothing the caller
// sent.
func TestReplayOfAJobWhoseCredentialsWereDeletedIs422(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := f.credentials(t, "https://example.com")
	j := f.createJob(t, "credentialsId", c.ID)
	f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/cancel", "").want(t, http.StatusOK)
	f.do(t, "DELETE", "/api/admin/dispatch/credentials/"+c.ID, "").want(t, http.StatusNoContent)

	r := f.do(t, "POST", "/api/dispatch/jobs/"+j.ID+"/replay", "")
	if fields := r.errorCode(t, http.StatusUnprocessableEntity, dispatch.EUnprocessable); len(fields) != 0 {
		t.Errorf("the refusal names fields %v; the request sent none", fields)
	}
	var e apiError
	r.decode(t, &e)
	if want := "job " + j.ID + " cannot be replayed: its credentials " + c.ID + " were deleted"; e.Error.Message != want {
		t.Errorf("message %q, want %q", e.Error.Message, want)
	}
	if n := f.countJobs(t); n != 1 {
		t.Errorf("%d jobs after a refused replay, want the original", n)
	}
}

// The answers the OpenAPI document lists are the ones the routes give
// (f.do fails on any other): a rotation past the old secrets kept is a
// 409, and a webhook alert destination its credentials may not be sent to
// a 422; the destination's body is limited as any other.
func TestRotationAndAlertDestinationRefusalsAreDocumented(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := f.credentials(t, "https://ops.example/hooks")
	rotate := "/api/admin/dispatch/credentials/" + c.ID + "/rotate"
	for range store.MaxPreviousSecrets {
		f.do(t, "POST", rotate, `{"gracePeriod":"1h"}`).want(t, http.StatusOK)
	}
	var e apiError
	f.do(t, "POST", rotate, `{"gracePeriod":"1h"}`).want(t, http.StatusConflict).decode(t, &e)
	if e.Error.Code != dispatch.EConflict || !strings.Contains(e.Error.Message, "gracePeriod 0s") {
		t.Errorf("the 11th rotation: %+v, want a conflict that says what to do", e.Error)
	}
	f.do(t, "POST", rotate, `{"gracePeriod":"0s"}`).want(t, http.StatusOK)

	const dests = "/api/admin/dispatch/alerts/destinations"
	e = apiError{}
	f.do(t, "POST", dests, `{"name":"ops","kind":"webhook","url":"https://elsewhere.example/alerts","credentialsId":"`+c.ID+`"}`).
		want(t, http.StatusUnprocessableEntity).decode(t, &e)
	if e.Error.Code != dispatch.EUnprocessable || !strings.Contains(e.Error.Message, "allowedTargets") {
		t.Errorf("a destination its credentials may not be sent to: %+v, want a 422 naming allowedTargets", e.Error)
	}
	f.do(t, "POST", dests, `{"name":"ops","kind":"slack","url":"https://hooks.slack.com/services/T0/B0/x"}`, contentType("text/plain")).
		errorCode(t, http.StatusUnsupportedMediaType, dispatch.EMediaType)
	f.do(t, "POST", dests, `{"name":"`+strings.Repeat("x", maxPayload)+`"}`).
		errorCode(t, http.StatusRequestEntityTooLarge, dispatch.ETooLarge)
	if n := f.count(t, "dispatch_alert_destination"); n != 0 {
		t.Errorf("%d alert destinations stored by refused creates", n)
	}
}

// Listing credentials with a bad size and an unknown parameter names both.
func TestCredentialsListNamesEveryBadParameter(t *testing.T) {
	t.Parallel()
	f := setup(t)
	wantFields(t, "size=0&sort=name", f.do(t, "GET", "/api/admin/dispatch/credentials?size=0&sort=name", "").
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "size", "sort")
	wantFields(t, "page=x&size=0&sort=name&q=y", f.do(t, "GET", "/api/admin/dispatch/credentials?page=x&size=0&sort=name&q=y", "").
		errorCode(t, http.StatusBadRequest, dispatch.EInvalid), "page", "size", "sort", "q")
}
