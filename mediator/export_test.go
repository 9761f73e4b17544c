package mediator

import (
	"net/http"
	"time"
)

// WrapTransport wraps h's transport with wrap, for tests that watch its
// round trips.
func WrapTransport(h *HTTP, wrap func(http.RoundTripper) http.RoundTripper) {
	h.client.Transport = wrap(h.client.Transport)
}

// ForgetIdleAfter has b forget a breaker no request asked for in d (an
// hour otherwise).
func ForgetIdleAfter(b *Breakers, d time.Duration) { b.idle = d }
