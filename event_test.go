package dispatch_test

import (
	"encoding/json"
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
