package dispatch_test

import (
	"encoding/json"
	"testing"

	"github.com/dispatchhq/dispatch"
)

// FuzzPointer checks that ParsePointer reads any queue message body as
// encoding/json reads it (the pointer, or an error, the same either way),
// and that an id ParseID accepts is positive and round-trips through
// FormatID.
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
		`{"ID":"1","PoolCode":"P","pool_code":"Q","id":"2"}`,
		"{\"id\":\"1\",\"messageGroupId\":\"\xff\"}",
		`{"id":"1","sequence":1.5}`,
		`{"id":"1"} {"id":"2"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var p dispatch.Pointer
		errV1 := json.Unmarshal(body, &p)
		got, err := dispatch.ParsePointer(body)
		switch {
		case errV1 == nil && p.ID != "" && (err != nil || got != p):
			t.Fatalf("ParsePointer(%q) = %+v, %v; encoding/json reads %+v", body, got, err, p)
		case (errV1 != nil || p.ID == "") && err == nil:
			t.Fatalf("ParsePointer(%q) = %+v; encoding/json refuses it (%v) or finds no id", body, got, errV1)
		case err != nil:
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
