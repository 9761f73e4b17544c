package dispatch_test

import (
	"testing"

	"github.com/dispatchhq/dispatch"
)

// BenchmarkParsePointer reads the pointer the queue and the processing
// endpoint carry for every delivery.
func BenchmarkParsePointer(b *testing.B) {
	body := []byte(`{"id":"7311097302432047104","poolCode":"DISPATCH-POOL","mediationType":"HTTP","mediationTarget":"http://127.0.0.1:8080/api/dispatch/process","messageGroupId":"acct-17","sequence":7311097302432047104}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := dispatch.ParsePointer(body); err != nil {
			b.Fatal(err)
		}
	}
}
