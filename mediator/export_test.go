package mediator

import "net/http"

// WrapTransport wraps h's transport with wrap, for tests that watch its
// round trips.
func WrapTransport(h *HTTP, wrap func(http.RoundTripper) http.RoundTripper) {
	h.client.Transport = wrap(h.client.Transport)
}
