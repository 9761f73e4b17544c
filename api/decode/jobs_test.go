package decode

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// testNow is the fixed "now" every validation test runs at.
var testNow = time.Date(2025, 10, 4, 12, 0, 0, 0, time.UTC)

var strict = dispatch.JobRules{}

// minimalJob is the smallest valid create-job body.
func minimalJob() map[string]any {
	return map[string]any{
		"source":    "orders",
		"type":      "order.created",
		"targetUrl": "https://example.com/hook",
		"payload":   `{"orderId":42}`,
	}
}

// jobBody returns minimalJob with fields set (a nil value deletes the field).
func jobBody(t testing.TB, set map[string]any) []byte {
	t.Helper()
	m := minimalJob()
	for k, v := range set {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// problemFields asserts err is a validation error and returns its fields.
func problemFields(t testing.TB, err error) []string {
	t.Helper()
	var de *dispatch.Error
	if !errors.As(err, &de) {
		t.Fatalf("error %v (%T) is not a *dispatch.Error", err, err)
	}
	if de.Code != dispatch.EInvalid || dispatch.ErrorCode(err) != dispatch.EInvalid {
		t.Fatalf("code = %q, want %q", de.Code, dispatch.EInvalid)
	}
	if len(de.Details) == 0 {
		t.Fatalf("validation error without details: %v", err)
	}
	var fields []string
	for _, d := range de.Details {
		if d.Field == "" || d.Message == "" {
			t.Errorf("detail without field or message: %+v", d)
		}
		fields = append(fields, d.Field)
	}
	return fields
}

func repeat(n int) string { return strings.Repeat("x", n) }

func manyPairs(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%02d", i)] = "v"
	}
	return m
}

func manyHeaders(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("X-H%02d", i)] = "v"
	}
	return m
}

func TestParseCreateJobDefaults(t *testing.T) {
	j, err := CreateJob(jobBody(t, nil), strict, testNow)
	if err != nil {
		t.Fatalf("minimal job refused: %v", err)
	}
	want := dispatch.Job{
		Source: "orders", Type: "order.created", TargetURL: "https://example.com/hook",
		Payload: `{"orderId":42}`, Status: dispatch.StatusPending, Protocol: dispatch.ProtocolHTTPWebhook,
		PayloadContentType: "application/json", MaxRetries: 5, RetryStrategy: dispatch.RetryExponential,
	}
	if got := *j; got.ID != 0 || got.Source != want.Source || got.Type != want.Type ||
		got.TargetURL != want.TargetURL || got.Payload != want.Payload || got.Status != want.Status ||
		got.Protocol != want.Protocol || got.PayloadContentType != want.PayloadContentType ||
		got.MaxRetries != want.MaxRetries || got.RetryStrategy != want.RetryStrategy ||
		got.CredentialsID != 0 || got.ScheduledFor != nil || got.ExpiresAt != nil {
		t.Errorf("job = %+v\nwant %+v", got, want)
	}
}

func TestParseCreateJobAllFields(t *testing.T) {
	body := jobBody(t, map[string]any{
		"externalId":         "ext-1",
		"groupId":            "order-42",
		"metadata":           map[string]string{"tenantId": "t1", "eventVersion": "v1"},
		"protocol":           "HTTP_WEBHOOK",
		"headers":            map[string]string{"X-Tenant": "t1", "Accept": "*/*"},
		"payloadContentType": "application/cloudevents+json",
		"credentialsId":      "7311097302432047104",
		"maxRetries":         3,
		"retryStrategy":      "linear",
		"scheduledFor":       "2025-10-05T15:00:00+02:00",
		"expiresAt":          "2025-10-06T00:00:00.250Z",
		"idempotencyKey":     "order-42-created",
	})
	j, err := CreateJob(body, strict, testNow)
	if err != nil {
		t.Fatalf("valid job refused: %v", err)
	}
	if j.ExternalID != "ext-1" || j.GroupID != "order-42" || j.IdempotencyKey != "order-42-created" ||
		j.CredentialsID != 7311097302432047104 || j.MaxRetries != 3 || j.RetryStrategy != dispatch.RetryLinear ||
		j.PayloadContentType != "application/cloudevents+json" {
		t.Errorf("job = %+v", j)
	}
	if !maps.Equal(j.Metadata, map[string]string{"tenantId": "t1", "eventVersion": "v1"}) {
		t.Errorf("metadata = %v", j.Metadata)
	}
	if !maps.Equal(j.Headers, map[string]string{"X-Tenant": "t1", "Accept": "*/*"}) {
		t.Errorf("headers = %v", j.Headers)
	}
	if want := time.Date(2025, 10, 5, 13, 0, 0, 0, time.UTC); j.ScheduledFor == nil || !j.ScheduledFor.Equal(want) || j.ScheduledFor.Location() != time.UTC {
		t.Errorf("scheduledFor = %v, want %v in UTC", j.ScheduledFor, want)
	}
	if want := time.Date(2025, 10, 6, 0, 0, 0, 250e6, time.UTC); j.ExpiresAt == nil || !j.ExpiresAt.Equal(want) {
		t.Errorf("expiresAt = %v, want %v", j.ExpiresAt, want)
	}
}

func TestParseCreateJobAccepts(t *testing.T) {
	tests := []struct {
		name  string
		set   map[string]any
		rules dispatch.JobRules
		check func(*dispatch.Job) bool
	}{
		{"credentialsId as number", map[string]any{"credentialsId": 123}, strict,
			func(j *dispatch.Job) bool { return j.CredentialsID == 123 }},
		{"maxRetries 1", map[string]any{"maxRetries": 1}, strict,
			func(j *dispatch.Job) bool { return j.MaxRetries == 1 }},
		{"maxRetries 50", map[string]any{"maxRetries": 50}, strict,
			func(j *dispatch.Job) bool { return j.MaxRetries == 50 }},
		{"fixed strategy", map[string]any{"retryStrategy": "fixed"}, strict,
			func(j *dispatch.Job) bool { return j.RetryStrategy == dispatch.RetryFixed }},
		{"http allowed by rule", map[string]any{"targetUrl": "http://127.0.0.1:9000/hook"}, dispatch.JobRules{AllowHTTP: true},
			func(j *dispatch.Job) bool { return j.TargetURL == "http://127.0.0.1:9000/hook" }},
		{"null optional fields", map[string]any{"groupId": json.RawMessage("null"), "headers": json.RawMessage("null"), "maxRetries": json.RawMessage("null")}, strict,
			func(j *dispatch.Job) bool { return j.GroupID == "" && j.Headers == nil && j.MaxRetries == 5 }},
		{"empty payload", map[string]any{"payload": ""}, strict,
			func(j *dispatch.Job) bool { return j.Payload == "" }},
		{"32 metadata pairs", map[string]any{"metadata": manyPairs(32)}, strict,
			func(j *dispatch.Job) bool { return len(j.Metadata) == 32 }},
		{"64-char metadata key, 256-char value", map[string]any{"metadata": map[string]string{repeat(64): repeat(256)}}, strict,
			func(j *dispatch.Job) bool { return j.Metadata[repeat(64)] == repeat(256) }},
		{"metadata lengths count characters, not bytes", map[string]any{"metadata": map[string]string{strings.Repeat("é", 64): strings.Repeat("ü", 256)}}, strict,
			func(j *dispatch.Job) bool { return len(j.Metadata) == 1 }},
		{"32 headers", map[string]any{"headers": manyHeaders(32)}, strict,
			func(j *dispatch.Job) bool { return len(j.Headers) == 32 }},
		{"tab in header value", map[string]any{"headers": map[string]string{"X-A": "a\tb"}}, strict,
			func(j *dispatch.Job) bool { return j.Headers["X-A"] == "a\tb" }},
		{"scheduledFor in the past", map[string]any{"scheduledFor": "2020-01-01T00:00:00Z"}, strict,
			func(j *dispatch.Job) bool { return j.ScheduledFor != nil }},
		{"escapes in strings are decoded", map[string]any{"source": json.RawMessage(`"a\"b\\c\u00e9\n"`),
			"payload": json.RawMessage(`"{\"k\":\"\ud83d\ude00\"}"`), "metadata": json.RawMessage(`{"k\u00e9":"v\/w"}`)}, strict,
			func(j *dispatch.Job) bool {
				return j.Source == "a\"b\\c\u00e9\n" && j.Payload == `{"k":"😀"}` && j.Metadata["ké"] == "v/w"
			}},
		{"an escaped lone surrogate reads as U+FFFD", map[string]any{"payload": json.RawMessage(`"x\ud800y"`)}, strict,
			func(j *dispatch.Job) bool { return j.Payload == "x\ufffdy" }},
		{"credentialsId as string", map[string]any{"credentialsId": "123"}, strict,
			func(j *dispatch.Job) bool { return j.CredentialsID == 123 }},
		{"scheduledFor 364 days ahead", map[string]any{"scheduledFor": testNow.Add(364 * 24 * time.Hour).Format(time.RFC3339)}, strict,
			func(j *dispatch.Job) bool { return j.ScheduledFor != nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := CreateJob(jobBody(t, tt.set), tt.rules, testNow)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tt.check(j) {
				t.Errorf("job = %+v", j)
			}
		})
	}
}

func TestParseCreateJobRejectsField(t *testing.T) {
	past := testNow.Add(-time.Minute).Format(time.RFC3339)
	tests := []struct {
		name   string
		set    map[string]any
		rules  dispatch.JobRules
		fields []string // every field the details must name, and nothing else
	}{
		{"missing source", map[string]any{"source": nil}, strict, []string{"source"}},
		{"blank source", map[string]any{"source": "   "}, strict, []string{"source"}},
		{"long source", map[string]any{"source": repeat(129)}, strict, []string{"source"}},
		{"source not a string", map[string]any{"source": 5}, strict, []string{"source"}},
		{"source with NUL", map[string]any{"source": "a\x00b"}, strict, []string{"source"}},
		{"missing type", map[string]any{"type": nil}, strict, []string{"type"}},
		{"long type", map[string]any{"type": repeat(129)}, strict, []string{"type"}},
		{"long groupId", map[string]any{"groupId": repeat(129)}, strict, []string{"groupId"}},
		{"groupId with a space (SQS would refuse it)", map[string]any{"groupId": "order 42"}, strict, []string{"groupId"}},
		{"non-ASCII groupId", map[string]any{"groupId": "commande-é"}, strict, []string{"groupId"}},
		{"long externalId", map[string]any{"externalId": repeat(33)}, strict, []string{"externalId"}},
		{"long idempotencyKey", map[string]any{"idempotencyKey": repeat(129)}, strict, []string{"idempotencyKey"}},
		{"missing payload", map[string]any{"payload": nil}, strict, []string{"payload"}},
		{"null payload", map[string]any{"payload": json.RawMessage("null")}, strict, []string{"payload"}},
		{"object payload", map[string]any{"payload": map[string]int{"a": 1}}, strict, []string{"payload"}},
		{"payload with NUL", map[string]any{"payload": "a\x00b"}, strict, []string{"payload"}},
		{"missing targetUrl", map[string]any{"targetUrl": nil}, strict, []string{"targetUrl"}},
		{"relative targetUrl", map[string]any{"targetUrl": "/hook"}, strict, []string{"targetUrl"}},
		{"ftp targetUrl", map[string]any{"targetUrl": "ftp://example.com/x"}, strict, []string{"targetUrl"}},
		{"targetUrl without host", map[string]any{"targetUrl": "https:///hook"}, strict, []string{"targetUrl"}},
		{"targetUrl with port only", map[string]any{"targetUrl": "https://:443/hook"}, strict, []string{"targetUrl"}},
		{"unparseable targetUrl", map[string]any{"targetUrl": "https://exa mple.com/"}, strict, []string{"targetUrl"}},
		{"http when not allowed", map[string]any{"targetUrl": "http://example.com/hook"}, strict, []string{"targetUrl"}},
		{"targetUrl with userinfo", map[string]any{"targetUrl": "https://user:pw@example.com/hook"}, strict, []string{"targetUrl"}},
		{"targetUrl with user only", map[string]any{"targetUrl": "https://user@example.com/hook"}, dispatch.JobRules{AllowHTTP: true}, []string{"targetUrl"}},
		{"targetUrl with fragment", map[string]any{"targetUrl": "https://example.com/hook#x"}, strict, []string{"targetUrl"}},
		{"long targetUrl", map[string]any{"targetUrl": "https://example.com/" + repeat(2048)}, strict, []string{"targetUrl"}},
		{"other protocol", map[string]any{"protocol": "GRPC"}, strict, []string{"protocol"}},
		{"unknown retryStrategy", map[string]any{"retryStrategy": "random"}, strict, []string{"retryStrategy"}},
		{"maxRetries abc", map[string]any{"maxRetries": "abc"}, strict, []string{"maxRetries"}},
		{"maxRetries as string number", map[string]any{"maxRetries": "5"}, strict, []string{"maxRetries"}},
		{"maxRetries 0", map[string]any{"maxRetries": 0}, strict, []string{"maxRetries"}},
		{"maxRetries 51", map[string]any{"maxRetries": 51}, strict, []string{"maxRetries"}},
		{"maxRetries -1", map[string]any{"maxRetries": -1}, strict, []string{"maxRetries"}},
		{"maxRetries 2.5", map[string]any{"maxRetries": 2.5}, strict, []string{"maxRetries"}},
		{"maxRetries huge", map[string]any{"maxRetries": json.RawMessage("99999999999999999999")}, strict, []string{"maxRetries"}},
		{"credentialsId abc", map[string]any{"credentialsId": "abc"}, strict, []string{"credentialsId"}},
		{"credentialsId 0", map[string]any{"credentialsId": 0}, strict, []string{"credentialsId"}},
		{"credentialsId negative", map[string]any{"credentialsId": -3}, strict, []string{"credentialsId"}},
		{"credentialsId fraction", map[string]any{"credentialsId": 1.5}, strict, []string{"credentialsId"}},
		{"credentialsId object", map[string]any{"credentialsId": map[string]int{}}, strict, []string{"credentialsId"}},
		{"scheduledFor not a time", map[string]any{"scheduledFor": "tomorrow"}, strict, []string{"scheduledFor"}},
		{"scheduledFor year 9999", map[string]any{"scheduledFor": "9999-12-31T23:59:59Z"}, strict, []string{"scheduledFor"}},
		{"scheduledFor 366 days ahead", map[string]any{"scheduledFor": testNow.Add(366 * 24 * time.Hour).Format(time.RFC3339)}, strict, []string{"scheduledFor"}},
		{"expiresAt in the past", map[string]any{"expiresAt": past}, strict, []string{"expiresAt"}},
		{"expiresAt now", map[string]any{"expiresAt": testNow.Format(time.RFC3339)}, strict, []string{"expiresAt"}},
		{"expiresAt before scheduledFor", map[string]any{"scheduledFor": "2025-10-05T12:00:00Z", "expiresAt": "2025-10-05T11:00:00Z"}, strict, []string{"expiresAt"}},
		{"expiresAt equal to scheduledFor", map[string]any{"scheduledFor": "2025-10-05T12:00:00Z", "expiresAt": "2025-10-05T12:00:00Z"}, strict, []string{"expiresAt"}},
		{"expiresAt year 9999", map[string]any{"expiresAt": "9999-01-01T00:00:00Z"}, strict, []string{"expiresAt"}},
		{"expiresAt not a string", map[string]any{"expiresAt": 1759579200}, strict, []string{"expiresAt"}},
		{"headers not an object", map[string]any{"headers": "X-A: b"}, strict, []string{"headers"}},
		{"header value not a string", map[string]any{"headers": map[string]any{"X-A": 1}}, strict, []string{"headers.X-A"}},
		{"Authorization header", map[string]any{"headers": map[string]string{"Authorization": "Bearer x"}}, strict, []string{"headers.Authorization"}},
		{"lower-case content-type header", map[string]any{"headers": map[string]string{"content-type": "text/plain"}}, strict, []string{"headers.content-type"}},
		{"Host header", map[string]any{"headers": map[string]string{"Host": "evil.example"}}, strict, []string{"headers.Host"}},
		{"Content-Length header", map[string]any{"headers": map[string]string{"Content-Length": "1"}}, strict, []string{"headers.Content-Length"}},
		{"hop-by-hop Connection", map[string]any{"headers": map[string]string{"Connection": "close"}}, strict, []string{"headers.Connection"}},
		{"hop-by-hop Transfer-Encoding", map[string]any{"headers": map[string]string{"Transfer-Encoding": "chunked"}}, strict, []string{"headers.Transfer-Encoding"}},
		{"hop-by-hop Upgrade", map[string]any{"headers": map[string]string{"Upgrade": "h2c"}}, strict, []string{"headers.Upgrade"}},
		{"Proxy-Authorization", map[string]any{"headers": map[string]string{"Proxy-Authorization": "x"}}, strict, []string{"headers.Proxy-Authorization"}},
		{"flowcatalyst signature header", map[string]any{"headers": map[string]string{"X-FLOWCATALYST-SIGNATURE": "forged"}}, strict, []string{"headers.X-FLOWCATALYST-SIGNATURE"}},
		{"flowcatalyst timestamp header", map[string]any{"headers": map[string]string{"x-flowcatalyst-timestamp": "x"}}, strict, []string{"headers.x-flowcatalyst-timestamp"}},
		{"standard webhooks signature header", map[string]any{"headers": map[string]string{"Webhook-Signature": "v1,x"}}, strict, []string{"headers.Webhook-Signature"}},
		{"dispatch header", map[string]any{"headers": map[string]string{"X-Dispatch-Job-Id": "1"}}, strict, []string{"headers.X-Dispatch-Job-Id"}},
		{"header name with space", map[string]any{"headers": map[string]string{"X Bad": "v"}}, strict, []string{"headers.X Bad"}},
		{"header name with colon", map[string]any{"headers": map[string]string{"X-A:": "v"}}, strict, []string{"headers.X-A:"}},
		{"empty header name", map[string]any{"headers": map[string]string{"": "v"}}, strict, []string{"headers."}},
		{"CRLF in header value", map[string]any{"headers": map[string]string{"X-A": "v\r\nX-Injected: 1"}}, strict, []string{"headers.X-A"}},
		{"LF in header value", map[string]any{"headers": map[string]string{"X-A": "v\nw"}}, strict, []string{"headers.X-A"}},
		{"CR in header value", map[string]any{"headers": map[string]string{"X-A": "v\rw"}}, strict, []string{"headers.X-A"}},
		{"NUL in header value", map[string]any{"headers": map[string]string{"X-A": "v\x00w"}}, strict, []string{"headers.X-A"}},
		{"control character in header value", map[string]any{"headers": map[string]string{"X-A": "v\x01w"}}, strict, []string{"headers.X-A"}},
		{"DEL in header value", map[string]any{"headers": map[string]string{"X-A": "v\x7fw"}}, strict, []string{"headers.X-A"}},
		{"long header value", map[string]any{"headers": map[string]string{"X-A": repeat(4097)}}, strict, []string{"headers.X-A"}},
		{"33 headers", map[string]any{"headers": manyHeaders(33)}, strict, []string{"headers"}},
		{"empty payloadContentType", map[string]any{"payloadContentType": ""}, strict, []string{"payloadContentType"}},
		{"payloadContentType with CRLF", map[string]any{"payloadContentType": "text/plain\r\nX-A: b"}, strict, []string{"payloadContentType"}},
		{"payloadContentType with control character", map[string]any{"payloadContentType": "text/plain\x01"}, strict, []string{"payloadContentType"}},
		{"metadata not an object", map[string]any{"metadata": []string{"a"}}, strict, []string{"metadata"}},
		{"metadata value not a string", map[string]any{"metadata": map[string]any{"k": 1}}, strict, []string{"metadata.k"}},
		{"33 metadata pairs", map[string]any{"metadata": manyPairs(33)}, strict, []string{"metadata"}},
		{"65-char metadata key", map[string]any{"metadata": map[string]string{repeat(65): "v"}}, strict, []string{"metadata"}},
		{"empty metadata key", map[string]any{"metadata": map[string]string{"": "v"}}, strict, []string{"metadata"}},
		{"257-char metadata value", map[string]any{"metadata": map[string]string{"k": repeat(257)}}, strict, []string{"metadata.k"}},
		{"NUL in metadata value", map[string]any{"metadata": map[string]string{"k": "a\x00"}}, strict, []string{"metadata.k"}},
		{"unknown field", map[string]any{"colour": "red"}, strict, []string{"colour"}},
		{"queueUrl", map[string]any{"queueUrl": "https://sqs.example/q.fifo"}, strict, []string{"queueUrl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := jobBody(t, tt.set)
			j, err := CreateJob(body, tt.rules, testNow)
			if j != nil || err == nil {
				t.Fatalf("accepted %s: %+v", body, j)
			}
			got := problemFields(t, err)
			for _, f := range got {
				if !slices.Contains(tt.fields, f) {
					t.Errorf("unexpected problem with %q in %v (want only %v)", f, err.(*dispatch.Error).Details, tt.fields)
				}
			}
			for _, f := range tt.fields {
				if !slices.Contains(got, f) {
					t.Errorf("details %v do not name %q", err.(*dispatch.Error).Details, f)
				}
			}
		})
	}
}

func TestParseCreateJobListsEveryProblem(t *testing.T) {
	body := jobBody(t, map[string]any{
		"source":        "",
		"type":          nil,
		"targetUrl":     "http://user@example.com/",
		"payload":       nil,
		"maxRetries":    0,
		"retryStrategy": "sometimes",
		"credentialsId": "x",
		"headers":       map[string]string{"Host": "a", "X-Ok": "fine", "X-Bad": "a\nb"},
		"metadata":      map[string]string{repeat(65): "v", "long": repeat(257)},
		"scheduledFor":  "9999-01-01T00:00:00Z",
		"expiresAt":     "2020-01-01T00:00:00Z",
		"surprise":      true,
	})
	_, err := CreateJob(body, strict, testNow)
	got := problemFields(t, err)
	for _, want := range []string{"source", "type", "targetUrl", "payload", "maxRetries", "retryStrategy",
		"credentialsId", "headers.Host", "headers.X-Bad", "metadata", "metadata.long", "scheduledFor",
		"expiresAt", "surprise"} {
		if !slices.Contains(got, want) {
			t.Errorf("problem with %q not reported; got %v", want, got)
		}
	}
	if slices.Contains(got, "headers.X-Ok") {
		t.Errorf("a valid header was reported: %v", got)
	}
}

func TestParseCreateJobRejectsBody(t *testing.T) {
	valid := string(jobBody(t, nil))
	tests := []struct {
		name  string
		body  string
		field string
	}{
		{"empty", "", "body"},
		{"whitespace", "  \n", "body"},
		{"array", "[" + valid + "]", "body"},
		{"string", `"hello"`, "body"},
		{"number", `42`, "body"},
		{"null", `null`, "body"},
		{"truncated", valid[:len(valid)-5], "body"},
		{"missing closing brace", strings.TrimSuffix(valid, "}"), "body"},
		{"second object", valid + ` {}`, "body"},
		{"trailing garbage", valid + `x`, "body"},
		{"trailing comma", strings.TrimSuffix(valid, "}") + `,}`, "body"},
		{"non-string key", `{1:"a"}`, "body"},
		{"single-quoted", `{'source':'a'}`, "body"},
		{"invalid UTF-8", `{"source":"` + "\xff\xfe" + `","type":"t","targetUrl":"https://e.com","payload":""}`, "body"},
		{"invalid UTF-8 in a key", `{"` + "\xc3\x28" + `":1}`, "body"},
		{"duplicate key", strings.TrimSuffix(valid, "}") + `,"source":"other"}`, "source"},
		{"duplicate key differing only by escape", strings.TrimSuffix(valid, "}") + `,"\u0073ource":"other"}`, "source"},
		{"duplicate header key", strings.TrimSuffix(valid, "}") + `,"headers":{"X-A":"1","X-A":"2"}}`, "headers.X-A"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, err := CreateJob([]byte(tt.body), dispatch.JobRules{AllowHTTP: true}, testNow)
			if j != nil {
				t.Fatalf("accepted %q: %+v", tt.body, j)
			}
			if got := problemFields(t, err); !slices.Contains(got, tt.field) {
				t.Errorf("details %v do not name %q", got, tt.field)
			}
		})
	}
}

func TestParseCreateJobs(t *testing.T) {
	valid := jobBody(t, nil)
	invalid := jobBody(t, map[string]any{"maxRetries": 99})
	body := []byte(`{"jobs":[` + string(valid) + `,` + string(invalid) + `,"not an object",` + string(valid) + `]}`)
	jobs, errs, err := CreateJobs(body, strict, testNow, 100)
	if err != nil {
		t.Fatalf("batch refused as a whole: %v", err)
	}
	if len(jobs) != 4 || len(errs) != 4 {
		t.Fatalf("got %d jobs, %d errors; want 4 each", len(jobs), len(errs))
	}
	for _, i := range []int{0, 3} {
		if jobs[i] == nil || errs[i] != nil || jobs[i].Source != "orders" {
			t.Errorf("item %d: job %+v, err %v; want a job", i, jobs[i], errs[i])
		}
	}
	if jobs[1] != nil || !slices.Contains(problemFields(t, errs[1]), "maxRetries") {
		t.Errorf("item 1: job %+v, err %v; want a maxRetries problem", jobs[1], errs[1])
	}
	if jobs[2] != nil || !slices.Contains(problemFields(t, errs[2]), "body") {
		t.Errorf("item 2: job %+v, err %v; want a body problem", jobs[2], errs[2])
	}
}

// Each item of a batch is read on its own: nothing one item names (a
// field, a duplicate, an unknown name) carries over to the next.
func TestParseCreateJobsReadsEachItemOnItsOwn(t *testing.T) {
	full := jobBody(t, map[string]any{"groupId": "g-1", "idempotencyKey": "k-1",
		"headers": map[string]string{"X-Tenant": "acme"}, "metadata": map[string]string{"tier": "gold"}})
	unknown := jobBody(t, map[string]any{"colour": "blue"})
	dup := `{"source":"orders","source":"orders","type":"t","targetUrl":"https://example.com/hook","payload":"{}"}`
	bare := jobBody(t, nil)
	body := []byte(`{"jobs":[` + string(full) + `,` + string(bare) + `,` + string(unknown) + `,` + bare2(bare) + `,` + dup + `,` + string(bare) + `]}`)
	jobs, errs, err := CreateJobs(body, strict, testNow, 100)
	if err != nil {
		t.Fatalf("batch refused as a whole: %v", err)
	}
	if jobs[0] == nil || jobs[0].GroupID != "g-1" || jobs[0].Headers["X-Tenant"] != "acme" {
		t.Fatalf("item 0: %+v, %v; want its group and headers", jobs[0], errs[0])
	}
	for _, i := range []int{1, 3, 5} {
		j := jobs[i]
		if j == nil {
			t.Fatalf("item %d refused: %v", i, errs[i])
		}
		if j.GroupID != "" || j.IdempotencyKey != "" || len(j.Headers) != 0 || len(j.Metadata) != 0 {
			t.Errorf("item %d took an earlier item's fields: group %q, key %q, headers %v, metadata %v",
				i, j.GroupID, j.IdempotencyKey, j.Headers, j.Metadata)
		}
	}
	if got := problemFields(t, errs[2]); !slices.Equal(got, []string{"colour"}) {
		t.Errorf("item 2: problems %v, want colour only", got)
	}
	if got := problemFields(t, errs[4]); !slices.Equal(got, []string{"source"}) {
		t.Errorf("item 4: problems %v, want source (given twice) only", got)
	}
}

// bare2 is a valid item with its fields in another order.
func bare2(b []byte) string {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return `{"payload":` + mustJSON(m["payload"]) + `,"targetUrl":` + mustJSON(m["targetUrl"]) +
		`,"type":` + mustJSON(m["type"]) + `,"source":` + mustJSON(m["source"]) + `}`
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestParseCreateJobsRefusesBatch(t *testing.T) {
	items := func(n int) string {
		return strings.TrimSuffix(strings.Repeat(string(jobBody(t, nil))+",", n), ",")
	}
	tests := []struct {
		name  string
		body  string
		field string
	}{
		{"101 jobs", `{"jobs":[` + items(101) + `]}`, "jobs"},
		{"no jobs field", `{}`, "jobs"},
		{"empty jobs", `{"jobs":[]}`, "jobs"},
		{"null jobs", `{"jobs":null}`, "jobs"},
		{"jobs not an array", `{"jobs":{"source":"a"}}`, "jobs"},
		{"unknown field", `{"jobs":[` + items(1) + `],"atomic":true}`, "atomic"},
		{"not an object", `[` + items(1) + `]`, "body"},
		{"trailing data", `{"jobs":[` + items(1) + `]}]`, "body"},
		{"duplicate jobs key", `{"jobs":[` + items(1) + `],"jobs":[]}`, "jobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			jobs, errs, err := CreateJobs([]byte(tt.body), strict, testNow, 100)
			if jobs != nil || errs != nil {
				t.Errorf("per-item results for a refused batch: %v %v", jobs, errs)
			}
			if got := problemFields(t, err); !slices.Contains(got, tt.field) {
				t.Errorf("details %v do not name %q", got, tt.field)
			}
		})
	}

	t.Run("100 jobs", func(t *testing.T) {
		jobs, errs, err := CreateJobs([]byte(`{"jobs":[`+items(100)+`]}`), strict, testNow, 100)
		if err != nil || len(jobs) != 100 {
			t.Fatalf("got %d jobs, err %v", len(jobs), err)
		}
		for i := range jobs {
			if jobs[i] == nil || errs[i] != nil {
				t.Fatalf("item %d: %v", i, errs[i])
			}
		}
	})
}

// TestParseStringMapNamesEveryProblemInOrder: a headers or metadata object
// answers each bad entry, in the order the body gives them, and a name
// given twice is named whatever its first value was.
func TestParseStringMapNamesEveryProblemInOrder(t *testing.T) {
	for _, name := range []string{"headers", "metadata"} {
		t.Run(name, func(t *testing.T) {
			body := strings.TrimSuffix(string(jobBody(t, nil)), "}") +
				`,"` + name + `":{"X-B":1,"X-A":"a","X-B":"b","X-C":{"d":"e"}}}`
			_, err := CreateJob([]byte(body), strict, testNow)
			var de *dispatch.Error
			if !errors.As(err, &de) {
				t.Fatalf("accepted %s or answered %v", body, err)
			}
			want := []dispatch.FieldError{
				{Field: name + ".X-B", Message: "must be a string"},
				{Field: name + ".X-B", Message: "appears more than once"},
				{Field: name + ".X-C", Message: "must be a string"},
			}
			if len(de.Details) < len(want) || !slices.Equal(de.Details[:len(want)], want) {
				t.Errorf("details %+v, want them to begin with %+v", de.Details, want)
			}
		})
	}
}
