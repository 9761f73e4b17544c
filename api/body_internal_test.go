package api

import (
	"bytes"
	"strings"
	"testing"
)

// A body is read into a buffer of its announced length, but no more than
// readAhead is reserved before its bytes arrive: a client announcing a
// large body (the sign-in takes no token) and sending little holds little.
func TestABodyReservesNoMoreThanItsBytesNeed(t *testing.T) {
	for _, tc := range []struct {
		announced int64
		body      string
		maxCap    int
	}{
		{1 << 20, "{}", readAhead + bytes.MinRead},                         // announced 1 MiB, sent 2 bytes
		{600, strings.Repeat("x", 600), 600 + bytes.MinRead},               // a create: one allocation
		{50 << 10, strings.Repeat("x", 50<<10), 50<<10 + bytes.MinRead},    // a batch: one allocation
		{300 << 10, strings.Repeat("x", 300<<10), 300<<10 + bytes.MinRead}, // a large batch: reserved whole once readAhead came, not doubled
		{300 << 10, strings.Repeat("x", 100<<10), 300<<10 + bytes.MinRead}, // sent less than announced, past readAhead
	} {
		got, err := readBody(strings.NewReader(tc.body), tc.announced)
		if err != nil || string(got) != tc.body {
			t.Fatalf("announced %d: read %d bytes, %v; want the %d sent", tc.announced, len(got), err, len(tc.body))
		}
		if cap(got) > tc.maxCap {
			t.Errorf("announced %d, sent %d: %d bytes reserved, want at most %d", tc.announced, len(tc.body), cap(got), tc.maxCap)
		}
	}
}
