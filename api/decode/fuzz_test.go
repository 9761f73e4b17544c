package decode

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dispatchhq/dispatch"
)

// FuzzParseCreateJob checks that CreateJob never panics, answers with
// exactly one of a job or a validation error, and that every job it accepts
// satisfies what the store and the sender rely on.
func FuzzParseCreateJob(f *testing.F) {
	for _, s := range []string{
		`{"source":"s","type":"t","targetUrl":"https://example.com/h","payload":"{}"}`,
		`{"source":"s","type":"t","targetUrl":"http://127.0.0.1:8080/h","payload":"x","maxRetries":50,"retryStrategy":"fixed"}`,
		`{"source":"s","type":"t","targetUrl":"https://e.com","payload":"","headers":{"X-A":"b"},"metadata":{"k":"v"}}`,
		`{"source":"s","type":"t","targetUrl":"https://e.com","payload":"p","scheduledFor":"2025-10-05T00:00:00Z","expiresAt":"2025-10-06T00:00:00Z"}`,
		`{"source":"s","type":"t","targetUrl":"https://e.com","payload":"p","credentialsId":"123","groupId":"g","externalId":"e","idempotencyKey":"i"}`,
		`{"source":"s","type":"t","targetUrl":"https://e.com","payload":"p","maxRetries":"abc"}`,
		`{"source":"s","source":"t"}`,
		`{"headers":{"Authorization":"x","X-A":"a\r\nb"}}`,
		`{} {}`,
		`[]`,
		`null`,
		"{\"source\":\"\xff\"}",
		`{"payload":"\u0000","metadata":{"\u0000":"\u0000"}}`,
		`{"targetUrl":"https://user:pw@[::1]:99999/#f"}`,
		`{"maxRetries":1e400,"credentialsId":-0}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte(`{"source":"s","type":"t","targetUrl":"http://e.com","payload":"p"}`), true)
	f.Fuzz(func(t *testing.T, body []byte, allowHTTP bool) {
		j, err := CreateJob(body, dispatch.JobRules{AllowHTTP: allowHTTP}, testNow)
		if (j == nil) == (err == nil) {
			t.Fatalf("job %v and error %v: want exactly one", j, err)
		}
		if err != nil {
			var de *dispatch.Error
			if !errors.As(err, &de) || de.Code != dispatch.EInvalid || len(de.Details) == 0 {
				t.Fatalf("error is not a validation error with details: %#v", err)
			}
			for _, d := range de.Details {
				// The field may be "": a body can have an empty key.
				if d.Message == "" || !utf8.ValidString(d.Message) {
					t.Fatalf("bad detail %+v", d)
				}
			}
			return
		}
		checkJobInvariants(t, j, allowHTTP)
	})
}

func checkJobInvariants(t *testing.T, j *dispatch.Job, allowHTTP bool) {
	t.Helper()
	if strings.TrimSpace(j.Source) == "" || strings.TrimSpace(j.Type) == "" || j.TargetURL == "" {
		t.Fatalf("accepted a job without source, type or targetUrl: %+v", j)
	}
	if j.MaxRetries < dispatch.MinRetries || j.MaxRetries > dispatch.MaxRetriesLimit {
		t.Fatalf("maxRetries %d outside 1..50", j.MaxRetries)
	}
	if j.Status != dispatch.StatusPending || j.Protocol != dispatch.ProtocolHTTPWebhook ||
		!j.RetryStrategy.Valid() || j.PayloadContentType == "" || j.ID != 0 || j.AttemptCount != 0 {
		t.Fatalf("accepted job in a bad shape: %+v", j)
	}
	u, err := url.Parse(j.TargetURL)
	if err != nil || u.Host == "" || u.User != nil || (u.Scheme != "https" && !(allowHTTP && u.Scheme == "http")) {
		t.Fatalf("accepted targetUrl %q (allowHTTP %v)", j.TargetURL, allowHTTP)
	}
	for _, s := range []string{j.Source, j.Type, j.GroupID, j.ExternalID, j.IdempotencyKey, j.Payload, j.PayloadContentType} {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			t.Fatalf("accepted text PostgreSQL cannot store: %q", s)
		}
	}
	if len(j.Headers) > dispatch.MaxHeaders || len(j.Metadata) > dispatch.MaxMetadataPairs {
		t.Fatalf("too many headers or metadata pairs")
	}
	for k, v := range j.Headers {
		lk := strings.ToLower(k)
		if lk == "authorization" || lk == "content-type" || lk == "host" || strings.HasPrefix(lk, "x-flowcatalyst-") ||
			strings.HasPrefix(lk, "webhook-") || strings.HasPrefix(lk, "x-dispatch-") {
			t.Fatalf("accepted reserved header %q", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			t.Fatalf("accepted header value %q", v)
		}
	}
	for k, v := range j.Metadata {
		if k == "" || utf8.RuneCountInString(k) > dispatch.MaxMetadataKeyLen || utf8.RuneCountInString(v) > dispatch.MaxMetadataValLen {
			t.Fatalf("accepted metadata %q=%q", k, v)
		}
	}
	if j.ExpiresAt != nil && !j.ExpiresAt.After(testNow) {
		t.Fatalf("accepted expiresAt %v in the past", j.ExpiresAt)
	}
	if j.ExpiresAt != nil && j.ScheduledFor != nil && !j.ExpiresAt.After(*j.ScheduledFor) {
		t.Fatalf("accepted expiresAt %v not after scheduledFor %v", j.ExpiresAt, j.ScheduledFor)
	}
}
