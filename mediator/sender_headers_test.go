package mediator_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/webhook"
)

// The delivery keeps the headers it sent, as the receiver got them, but
// never a secret: the bearer token and every signature (the current and,
// during a rotation, the previous one, in both schemes) are redacted.
func TestSendKeepsRequestHeadersWithSecretsRedacted(t *testing.T) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		t.Run(string(scheme), func(t *testing.T) {
			tg := statusTarget(t, 200)
			secret, _ := webhook.NewSecret(scheme)
			previous, _ := webhook.NewSecret(scheme)
			creds := &dispatch.Credentials{BearerToken: "bearer-tok-1234", SigningSecret: secret, SignatureScheme: string(scheme),
				AllowedTargets: []string{tg.URL}, Previous: []dispatch.PreviousSecret{{Secret: previous, ExpiresAt: time.Now().Add(time.Hour)}}}
			j := testJob(tg.URL + "/hooks")
			j.Headers = map[string]string{"X-Tenant": "t1"}
			d := send(t, newSender(5*time.Second, true), j, creds)
			r := tg.next(t)
			h := d.RequestHeaders
			if h == nil {
				t.Fatal("no request headers kept")
			}
			// Every header the receiver got is kept: as sent, or redacted.
			for name := range r.header {
				if name == "Accept-Encoding" { // added by the transport
					continue
				}
				got, ok := h[name]
				switch {
				case !ok:
					t.Errorf("%s was sent but not kept (kept: %v)", name, h)
				case got != r.header.Get(name) && got != mediator.Redacted:
					t.Errorf("%s kept as %q, sent as %q", name, got, r.header.Get(name))
				}
			}
			for _, name := range []string{"Authorization", "X-Flowcatalyst-Signature", "X-Flowcatalyst-Signature-Previous", "Webhook-Signature"} {
				if v, ok := h[name]; ok && v != mediator.Redacted {
					t.Errorf("%s kept as %q, want %s", name, v, mediator.Redacted)
				}
			}
			if h["Authorization"] != mediator.Redacted || h["X-Tenant"] != "t1" || h["X-Dispatch-Job-Id"] != "7311097302432047104" ||
				h["Content-Type"] != "application/json" || h["Host"] != strings.TrimPrefix(tg.URL, "http://") || h["Content-Length"] != fmt.Sprint(len(j.Payload)) {
				t.Errorf("kept request headers: %v", h)
			}
			all := fmt.Sprint(h)
			secrets := []string{"bearer-tok-1234", secret, previous}
			for _, name := range []string{"X-Flowcatalyst-Signature", "X-Flowcatalyst-Signature-Previous", "Webhook-Signature"} {
				if v := r.header.Get(name); v != "" {
					secrets = append(secrets, v)
				}
			}
			for _, s := range secrets {
				if strings.Contains(all, s) {
					t.Errorf("a secret (%.12s…) is in the kept headers: %v", s, h)
				}
			}
		})
	}
}

// The response's headers are kept, bounded: values cut at 512 bytes, at
// most 4 KiB in all (the rest counted), and a receiver's Set-Cookie
// redacted. A delivery that got no response keeps none.
func TestSendKeepsResponseHeadersBounded(t *testing.T) {
	tg := newTarget(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Request-Id", "req-77")
		w.Header().Set("Set-Cookie", "session=receiver-secret")
		w.Header().Set("X-Long", strings.Repeat("v", 2000))
		for i := range 40 {
			w.Header().Set(fmt.Sprintf("X-Filler-%02d", i), strings.Repeat("f", 200))
		}
		w.WriteHeader(http.StatusAccepted)
	})
	d := send(t, newSender(5*time.Second, true), testJob(tg.URL), nil)
	h := d.ResponseHeaders
	if h["X-Request-Id"] != "req-77" || h["Set-Cookie"] != mediator.Redacted {
		t.Errorf("response headers: X-Request-Id %q, Set-Cookie %q", h["X-Request-Id"], h["Set-Cookie"])
	}
	size := 0
	for k, v := range h {
		size += len(k) + len(v)
	}
	if size > 4<<10+64 || !strings.HasSuffix(h["…"], "more not kept") {
		t.Errorf("%d bytes of response headers kept (%d headers), want at most 4 KiB and the rest counted (%q)", size, len(h), h["…"])
	}
	if v, ok := h["X-Long"]; ok && len(v) > 520 {
		t.Errorf("a 2000-byte value kept at %d bytes", len(v))
	}

	refused := send(t, newSender(5*time.Second, true), testJob("http://127.0.0.1:1/"), nil)
	if refused.ResponseHeaders != nil || refused.RequestHeaders == nil {
		t.Errorf("connection refused: request headers %v, response headers %v; want the request's only", refused.RequestHeaders, refused.ResponseHeaders)
	}
}
