package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// An alert to Slack is a job any API token can read, and its target is the
// incoming-webhook URL, the secret that posts to the channel: jobs show it
// as its host only. An alert to a webhook (signed) shows its URL.
func TestASlackAlertsURLIsNotShownWithItsJob(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const slack = "https://hooks.slack.com/services/T0/B0/s3cretpart"
	j, _, err := f.store.CreateJob(t.Context(), &dispatch.Job{Source: dispatch.AlertSource, Type: "subscription.disabled",
		TargetURL: slack, Protocol: dispatch.ProtocolHTTPWebhook, Payload: `{"text":"x"}`, PayloadContentType: "application/json",
		MaxRetries: dispatch.AlertMaxRetries, RetryStrategy: dispatch.RetryExponential})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/dispatch/jobs/" + dispatch.FormatID(j.ID), "/api/dispatch/jobs?source=" + dispatch.AlertSource} {
		r := f.do(t, "GET", path, "").want(t, http.StatusOK)
		if strings.Contains(string(r.body), "s3cretpart") || !strings.Contains(string(r.body), "https://hooks.slack.com/…") {
			t.Errorf("GET %s shows %s", path, r.body)
		}
	}
}

// Credentials that sign an alert destination's alerts say so in their
// usage, and cannot be deleted while it names them: its alerts could not
// be sent, and a failed alert raises none. Once the destination is gone,
// they can.
func TestCredentialsSigningAlertsAreKeptWhileTheyDo(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := f.credentials(t, "https://ops.example/hooks")
	var dest struct {
		ID string `json:"id"`
	}
	f.do(t, "POST", "/api/admin/dispatch/alerts/destinations",
		`{"name":"ops pager","kind":"webhook","url":"https://ops.example/hooks/alerts","credentialsId":"`+c.ID+`"}`).
		want(t, http.StatusCreated).decode(t, &dest)
	var got struct {
		Usage struct {
			AlertDestinations int `json:"alertDestinations"`
		} `json:"usage"`
	}
	f.do(t, "GET", "/api/admin/dispatch/credentials/"+c.ID, "").want(t, http.StatusOK).decode(t, &got)
	if got.Usage.AlertDestinations != 1 {
		t.Errorf("usage names %d alert destinations, want 1", got.Usage.AlertDestinations)
	}
	var e apiError
	f.do(t, "DELETE", "/api/admin/dispatch/credentials/"+c.ID, "").want(t, http.StatusConflict).decode(t, &e)
	if e.Error.Code != dispatch.EConflict || !strings.Contains(e.Error.Message, "ops pager") {
		t.Errorf("refusal %+v does not name the destination", e.Error)
	}
	f.do(t, "GET", "/api/admin/dispatch/credentials/"+c.ID, "").want(t, http.StatusOK)
	f.do(t, "DELETE", "/api/admin/dispatch/alerts/destinations/"+dest.ID, "").want(t, http.StatusNoContent)
	f.do(t, "DELETE", "/api/admin/dispatch/credentials/"+c.ID, "").want(t, http.StatusNoContent)
}
