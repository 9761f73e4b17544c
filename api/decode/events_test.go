package decode

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

func TestParseSubscriptionListsEveryProblem(t *testing.T) {
	_, _, err := Subscription([]byte(`{"url":"http://x.example","eventTypes":["ok.*","a*b",""],
		"maxRetries":51,"orderingKey":"id","rateLimitPerSecond":10001,"headers":{"Host":"h"},"status":"ACTIVE"}`),
		dispatch.JobRules{})
	var de *dispatch.Error
	if !errors.As(err, &de) {
		t.Fatalf("err = %v", err)
	}
	got := map[string]bool{}
	for _, d := range de.Details {
		got[d.Field] = true
	}
	for _, f := range []string{"name", "url", "eventTypes[1]", "eventTypes[2]", "maxRetries", "orderingKey",
		"rateLimitPerSecond", "headers.Host", "status"} {
		if !got[f] {
			t.Errorf("%s not named: %+v", f, de.Details)
		}
	}
	sub, verify, err := Subscription([]byte(`{"name":"n","url":"https://x.example/h","eventTypes":["*","*"],"verify":true,"credentialsId":"12"}`), dispatch.JobRules{})
	if err != nil || !verify || sub.Status != dispatch.SubscriptionPendingVerification || sub.CredentialsID != 12 ||
		!slices.Equal(sub.EventTypes, []string{"*"}) || sub.MaxRetries != dispatch.DefaultMaxRetries {
		t.Errorf("valid: %+v verify %v err %v", sub, verify, err)
	}
}

func TestPatchSubscription(t *testing.T) {
	sub := dispatch.Subscription{Name: "n", URL: "https://x.example", EventTypes: []string{"*"}, OrderingKey: "/id",
		RateLimitPerSecond: 5, MaxRetries: 3, RetryStrategy: dispatch.RetryFixed}
	before := sub
	if err := PatchSubscription([]byte(`{"name":"m","url":"ftp://x"}`), dispatch.JobRules{}, &sub); err == nil {
		t.Fatal("a bad url was accepted")
	}
	if sub.Name != before.Name {
		t.Errorf("a refused patch changed the name to %q", sub.Name)
	}
	if err := PatchSubscription([]byte(`{"name":"m","orderingKey":null,"rateLimitPerSecond":null}`), dispatch.JobRules{}, &sub); err != nil {
		t.Fatal(err)
	}
	if sub.Name != "m" || sub.OrderingKey != "" || sub.RateLimitPerSecond != 0 || sub.MaxRetries != 3 || sub.URL != before.URL {
		t.Errorf("patched: %+v", sub)
	}
}

func TestParseEvent(t *testing.T) {
	e, data, err := Event([]byte(`{"source":"s","type":"order.created","data": {"id": 1.50} ,"metadata":{"k":"v"},"idempotencyKey":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Data != `{"id": 1.50}` {
		t.Errorf("data kept as %q, want the text as given", e.Data)
	}
	if v, _ := dispatch.ResolvePointer(data, "/id"); v != json.Number("1.50") {
		t.Errorf("decoded data: %v", v)
	}
	_, _, err = Event([]byte(`{"type":"*","data":null,"metadata":{"subscriptionId":"1"},"x":1}`))
	var de *dispatch.Error
	if !errors.As(err, &de) || len(de.Details) != 5 {
		t.Errorf("bad event: %v", err)
	}
}

// FuzzParseEventAndSubscription checks that the event and subscription
// parsers never panic, answer one of a value or a validation error, and that
// what they accept is what fan-out relies on: a publishable type, data that
// is JSON, patterns the match keys can meet, and group ids SQS accepts.
func FuzzParseEventAndSubscription(f *testing.F) {
	for _, s := range []string{
		`{"source":"s","type":"order.created","data":{"customerId":"c-1"},"metadata":{"k":"v"}}`,
		`{"name":"n","url":"https://e.com","eventTypes":["order.*","*"],"orderingKey":"/customerId","rateLimitPerSecond":5}`,
		`{"source":"s","type":"a..b","data":[1,2,{"x":null}]}`,
		`{"name":"n","url":"https://e.com","eventTypes":[".*","a.*.*"],"orderingKey":"/a~2"}`,
		`{"data":"\u0000","type":"x"}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, data, err := Event(body)
		if (e == nil) == (err == nil) {
			t.Fatalf("ParseEvent: event %v and err %v", e, err)
		}
		if e != nil {
			if !json.Valid([]byte(e.Data)) || strings.Contains(e.Type, "*") || e.Type == "" {
				t.Fatalf("accepted event %+v", e)
			}
			for _, ptr := range []string{"/customerId", "/0", "/a/b", ""} {
				if g := dispatch.OrderingGroup(1, ptr, data); len(g) > dispatch.MaxGroupIDLen || strings.ContainsAny(g, " \t\r\n\x00") {
					t.Fatalf("group id %q", g)
				}
			}
		}
		sub, _, err := Subscription(body, dispatch.JobRules{})
		if (sub == nil) == (err == nil) {
			t.Fatalf("ParseSubscription: sub %v and err %v", sub, err)
		}
		if sub != nil {
			if len(sub.EventTypes) == 0 || sub.Name == "" || sub.URL == "" {
				t.Fatalf("accepted subscription %+v", sub)
			}
			for _, p := range sub.EventTypes {
				if p != "*" && strings.Contains(strings.TrimSuffix(p, ".*"), "*") {
					t.Fatalf("accepted pattern %q", p)
				}
			}
		}
	})
}
