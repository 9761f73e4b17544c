package api_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain runs the tests in a zone away from UTC, so that a time rendered
// in the server's local zone instead of UTC is caught on any machine, and
// fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) {
	time.Local = time.FixedZone("UTC+5", 5*3600)
	goleak.VerifyTestMain(m, leakIgnores...)
}

// leakIgnores are the idle keep-alive connections of HTTP clients and
// pgx's pool health checker, which end on their own.
var leakIgnores = []goleak.Option{
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
}
