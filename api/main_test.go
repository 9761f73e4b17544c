package api_test

import (
	"os"
	"testing"
	"time"
)

// TestMain runs the tests in a zone away from UTC, so that a time rendered
// in the server's local zone instead of UTC is caught on any machine.
func TestMain(m *testing.M) {
	time.Local = time.FixedZone("UTC+5", 5*3600)
	os.Exit(m.Run())
}
