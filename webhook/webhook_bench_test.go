package webhook_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/webhook"
)

// benchPayload is a typical small webhook body.
var benchPayload = []byte(`{"orderId":"ord_8f14e45fceea167a","customerId":"cus_c9f0f895fb98ab91","amount":99.99,"currency":"EUR","items":3}`)

func BenchmarkSign(b *testing.B) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		b.Run(string(scheme), func(b *testing.B) {
			secret, err := webhook.NewSecret(scheme)
			if err != nil {
				b.Fatal(err)
			}
			s := webhook.Signing{Scheme: scheme, ID: "7311097302432047104", Secret: secret, Timestamp: time.Now()}
			h := http.Header{}
			b.ReportAllocs()
			for b.Loop() {
				if err := webhook.Sign(h, s, benchPayload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		b.Run(string(scheme), func(b *testing.B) {
			secret, err := webhook.NewSecret(scheme)
			if err != nil {
				b.Fatal(err)
			}
			h := http.Header{}
			if err := webhook.Sign(h, webhook.Signing{Scheme: scheme, ID: "7311097302432047104", Secret: secret}, benchPayload); err != nil {
				b.Fatal(err)
			}
			v := webhook.Verifier{Scheme: scheme, Secrets: []string{secret}}
			b.ReportAllocs()
			for b.Loop() {
				if err := v.Verify(h, benchPayload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
