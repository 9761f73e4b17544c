package api

import (
	"strconv"
	"testing"
	"time"
)

// However many addresses guess, the throttle tracks at most
// maxSignInAddresses of them, and an address it tracks stays refused.
func TestSignInThrottleMemoryIsBounded(t *testing.T) {
	th := newSignInThrottle()
	now := time.Now()
	for i := range MaxFailedSignIns {
		if _, ok := th.begin("198.51.100.1", now); !ok {
			t.Fatalf("attempt %d refused", i+1)
		}
	}
	if _, ok := th.begin("198.51.100.1", now); ok {
		t.Fatal("attempt beyond the limit allowed")
	}
	for i := range 3 * maxSignInAddresses {
		th.begin("10."+strconv.Itoa(i>>16&255)+"."+strconv.Itoa(i>>8&255)+"."+strconv.Itoa(i&255), now)
		if n := len(th.byAddr); n > maxSignInAddresses {
			t.Fatalf("tracking %d addresses, cap %d", n, maxSignInAddresses)
		}
	}
	// Once their windows have passed, entries make room for new ones
	// before any live entry is dropped.
	later := now.Add(SignInWindow)
	for range MaxFailedSignIns {
		th.begin("192.0.2.1", later)
	}
	if _, ok := th.begin("192.0.2.1", later); ok {
		t.Error("a new address's sixth attempt allowed after the table was full")
	}
	if n := len(th.byAddr); n != 1 {
		t.Errorf("after every old window passed, %d addresses are tracked, want 1", n)
	}
}

func TestSignInKey(t *testing.T) {
	for in, want := range map[string]string{
		"198.51.100.7":         "198.51.100.7",
		"::ffff:198.51.100.7":  "198.51.100.7",
		"2001:db8:1:2::10":     "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3::10":     "2001:db8:1:3::/64",
		"fe80::1%eth0":         "fe80::/64",
		"":                     "",
	} {
		if got := signInKey(in); got != want {
			t.Errorf("signInKey(%q) = %q, want %q", in, got, want)
		}
	}
}
