package e2e

import (
	"net/http"
	"testing"
)

// DISPATCH_MAX_FANOUT reaches the store: an event matching more ACTIVE
// subscriptions than it allows is refused whole.
func TestMaxFanoutSetting(t *testing.T) {
	t.Parallel()
	in := start(t, "api", map[string]string{"DISPATCH_MAX_FANOUT": "1"})
	for range 2 {
		if code := in.do("POST", "/api/dispatch/subscriptions", apiToken,
			map[string]any{"name": "s", "url": "https://example.com/hook", "eventTypes": []string{"*"}}, nil); code != http.StatusCreated {
			t.Fatalf("create subscription: %d", code)
		}
	}
	event := map[string]any{"source": "shop", "type": "order.created", "data": map[string]any{"id": 1}}
	var refused struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if code := in.do("POST", "/api/dispatch/events", apiToken, event, &refused); code != http.StatusUnprocessableEntity {
		t.Fatalf("publish to 2 subscriptions with DISPATCH_MAX_FANOUT=1: %d %+v", code, refused)
	}
	var list struct {
		TotalItems int `json:"totalItems"`
	}
	if in.do("GET", "/api/dispatch/events", apiToken, nil, &list); list.TotalItems != 0 {
		t.Errorf("a refused event was stored: %d events", list.TotalItems)
	}
}
