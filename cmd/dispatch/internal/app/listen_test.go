package app

import "testing"

// listen's banner says what it answers, the failures first.
func TestListenBannerSaysWhatItAnswers(t *testing.T) {
	for _, tc := range []struct {
		status, failFirst, failStatus int
		want                          string
	}{
		{200, 0, 500, "answering 200"},
		{202, 1, 503, "failing the first request with 503, then answering 202"},
		{200, 2, 500, "failing the first 2 requests with 500, then answering 200"},
	} {
		if got := answering(tc.status, tc.failFirst, tc.failStatus); got != tc.want {
			t.Errorf("answering(%d, %d, %d) = %q, want %q", tc.status, tc.failFirst, tc.failStatus, got, tc.want)
		}
	}
}
