package dispatch_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
)

func TestStatusTerminal(t *testing.T) {
	terminal := map[dispatch.Status]bool{
		dispatch.StatusCompleted: true, dispatch.StatusError: true,
		dispatch.StatusCancelled: true, dispatch.StatusExpired: true,
	}
	for _, s := range dispatch.Statuses {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
		if s.Terminal() != terminal[s] {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
	if len(dispatch.Statuses) != 7 {
		t.Errorf("%d statuses, want 7", len(dispatch.Statuses))
	}
	for _, s := range []dispatch.Status{"", "pending", "DONE"} {
		if s.Valid() || s.Terminal() {
			t.Errorf("%q is valid or terminal", s)
		}
	}
}

func TestParseID(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true},
		{"7311097302432047104", 7311097302432047104, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false},
		{"0", 0, false},
		{"-5", 0, false},
		{"", 0, false},
		{" 1", 0, false},
		{"1e3", 0, false},
		{"abc", 0, false},
	}
	for _, tt := range tests {
		got, ok := dispatch.ParseID(tt.in)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("ParseID(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
		if ok && dispatch.FormatID(got) != tt.in {
			t.Errorf("FormatID(%d) = %q, want %q", got, dispatch.FormatID(got), tt.in)
		}
	}
}

func TestMessageGroupID(t *testing.T) {
	j := dispatch.Job{ID: 42}
	if got := j.MessageGroupID(); got != "42" {
		t.Errorf("without groupId: %q, want the job id", got)
	}
	j.GroupID = "order-7"
	if got := j.MessageGroupID(); got != "order-7" {
		t.Errorf("with groupId: %q", got)
	}
	if got := (dispatch.Unsent{ID: 9}).MessageGroupID(); got != "9" {
		t.Errorf("unsent without group: %q", got)
	}
	if got := (dispatch.Unsent{ID: 9, GroupID: "g"}).MessageGroupID(); got != "g" {
		t.Errorf("unsent with group: %q", got)
	}
}

func TestCredentialsActivePrevious(t *testing.T) {
	now := time.Date(2025, 10, 4, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	prev := func(ps ...dispatch.PreviousSecret) dispatch.Credentials {
		return dispatch.Credentials{SigningSecret: "new", Previous: ps}
	}
	tests := []struct {
		name string
		c    dispatch.Credentials
		want []string
		ends *time.Time
	}{
		{"no rotation", dispatch.Credentials{SigningSecret: "new"}, nil, nil},
		{"in grace", prev(dispatch.PreviousSecret{Secret: "old", ExpiresAt: later}), []string{"old"}, &later},
		{"grace over", prev(dispatch.PreviousSecret{Secret: "old", ExpiresAt: earlier}), nil, nil},
		{"grace ends now", prev(dispatch.PreviousSecret{Secret: "old", ExpiresAt: now}), nil, nil},
		{"no expiry", prev(dispatch.PreviousSecret{Secret: "old"}), nil, nil},
		{"two rotations, both in grace", prev(dispatch.PreviousSecret{Secret: "s1", ExpiresAt: later},
			dispatch.PreviousSecret{Secret: "s0", ExpiresAt: now.Add(time.Minute)}), []string{"s1", "s0"}, &later},
		{"two rotations, the older over", prev(dispatch.PreviousSecret{Secret: "s1", ExpiresAt: later},
			dispatch.PreviousSecret{Secret: "s0", ExpiresAt: earlier}), []string{"s1"}, &later},
	}
	for _, tt := range tests {
		if got := tt.c.ActivePrevious(now); !slices.Equal(got, tt.want) {
			t.Errorf("%s: ActivePrevious = %q, want %q", tt.name, got, tt.want)
		}
		if got := tt.c.GraceEnds(now); (got == nil) != (tt.ends == nil) || (got != nil && !got.Equal(*tt.ends)) {
			t.Errorf("%s: GraceEnds = %v, want %v", tt.name, got, tt.ends)
		}
	}
}

func TestErrors(t *testing.T) {
	err := fmt.Errorf("store: get job 1: %w", dispatch.Errorf(dispatch.ENotFound, "job %d not found", 1))
	if got := dispatch.ErrorCode(err); got != dispatch.ENotFound {
		t.Errorf("ErrorCode through a wrap = %q", got)
	}
	if got := dispatch.ErrorCode(errors.New("boom")); got != dispatch.EInternal {
		t.Errorf("ErrorCode(plain error) = %q", got)
	}
	if got := dispatch.ErrorCode(nil); got != dispatch.EInternal {
		t.Errorf("ErrorCode(nil) = %q", got)
	}
	if got := err.Error(); got != "store: get job 1: not_found: job 1 not found" {
		t.Errorf("Error() = %q", got)
	}

	var p dispatch.Problems
	if p.Err() != nil {
		t.Errorf("no problems, but an error")
	}
	p.Add("a", "is %s", "bad")
	p.Add("b", "is missing")
	var de *dispatch.Error
	if !errors.As(p.Err(), &de) || de.Code != dispatch.EInvalid || len(de.Details) != 2 ||
		de.Details[0] != (dispatch.FieldError{Field: "a", Message: "is bad"}) {
		t.Errorf("Problems.Err() = %#v", p.Err())
	}
	if got := de.Error(); got != "invalid_request: the request has invalid fields (2 problems)" {
		t.Errorf("Error() = %q", got)
	}

	ra := &dispatch.RetryAfter{Delay: 7 * time.Second, Reason: "HTTP 429"}
	var target *dispatch.RetryAfter
	if !errors.As(fmt.Errorf("mediate: %w", ra), &target) || target.Delay != 7*time.Second {
		t.Errorf("RetryAfter not found with errors.As")
	}
	if ra.Error() != "retry after 7s: HTTP 429" {
		t.Errorf("RetryAfter.Error() = %q", ra.Error())
	}
}

func TestProblemsAreCapped(t *testing.T) {
	var p dispatch.Problems
	for i := range 5000 {
		p.Add(fmt.Sprintf("k%d", i), "unknown field")
	}
	var de *dispatch.Error
	if !errors.As(p.Err(), &de) {
		t.Fatal("not a *dispatch.Error")
	}
	if len(de.Details) != dispatch.MaxDetails || de.Details[dispatch.MaxDetails-1].Message != "and 4901 more problems" {
		t.Errorf("%d details, last %+v", len(de.Details), de.Details[len(de.Details)-1])
	}
	if de.Details[0].Field != "k0" {
		t.Errorf("first detail %+v, want the first problem", de.Details[0])
	}
}
