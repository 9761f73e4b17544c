package store

import (
	"strings"
	"testing"
)

// A payload reads back byte for byte whether it was stored as it came or
// compressed; a body that would not shrink by a quarter is stored as it
// came.
func TestPayloadBodiesRoundTrip(t *testing.T) {
	for _, p := range []string{"", "{}", `{"a":1}`, strings.Repeat(`{"sku":"abc","qty":1},`, 60),
		"\x00\xff not utf-8 \xc3", strings.Repeat("é", 300)} {
		body := packPayload(p)
		got, err := openPayload(body)
		if err != nil || got != p {
			t.Fatalf("payload of %d bytes read back as %d bytes (%v)", len(p), len(got), err)
		}
		if len(p) >= packMin && len(body) > len(p)*3/4+1 && body[0] == bodyDeflate {
			t.Errorf("a compressed body of %d bytes for a %d-byte payload", len(body), len(p))
		}
	}
	if body := packPayload(strings.Repeat(`{"sku":"abc","qty":1},`, 60)); body[0] != bodyDeflate || len(body) > 400 {
		t.Errorf("a repetitive 1,320-byte payload is stored in %d bytes, format %d", len(body), body[0])
	}
	for _, bad := range [][]byte{nil, {7, 'x'}, {bodyDeflate, 0xff, 0xfe}} {
		if _, err := openPayload(bad); err == nil {
			t.Errorf("body %v opened without error", bad)
		}
	}
}

func FuzzPayloadBodies(f *testing.F) {
	f.Add(`{"order":{"id":"ord_1"}}`)
	f.Add(strings.Repeat("ab", 200))
	f.Fuzz(func(t *testing.T, p string) {
		got, err := openPayload(packPayload(p))
		if err != nil || got != p {
			t.Fatalf("round trip of %q: %q, %v", p, got, err)
		}
	})
}
