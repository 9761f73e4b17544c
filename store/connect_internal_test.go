package store

import (
	"strings"
	"testing"
)

// A DATABASE_URL pgx cannot parse fails the start with the reason, and
// with neither the URL nor its password: Go's URL parser, which pgx's own
// masking relies on, refuses some of these, and its error quotes the URL.
func TestConnectSaysWhyTheDatabaseURLIsBadWithoutItsPassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		url, password, reason string
	}{
		{"postgres://app:S3cr%zzt@db:5432/x", "S3cr%zzt", "percent-encoded"},
		{"postgres://app:S3cret@db:notaport/x", "S3cret", "invalid port"},
		{"postgres://app:S3cret@db/x?sslmode=requir", "S3cret", "sslmode"},
		{"host=db password='S3 cret' sslmode=requir", "S3 cret", "sslmode"},
		{"postgres://app@db/x?password=S3cret&sslmode=requir", "S3cret", "sslmode"},
	} {
		_, err := Connect(t.Context(), c.url, 1)
		if err == nil {
			t.Errorf("Connect(%s): no error", c.reason)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.reason) {
			t.Errorf("Connect: %q does not say why (%q)", msg, c.reason)
		}
		if strings.Contains(msg, c.password) || strings.Contains(msg, "S3") {
			t.Errorf("Connect: %q shows the password", msg)
		}
	}
}
