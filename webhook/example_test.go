package webhook_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/dispatchhq/dispatch/webhook"
)

// The sender signs each attempt; during a rotation it passes the previous
// secret too.
func ExampleSign() {
	h := http.Header{}
	err := webhook.Sign(h, webhook.Signing{
		Scheme:    webhook.SchemeStandardWebhooks,
		ID:        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		Secret:    "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		Timestamp: time.Unix(1614265330, 0),
	}, []byte(`{"test": 2432232314}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("webhook-id:", h.Get(webhook.HeaderWebhookID))
	fmt.Println("webhook-timestamp:", h.Get(webhook.HeaderWebhookTimestamp))
	fmt.Println("webhook-signature:", h.Get(webhook.HeaderWebhookSignature))

	h = http.Header{}
	err = webhook.Sign(h, webhook.Signing{
		Secret:    "my-webhook-secret",
		Timestamp: time.Date(2025, 10, 4, 14, 30, 45, 123_000_000, time.UTC),
	}, []byte(`{"orderId":"12345","amount":99.99}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(webhook.HeaderTimestamp+":", h.Get(webhook.HeaderTimestamp))
	fmt.Println(webhook.HeaderSignature+":", h.Get(webhook.HeaderSignature))
	// Output:
	// webhook-id: msg_p5jXN8AQM9LWM0D4loKWxJek
	// webhook-timestamp: 1614265330
	// webhook-signature: v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=
	// X-FLOWCATALYST-TIMESTAMP: 2025-10-04T14:30:45.123Z
	// X-FLOWCATALYST-SIGNATURE: 5f8fcc0127842025d5f156f363f5c7d1cd6c39825e36c7d98eb0b52b41e207f3
}

// A receiver verifies each request before acting on it. During a rotation it
// can hold both the new and the old secret.
func ExampleVerifier_VerifyRequest() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	v := webhook.Verifier{
		// Scheme "" detects the scheme from the headers.
		Secrets: []string{secret},
		// A fixed clock for this example; leave Now nil in real code.
		Now: func() time.Time { return time.Unix(1614265330, 0) },
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, err := v.VerifyRequest(r)
		if err != nil {
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		fmt.Fprintf(w, "accepted %s", payload)
	})

	// What dispatch sends.
	payload := `{"test": 2432232314}`
	r := httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(payload))
	r.Header.Set(webhook.HeaderWebhookID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	r.Header.Set(webhook.HeaderWebhookTimestamp, "1614265330")
	r.Header.Set(webhook.HeaderWebhookSignature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	w := httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Body.String())

	// A forged one.
	r = httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(`{"test": 1}`))
	r.Header.Set(webhook.HeaderWebhookID, "msg_p5jXN8AQM9LWM0D4loKWxJek")
	r.Header.Set(webhook.HeaderWebhookTimestamp, "1614265330")
	r.Header.Set(webhook.HeaderWebhookSignature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	w = httptest.NewRecorder()
	handler.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Body.String())
	// Output:
	// 200 accepted {"test": 2432232314}
	// 401 invalid signature
}

// A receiver verifies each request, then acts on each job once: a job keeps
// its id across retries and redeliveries, so a second arrival is answered
// 200 and not acted on again.
func Example_receiver() {
	const secret = "my-webhook-secret"
	v := webhook.Verifier{Secrets: []string{secret}}
	seen := map[string]bool{} // a real receiver keeps this with its data
	// The ReplayKey of each request accepted in the last 10 minutes (twice
	// the tolerance): a captured request sent again with another job id.
	recent := map[string]bool{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, err := v.VerifyRequest(r)
		if err != nil {
			http.Error(w, "invalid signature", http.StatusUnauthorized)
			return
		}
		key := webhook.ReplayKey(r.Header, payload)
		if recent[key] {
			http.Error(w, "request seen before", http.StatusTooEarly) // retried, with a new timestamp
			return
		}
		recent[key] = true
		id := r.Header.Get(webhook.HeaderJobID)
		if seen[id] {
			fmt.Printf("job %s attempt %s: already done\n", id, r.Header.Get(webhook.HeaderAttempt))
			return // 200: dispatch stops sending it
		}
		seen[id] = true
		fmt.Printf("job %s attempt %s: %s\n", id, r.Header.Get(webhook.HeaderAttempt), payload)
	})

	// The same job arriving twice, as after a redelivery.
	payload := []byte(`{"orderId":"12345"}`)
	for attempt := 1; attempt <= 2; attempt++ {
		r := httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(string(payload)))
		stamp := time.Now().Add(time.Duration(attempt-2) * time.Second) // each attempt is signed anew
		if err := webhook.Sign(r.Header, webhook.Signing{Secret: secret, Timestamp: stamp}, payload); err != nil {
			fmt.Println(err)
			return
		}
		r.Header.Set(webhook.HeaderJobID, "2124332685659275264")
		r.Header.Set(webhook.HeaderAttempt, fmt.Sprint(attempt))
		handler.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// job 2124332685659275264 attempt 1: {"orderId":"12345"}
	// job 2124332685659275264 attempt 2: already done
}
