package outbox_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dispatchhq/dispatch/router/sqstest"
)

func TestMain(m *testing.M) {
	sqstest.SetEnv()
	goleak.VerifyTestMain(m,
		// idle keep-alive connections of the AWS SDK's shared HTTP client
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

func eventually(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
