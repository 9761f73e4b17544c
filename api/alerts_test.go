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
