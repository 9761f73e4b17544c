package dispatch_test

import (
	"encoding/json"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// FuzzPointer checks that any queue message body decodes into a Pointer
// (or fails to) and its id parses (or does not) without panicking, and that
// an id ParseID accepts is positive and round-trips through FormatID.
func FuzzPointer(f *testing.F) {
	for _, s := range []string{
		`{"id":"7311097302432047104","poolCode":"DISPATCH-POOL","mediationType":"HTTP","mediationTarget":"http://127.0.0.1:8080/api/dispatch/process","messageGroupId":"g"}`,
		`{"id":"0"}`,
		`{"id":"-1"}`,
		`{"id":"99999999999999999999"}`,
		`{"id":42}`,
		`{"id":null,"authToken":"x"}`,
		`{"id":"\u0031"}`,
		`[]`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p dispatch.Pointer
		if err := json.Unmarshal(body, &p); err != nil {
			return
		}
		id, ok := dispatch.ParseID(p.ID)
		if !ok {
			return
		}
		// "01" and "+1" also name job 1; what matters is a positive id
		// that survives the round trip through its canonical form.
		if back, ok := dispatch.ParseID(dispatch.FormatID(id)); id <= 0 || !ok || back != id {
			t.Fatalf("ParseID(%q) = %d, which does not round-trip", p.ID, id)
		}
	})
}
