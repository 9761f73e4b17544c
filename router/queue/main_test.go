package queue_test

import (
	"testing"

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
