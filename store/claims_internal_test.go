package store

import (
	"encoding/json"
	"maps"
	"testing"
)

// An attempt's headers reach the jsonb column as JSON that reads back as
// the same map, whatever their names and values hold; invalid UTF-8 reads
// back as U+FFFD, as encoding/json writes it.
func TestHeadersJSONReadsBackAsTheSameHeaders(t *testing.T) {
	if got := headersJSON(nil); got != nil {
		t.Fatalf("headersJSON(nil) = %q, want nil (no headers recorded)", *got)
	}
	for _, h := range []map[string]string{
		{},
		{"Content-Type": "application/json"},
		{"X-Quote": `say "hi"\now`, "X-Control": "a\tb\x01c", "X-Html": "<a href='x'>&</a>", "X-Unicode": "é — 日本"},
	} {
		got := headersJSON(h)
		if got == nil {
			t.Fatalf("headersJSON(%v) = nil", h)
		}
		var back map[string]string
		if err := json.Unmarshal([]byte(*got), &back); err != nil {
			t.Fatalf("headersJSON(%v) = %s: not JSON: %v", h, *got, err)
		}
		if !maps.Equal(back, h) {
			t.Errorf("headersJSON(%v) = %s, reads back as %v", h, *got, back)
		}
	}
	got := headersJSON(map[string]string{"X-Bad": "a\xffb"})
	var back map[string]string
	if err := json.Unmarshal([]byte(*got), &back); err != nil || back["X-Bad"] != "a\uFFFDb" {
		t.Errorf("invalid UTF-8: headersJSON = %s, reads back as %q (err %v), want a\uFFFDb", *got, back["X-Bad"], err)
	}
}

// A bounded statement's text follows its bounds: the one it keeps is
// reused only for the same bounds.
func TestWithBoundsFollowsTheBounds(t *testing.T) {
	b := &boundedSQL{sql: "SELECT 1 WHERE id BETWEEN {lo} AND {hi} AND {lo} > 0"}
	for _, c := range []struct{ lo, hi, want string }{
		{"10", "20", "SELECT 1 WHERE id BETWEEN 10 AND 20 AND 10 > 0"},
		{"10", "20", "SELECT 1 WHERE id BETWEEN 10 AND 20 AND 10 > 0"},
		{"10", "30", "SELECT 1 WHERE id BETWEEN 10 AND 30 AND 10 > 0"},
		{"5", "30", "SELECT 1 WHERE id BETWEEN 5 AND 30 AND 5 > 0"},
		{"10", "20", "SELECT 1 WHERE id BETWEEN 10 AND 20 AND 10 > 0"},
	} {
		if got := withBounds(b, c.lo, c.hi); got != c.want {
			t.Errorf("withBounds(%s, %s) = %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}
