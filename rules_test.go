package dispatch_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

// The rules that the API's decoders apply to the values they read; the
// decoders' own tests (api/decode_*_test.go) cover them through request
// bodies.

// fieldsOf lists the fields p names, in order.
func fieldsOf(p dispatch.Problems) []string {
	var out []string
	for _, fe := range p {
		out = append(out, fe.Field)
	}
	return out
}

// A target's port must be one a connection can be made to: url.Parse
// accepts any digits, so without this check such a job would be stored and
// then fail every attempt with a network error.
func TestCheckTarget(t *testing.T) {
	tests := []struct {
		target string
		rules  dispatch.JobRules
		ok     bool
	}{
		{"https://example.com/h", dispatch.JobRules{}, true},
		{"https://example.com:1/h", dispatch.JobRules{}, true},
		{"https://example.com:65535/h", dispatch.JobRules{}, true},
		{"https://example.com:/h", dispatch.JobRules{}, true},
		{"http://[2001:db8::1]:8443/h", dispatch.JobRules{AllowHTTP: true}, true},
		{"http://example.com/h", dispatch.JobRules{}, false},
		{"https://example.com:0/h", dispatch.JobRules{}, false},
		{"https://example.com:65536/h", dispatch.JobRules{}, false},
		{"https://[2001:db8::1]:70000/h", dispatch.JobRules{}, false},
		{"ftp://example.com/h", dispatch.JobRules{AllowHTTP: true}, false},
		{"/h", dispatch.JobRules{}, false},
		{"https://user@example.com/h", dispatch.JobRules{}, false},
		{"https://example.com/h#f", dispatch.JobRules{}, false},
	}
	for _, tt := range tests {
		var p dispatch.Problems
		tt.rules.CheckTarget(&p, "url", tt.target)
		if got := fieldsOf(p); tt.ok && len(got) != 0 || !tt.ok && !slices.Equal(got, []string{"url"}) {
			t.Errorf("%s (allowHTTP %v): problems %v", tt.target, tt.rules.AllowHTTP, p)
		}
	}
}

func TestCheckHeadersAndMetadata(t *testing.T) {
	var p dispatch.Problems
	dispatch.CheckHeaders(&p, map[string]string{"X-Ok": "a\tb", "Host": "h", "Webhook-Id": "x", "X Bad": "v", "X-Crlf": "a\r\nb"})
	if got := fieldsOf(p); !slices.Equal(got, []string{"headers.Host", "headers.Webhook-Id", "headers.X Bad", "headers.X-Crlf"}) {
		t.Errorf("headers: problems %v", p)
	}
	p = nil
	dispatch.CheckMetadata(&p, map[string]string{"ok": "v", "": "v", "long": strings.Repeat("é", dispatch.MaxMetadataValLen+1), "nul": "\x00"})
	if got := fieldsOf(p); !slices.Equal(got, []string{"metadata", "metadata.long", "metadata.nul"}) {
		t.Errorf("metadata: problems %v", p)
	}
	p = nil
	dispatch.CheckEventMetadata(&p, map[string]string{"eventId": "1", "k": "v"})
	if got := fieldsOf(p); !slices.Equal(got, []string{"metadata.eventId"}) {
		t.Errorf("event metadata: problems %v", p)
	}

	// Too many pairs, and a bad one among them: both named in one answer,
	// not the second only once the first is mended.
	for _, c := range []struct {
		check func(*dispatch.Problems, map[string]string)
		max   int
		name  string
	}{
		{dispatch.CheckMetadata, dispatch.MaxMetadataPairs, "job metadata"},
		{dispatch.CheckEventMetadata, dispatch.MaxEventMetadata, "event metadata"},
		{dispatch.CheckFilter, dispatch.MaxEventMetadata, "filter"},
	} {
		m := map[string]string{"long": strings.Repeat("x", dispatch.MaxMetadataValLen+1)}
		for i := range c.max {
			m[fmt.Sprintf("k%02d", i)] = "v"
		}
		p = nil
		c.check(&p, m)
		field := "metadata"
		if c.name == "filter" {
			field = "filter"
		}
		if got := fieldsOf(p); !slices.Equal(got, []string{field, field + ".long"}) {
			t.Errorf("%s of %d pairs, one too long: problems %v", c.name, len(m), p)
		}
	}
}

func TestCheckSchedule(t *testing.T) {
	now := time.Date(2025, 10, 4, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	day := 24 * time.Hour
	tests := []struct {
		scheduledFor, expiresAt *time.Time
		want                    []string
	}{
		{nil, nil, nil},
		{at(-day), at(time.Minute), nil},
		{at(364 * day), at(365 * day), nil},
		{at(366 * day), nil, []string{"scheduledFor"}},
		{nil, at(0), []string{"expiresAt"}},
		{nil, at(367 * day), []string{"expiresAt"}},
		{at(day), at(day), []string{"expiresAt"}},
	}
	for i, tt := range tests {
		var p dispatch.Problems
		dispatch.CheckSchedule(&p, tt.scheduledFor, tt.expiresAt, now)
		if got := fieldsOf(p); !slices.Equal(got, tt.want) {
			t.Errorf("case %d: problems %v, want %v", i, p, tt.want)
		}
	}
}

func TestCheckJobValues(t *testing.T) {
	var p dispatch.Problems
	dispatch.CheckGroupID(&p, "order-42")
	dispatch.CheckGroupID(&p, "")
	if !dispatch.CheckContentType(&p, "application/cloudevents+json") || len(p) != 0 {
		t.Fatalf("valid values refused: %v", p)
	}
	dispatch.CheckGroupID(&p, "order 42")
	if dispatch.CheckContentType(&p, "") || dispatch.CheckContentType(&p, "text/plain\r\nX: y") {
		t.Error("a bad content type was accepted")
	}
	if got := fieldsOf(p); !slices.Equal(got, []string{"groupId", "payloadContentType", "payloadContentType"}) {
		t.Errorf("problems %v", p)
	}
}

func TestCheckQueueAndPool(t *testing.T) {
	rules := dispatch.JobRules{Routing: dispatch.NewRouting([]dispatch.RouteQueue{{Key: "q.fifo", Name: "q.fifo"}}, []string{"SLOW"})}
	var p dispatch.Problems
	if key, ok := rules.CheckQueue(&p, "q.fifo"); !ok || key != "q.fifo" {
		t.Errorf("CheckQueue = %q, %v", key, ok)
	}
	if !rules.CheckPool(&p, "SLOW") || !rules.CheckPool(&p, dispatch.DefaultPool) || len(p) != 0 {
		t.Errorf("configured pools refused: %v", p)
	}
	if _, ok := rules.CheckQueue(&p, "other.fifo"); ok || rules.CheckPool(&p, "FAST") {
		t.Error("an unknown queue or pool was accepted")
	}
	if _, ok := (dispatch.JobRules{}).CheckQueue(&p, "q.fifo"); ok {
		t.Error("a queue was accepted where none is configured")
	}
	want := []string{"must be one of the configured queues: q.fifo", "must be one of the configured pools: " + dispatch.DefaultPool + ", SLOW",
		"names no queue of this deployment (none is configured)"}
	if len(p) != len(want) {
		t.Fatalf("problems %v", p)
	}
	for i, w := range want {
		if p[i].Message != w {
			t.Errorf("problem %d: %q, want %q", i, p[i].Message, w)
		}
	}
}

func TestCheckEventValues(t *testing.T) {
	var p dispatch.Problems
	// order..* matches order..x, a type CheckEventType takes.
	for _, ok := range []string{"*", "order.*", "order.created", "order..*"} {
		if !dispatch.CheckEventPattern(&p, "eventTypes[0]", ok) {
			t.Errorf("pattern %q refused", ok)
		}
	}
	dispatch.CheckEventType(&p, "type", "order.created")
	dispatch.CheckEventType(&p, "type", "")
	if !dispatch.CheckOrderingKey(&p, "/customerId") || len(p) != 0 {
		t.Fatalf("valid values refused: %v", p)
	}
	// The last four could match no type: one has no leading or trailing dot.
	for _, bad := range []string{"", ".*", "a*b", "a b.*", strings.Repeat("a", dispatch.MaxTypeLen+1), "order.", ".order", ".order.*", "..*"} {
		if dispatch.CheckEventPattern(&p, "eventTypes[1]", bad) {
			t.Errorf("pattern %q accepted", bad)
		}
	}
	for _, bad := range []string{"order.*", ".order", "order.", "a b"} {
		dispatch.CheckEventType(&p, "type", bad)
	}
	if dispatch.CheckOrderingKey(&p, "customerId") || dispatch.CheckOrderingKey(&p, "/a\nb") {
		t.Error("a bad ordering key was accepted")
	}
	want := slices.Concat(slices.Repeat([]string{"eventTypes[1]"}, 9), slices.Repeat([]string{"type"}, 4), []string{"orderingKey", "orderingKey"})
	if got := fieldsOf(p); !slices.Equal(got, want) {
		t.Errorf("problems %v, want fields %v", p, want)
	}
}

func TestCheckAlertKind(t *testing.T) {
	tests := []struct {
		kind  string
		creds bool
		want  []string
	}{
		{dispatch.AlertWebhook, true, nil},
		{dispatch.AlertSlack, false, nil},
		{"", false, nil},
		{dispatch.AlertWebhook, false, []string{"credentialsId"}},
		{dispatch.AlertSlack, true, []string{"credentialsId"}},
		{"email", false, []string{"kind"}},
	}
	for _, tt := range tests {
		var p dispatch.Problems
		dispatch.CheckAlertKind(&p, tt.kind, tt.creds)
		if got := fieldsOf(p); !slices.Equal(got, tt.want) {
			t.Errorf("kind %q, credentials %v: problems %v, want %v", tt.kind, tt.creds, p, tt.want)
		}
	}
}
