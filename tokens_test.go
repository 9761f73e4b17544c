package dispatch_test

import (
	"testing"

	"github.com/dispatchhq/dispatch"
)

// A bearer token is read with its scheme in any case and must not be
// empty; it matches any one of the accepted tokens, and nothing else.
func TestBearerTokensAreReadAndMatchedAsTheRoutesCheckThem(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc": "abc", "bearer abc": "abc", "BEARER abc": "abc",
		"Bearer ": "", "Bearer": "", "Basic abc": "", "": "", "abc": "",
	} {
		got, ok := dispatch.BearerToken(header)
		if ok != (want != "") || (ok && got != want) {
			t.Errorf("BearerToken(%q) = %q, %v; want %q", header, got, ok, want)
		}
	}
	tokens := dispatch.NewTokens("first-token", "second")
	for token, want := range map[string]bool{"first-token": true, "second": true, "first": false, "second ": false, "": false} {
		if got := tokens.Match(token); got != want {
			t.Errorf("Match(%q) = %v, want %v", token, got, want)
		}
	}
	if dispatch.NewTokens().Match("") {
		t.Error("no tokens matched the empty token")
	}
	// An unset token ("") is none: it opens nothing, not even to "".
	if unset := dispatch.NewTokens(""); len(unset) != 0 || unset.Match("") {
		t.Errorf("NewTokens(\"\") = %d tokens, matching the empty one: %v", len(unset), unset.Match(""))
	}
}
