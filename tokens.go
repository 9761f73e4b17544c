package dispatch

import (
	"crypto/sha256"
	"crypto/subtle"
	"strings"
)

// Tokens are the bearer tokens a route accepts, kept as their SHA-256 so
// that comparing a presented token takes the same time whatever its length
// or the configured ones'. The API and the router's listener check tokens
// with them alike.
type Tokens [][32]byte

// NewTokens hashes the accepted tokens. An empty one is no token: Tokens
// of none match nothing.
func NewTokens(tokens ...string) Tokens {
	sums := make(Tokens, 0, len(tokens))
	for _, t := range tokens {
		if t != "" {
			sums = append(sums, sha256.Sum256([]byte(t)))
		}
	}
	return sums
}

// Match reports whether token is one of t, comparing with every one in
// constant time.
func (t Tokens) Match(token string) bool {
	got := sha256.Sum256([]byte(token))
	match := 0
	for _, want := range t {
		match |= subtle.ConstantTimeCompare(got[:], want[:])
	}
	return match == 1
}

// BearerToken reads the token of an Authorization header value: the scheme
// "Bearer" in any case (RFC 9110 §11.1), then a token that is not empty.
func BearerToken(header string) (string, bool) {
	scheme, token, _ := strings.Cut(header, " ")
	return token, strings.EqualFold(scheme, "Bearer") && token != ""
}
