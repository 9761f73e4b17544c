package decode

import (
	"slices"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// A target's port must be one a connection can be made to: url.Parse
// accepts any digits, so without this check such a job would be stored and
// then fail every attempt with a network error.
func TestParseCreateJobTargetPort(t *testing.T) {
	rules := dispatch.JobRules{AllowHTTP: true}
	for _, u := range []string{"https://example.com:0/h", "https://example.com:65536/h", "https://example.com:99999/h",
		"http://127.0.0.1:4294967297/h", "https://[2001:db8::1]:70000/h"} {
		_, err := CreateJob(jobBody(t, map[string]any{"targetUrl": u}), rules, testNow)
		if err == nil {
			t.Errorf("%s: accepted", u)
			continue
		}
		if fields := problemFields(t, err); !slices.Equal(fields, []string{"targetUrl"}) {
			t.Errorf("%s: problems with %v, want targetUrl", u, fields)
		}
	}
	for _, u := range []string{"https://example.com/h", "https://example.com:1/h", "https://example.com:65535/h",
		"https://example.com:/h", "http://[2001:db8::1]:8443/h"} {
		if _, err := CreateJob(jobBody(t, map[string]any{"targetUrl": u}), rules, testNow); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}
