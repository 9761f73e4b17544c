package dispatch_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dispatchhq/dispatch"
)

func TestMatchKeys(t *testing.T) {
	got := dispatch.MatchKeys("order.created.v2")
	want := []string{"order.created.v2", "*", "order.*", "order.created.*"}
	if !slices.Equal(got, want) {
		t.Errorf("MatchKeys = %v, want %v", got, want)
	}
	sub := dispatch.Subscription{EventTypes: []string{"invoice.*", "order.created"}}
	for typ, want := range map[string]bool{"order.created": true, "invoice.paid": true, "invoice": false,
		"order.created.v2": false, "orders.created": false, "invoicex.paid": false} {
		if got := sub.Matches(typ); got != want {
			t.Errorf("Matches(%q) = %v, want %v", typ, got, want)
		}
	}
}

func TestOrderingGroup(t *testing.T) {
	var data any
	d := json.NewDecoder(strings.NewReader(`{"c":{"id":"c-1","n":7,"a/b":"x","sp":"a b","list":["first"]},"empty":""}`))
	d.UseNumber()
	if err := d.Decode(&data); err != nil {
		t.Fatal(err)
	}
	for ptr, want := range map[string]string{
		"/c/id": "sub-9-c-1", "/c/n": "sub-9-7", "/c/a~1b": "sub-9-x", "/c/list/0": "sub-9-first",
		"/c/missing": "", "/c/list/1": "", "/c/list/01": "",
	} {
		if got := dispatch.OrderingGroup(9, ptr, data); got != want {
			t.Errorf("OrderingGroup(%q) = %q, want %q", ptr, got, want)
		}
	}
	// Values outside the SQS alphabet are hashed, never merged by replacing
	// characters: "a b" and "a_b" stay apart.
	sp := dispatch.OrderingGroup(9, "/c/sp", data)
	if !strings.HasPrefix(sp, "sub-9-h~") || len(sp) != len("sub-9-h~")+32 {
		t.Errorf("a value with a space: %q", sp)
	}
	if e := dispatch.OrderingGroup(9, "/empty", data); !strings.HasPrefix(e, "sub-9-h~") {
		t.Errorf("an empty value: %q", e)
	}
}

func TestParseSubscriptionListsEveryProblem(t *testing.T) {
	_, _, err := dispatch.ParseSubscription([]byte(`{"url":"http://x.example","eventTypes":["ok.*","a*b",""],
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
	sub, verify, err := dispatch.ParseSubscription([]byte(`{"name":"n","url":"https://x.example/h","eventTypes":["*","*"],"verify":true,"credentialsId":"12"}`), dispatch.JobRules{})
	if err != nil || !verify || sub.Status != dispatch.SubscriptionPendingVerification || sub.CredentialsID != 12 ||
		!slices.Equal(sub.EventTypes, []string{"*"}) || sub.MaxRetries != dispatch.DefaultMaxRetries {
		t.Errorf("valid: %+v verify %v err %v", sub, verify, err)
	}
}

func TestPatchSubscription(t *testing.T) {
	sub := dispatch.Subscription{Name: "n", URL: "https://x.example", EventTypes: []string{"*"}, OrderingKey: "/id",
		RateLimitPerSecond: 5, MaxRetries: 3, RetryStrategy: dispatch.RetryFixed}
	before := sub
	if err := dispatch.PatchSubscription([]byte(`{"name":"m","url":"ftp://x"}`), dispatch.JobRules{}, &sub); err == nil {
		t.Fatal("a bad url was accepted")
	}
	if sub.Name != before.Name {
		t.Errorf("a refused patch changed the name to %q", sub.Name)
	}
	if err := dispatch.PatchSubscription([]byte(`{"name":"m","orderingKey":null,"rateLimitPerSecond":null}`), dispatch.JobRules{}, &sub); err != nil {
		t.Fatal(err)
	}
	if sub.Name != "m" || sub.OrderingKey != "" || sub.RateLimitPerSecond != 0 || sub.MaxRetries != 3 || sub.URL != before.URL {
		t.Errorf("patched: %+v", sub)
	}
}

func TestParseEvent(t *testing.T) {
	e, data, err := dispatch.ParseEvent([]byte(`{"source":"s","type":"order.created","data": {"id": 1.50} ,"metadata":{"k":"v"},"idempotencyKey":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Data != `{"id": 1.50}` {
		t.Errorf("data kept as %q, want the text as given", e.Data)
	}
	if v, _ := dispatch.ResolvePointer(data, "/id"); v != json.Number("1.50") {
		t.Errorf("decoded data: %v", v)
	}
	_, _, err = dispatch.ParseEvent([]byte(`{"type":"*","data":null,"metadata":{"subscriptionId":"1"},"x":1}`))
	var de *dispatch.Error
	if !errors.As(err, &de) || len(de.Details) != 5 {
		t.Errorf("bad event: %v", err)
	}
}
