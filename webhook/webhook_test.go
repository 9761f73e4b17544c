package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/webhook"
)

var (
	// now is the clock of every verifier in these tests.
	now     = time.Date(2025, 10, 4, 14, 30, 45, 123_000_000, time.UTC)
	payload = []byte(`{"orderId":"12345","amount":99.99}`)
)

const (
	oldSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	newSecret = "whsec_dGhpcnR5LXR3by1ieXRlcy1vZi1rZXktbWF0ZXJpYWw="
)

func clock(t time.Time) func() time.Time { return func() time.Time { return t } }

// sign returns the headers of payload signed at now.
func sign(t testing.TB, s webhook.Signing, body []byte) http.Header {
	t.Helper()
	if s.Timestamp.IsZero() {
		s.Timestamp = now
	}
	h := http.Header{}
	if err := webhook.Sign(h, s, body); err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return h
}

func TestSignFlowCatalystKnownAnswer(t *testing.T) {
	const secret = "my-webhook-secret"
	const stamp = "2025-10-04T14:30:45.123Z"
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(stamp + string(payload)))
	want := hex.EncodeToString(m.Sum(nil))

	// The timestamp is converted to UTC whatever its location.
	at := now.In(time.FixedZone("CEST", 2*60*60))
	h := sign(t, webhook.Signing{Scheme: webhook.SchemeFlowCatalyst, Secret: secret, Timestamp: at}, payload)

	if got := h.Get(webhook.HeaderTimestamp); got != stamp {
		t.Errorf("timestamp = %q, want %q", got, stamp)
	}
	if got := h.Get(webhook.HeaderSignature); got != want {
		t.Errorf("signature = %q, want %q", got, want)
	}
	if got := h.Values(webhook.HeaderSignaturePrevious); got != nil {
		t.Errorf("previous signature = %q without a previous secret", got)
	}
	if len(h) != 2 {
		t.Errorf("headers = %v, want only the timestamp and the signature", h)
	}
}

func TestSignFlowCatalystTimestampAlwaysHasMilliseconds(t *testing.T) {
	for _, tc := range []struct {
		at   time.Time
		want string
	}{
		{time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), "2025-01-02T03:04:05.000Z"},
		{time.Date(2025, 1, 2, 3, 4, 5, 7_000_000, time.UTC), "2025-01-02T03:04:05.007Z"},
		{time.Date(2025, 1, 2, 3, 4, 5, 999_999_999, time.UTC), "2025-01-02T03:04:05.999Z"},
	} {
		// The empty scheme is FLOWCATALYST.
		h := sign(t, webhook.Signing{Secret: "s", Timestamp: tc.at}, payload)
		if got := h.Get(webhook.HeaderTimestamp); got != tc.want {
			t.Errorf("timestamp of %v = %q, want %q", tc.at, got, tc.want)
		}
	}
}

// The example of the Standard Webhooks specification and its libraries.
func TestSignStandardWebhooksKnownAnswer(t *testing.T) {
	const (
		id   = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		want = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	body := []byte(`{"test": 2432232314}`)
	at := time.Unix(1614265330, 0)
	h := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: id, Secret: oldSecret, Timestamp: at}, body)

	for name, want := range map[string]string{
		webhook.HeaderWebhookID:        id,
		webhook.HeaderWebhookTimestamp: "1614265330",
		webhook.HeaderWebhookSignature: want,
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	v := webhook.Verifier{Scheme: webhook.SchemeStandardWebhooks, Secrets: []string{oldSecret}, Now: clock(at)}
	if err := v.Verify(h, body); err != nil {
		t.Errorf("Verify: %v", err)
	}
	// Without the prefix the secret is the same key.
	v.Secrets = []string{strings.TrimPrefix(oldSecret, "whsec_")}
	if err := v.Verify(h, body); err != nil {
		t.Errorf("Verify with unprefixed secret: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		for _, body := range [][]byte{payload, nil, []byte("not json \x00\xff")} {
			h := sign(t, webhook.Signing{Scheme: scheme, ID: "job-1", Secret: newSecret}, body)
			for _, vs := range []webhook.Scheme{scheme, ""} {
				v := webhook.Verifier{Scheme: vs, Secrets: []string{newSecret}, Now: clock(now)}
				if err := v.Verify(h, body); err != nil {
					t.Errorf("%s signed, verifier scheme %q, body %q: %v", scheme, vs, body, err)
				}
			}
		}
	}
}

func TestRotation(t *testing.T) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		t.Run(string(scheme), func(t *testing.T) {
			oldOnly := webhook.Verifier{Scheme: scheme, Secrets: []string{oldSecret}, Now: clock(now)}
			newOnly := webhook.Verifier{Scheme: scheme, Secrets: []string{newSecret}, Now: clock(now)}
			both := webhook.Verifier{Scheme: scheme, Secrets: []string{newSecret, oldSecret}, Now: clock(now)}

			// During the grace period both signatures are sent.
			during := sign(t, webhook.Signing{Scheme: scheme, ID: "job-1", Secret: newSecret, Previous: []string{oldSecret}}, payload)
			for name, v := range map[string]webhook.Verifier{"old only": oldOnly, "new only": newOnly, "both": both} {
				if err := v.Verify(during, payload); err != nil {
					t.Errorf("during grace, %s receiver: %v", name, err)
				}
			}

			// After it, only the new secret signs.
			after := sign(t, webhook.Signing{Scheme: scheme, ID: "job-1", Secret: newSecret}, payload)
			if err := oldOnly.Verify(after, payload); !errors.Is(err, webhook.ErrNoMatch) {
				t.Errorf("after grace, old receiver: err = %v, want ErrNoMatch", err)
			}
			for name, v := range map[string]webhook.Verifier{"new only": newOnly, "both": both} {
				if err := v.Verify(after, payload); err != nil {
					t.Errorf("after grace, %s receiver: %v", name, err)
				}
			}
		})
	}
}

func TestRotationHeaders(t *testing.T) {
	h := sign(t, webhook.Signing{Secret: newSecret, Previous: []string{oldSecret}}, payload)
	cur, prev := h.Get(webhook.HeaderSignature), h.Get(webhook.HeaderSignaturePrevious)
	if cur == "" || prev == "" || cur == prev {
		t.Errorf("FLOWCATALYST rotation headers: current %q, previous %q", cur, prev)
	}
	// Re-signing a retry after the grace period drops the previous signature.
	if err := webhook.Sign(h, webhook.Signing{Secret: newSecret, Timestamp: now}, payload); err != nil {
		t.Fatal(err)
	}
	if got := h.Values(webhook.HeaderSignaturePrevious); got != nil {
		t.Errorf("previous signature %q kept after re-signing without a previous secret", got)
	}
	if got := h.Get(webhook.HeaderSignature); got != cur {
		t.Errorf("re-signed signature = %q, want %q", got, cur)
	}

	h = sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret, Previous: []string{oldSecret}}, payload)
	sigs := strings.Split(h.Get(webhook.HeaderWebhookSignature), " ")
	single := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload)
	if len(sigs) != 2 || sigs[0] != single.Get(webhook.HeaderWebhookSignature) || !strings.HasPrefix(sigs[1], "v1,") {
		t.Errorf("STANDARD_WEBHOOKS rotation signatures = %q, want current then previous", sigs)
	}
}

func TestTolerance(t *testing.T) {
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
		for _, tc := range []struct {
			name      string
			skew      time.Duration // receiver clock minus signing time
			tolerance time.Duration
			wantErr   error
		}{
			{"on time", 0, 0, nil},
			{"4m late", 4 * time.Minute, 0, nil},
			{"4m early", -4 * time.Minute, 0, nil},
			{"6m late", 6 * time.Minute, 0, webhook.ErrTimestampOutOfRange},
			{"6m early", -6 * time.Minute, 0, webhook.ErrTimestampOutOfRange},
			{"a day late", 24 * time.Hour, 0, webhook.ErrTimestampOutOfRange},
			{"6m late, 10m tolerance", 6 * time.Minute, 10 * time.Minute, nil},
			{"6m early, 10m tolerance", -6 * time.Minute, 10 * time.Minute, nil},
			{"2m late, 1m tolerance", 2 * time.Minute, time.Minute, webhook.ErrTimestampOutOfRange},
			{"2m early, 1m tolerance", -2 * time.Minute, time.Minute, webhook.ErrTimestampOutOfRange},
		} {
			h := sign(t, webhook.Signing{Scheme: scheme, ID: "job-1", Secret: newSecret}, payload)
			v := webhook.Verifier{Scheme: scheme, Secrets: []string{newSecret}, Tolerance: tc.tolerance, Now: clock(now.Add(tc.skew))}
			if err := v.Verify(h, payload); !errors.Is(err, tc.wantErr) {
				t.Errorf("%s, %s: err = %v, want %v", scheme, tc.name, err, tc.wantErr)
			}
		}
	}
}

func TestTampered(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scheme webhook.Scheme
		change func(h http.Header, body []byte) []byte
	}{
		{"FLOWCATALYST payload", webhook.SchemeFlowCatalyst, func(h http.Header, body []byte) []byte {
			return bytes.Replace(body, []byte("99.99"), []byte("0.01"), 1)
		}},
		{"FLOWCATALYST payload appended", webhook.SchemeFlowCatalyst, func(h http.Header, body []byte) []byte {
			return append(body, ' ')
		}},
		{"FLOWCATALYST timestamp", webhook.SchemeFlowCatalyst, func(h http.Header, body []byte) []byte {
			h.Set(webhook.HeaderTimestamp, "2025-10-04T14:30:46.123Z")
			return body
		}},
		{"FLOWCATALYST signature", webhook.SchemeFlowCatalyst, func(h http.Header, body []byte) []byte {
			h.Set(webhook.HeaderSignature, strings.Repeat("0", 64))
			return body
		}},
		{"STANDARD_WEBHOOKS payload", webhook.SchemeStandardWebhooks, func(h http.Header, body []byte) []byte {
			return bytes.Replace(body, []byte("12345"), []byte("12346"), 1)
		}},
		{"STANDARD_WEBHOOKS id", webhook.SchemeStandardWebhooks, func(h http.Header, body []byte) []byte {
			h.Set(webhook.HeaderWebhookID, "job-2")
			return body
		}},
		{"STANDARD_WEBHOOKS timestamp", webhook.SchemeStandardWebhooks, func(h http.Header, body []byte) []byte {
			h.Set(webhook.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix()+1, 10))
			return body
		}},
		{"STANDARD_WEBHOOKS only other versions", webhook.SchemeStandardWebhooks, func(h http.Header, body []byte) []byte {
			sig := strings.TrimPrefix(h.Get(webhook.HeaderWebhookSignature), "v1,")
			h.Set(webhook.HeaderWebhookSignature, "v1a,"+sig+" v2,"+sig)
			return body
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := sign(t, webhook.Signing{Scheme: tc.scheme, ID: "job-1", Secret: newSecret}, payload)
			body := tc.change(h, bytes.Clone(payload))
			v := webhook.Verifier{Scheme: tc.scheme, Secrets: []string{newSecret}, Now: clock(now)}
			if err := v.Verify(h, body); !errors.Is(err, webhook.ErrNoMatch) {
				t.Errorf("err = %v, want ErrNoMatch", err)
			}
		})
	}
}

func TestStandardWebhooksSignatureList(t *testing.T) {
	h := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload)
	good := h.Get(webhook.HeaderWebhookSignature)
	v := webhook.Verifier{Secrets: []string{newSecret}, Now: clock(now)}
	for _, list := range []string{
		"v1a,bm90IGEgc2lnbmF0dXJl v2,AAAA " + good,
		"v1,AAAA  garbage " + good + " ",
		"v1,!!!not-base64 " + good,
	} {
		h.Set(webhook.HeaderWebhookSignature, list)
		if err := v.Verify(h, payload); err != nil {
			t.Errorf("%q: %v", list, err)
		}
	}
}

func TestMissingHeaders(t *testing.T) {
	fc := sign(t, webhook.Signing{Secret: newSecret}, payload)
	sw := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload)
	for _, tc := range []struct {
		scheme webhook.Scheme
		signed http.Header
		header string
	}{
		{webhook.SchemeFlowCatalyst, fc, webhook.HeaderSignature},
		{webhook.SchemeFlowCatalyst, fc, webhook.HeaderTimestamp},
		{webhook.SchemeStandardWebhooks, sw, webhook.HeaderWebhookID},
		{webhook.SchemeStandardWebhooks, sw, webhook.HeaderWebhookTimestamp},
		{webhook.SchemeStandardWebhooks, sw, webhook.HeaderWebhookSignature},
	} {
		for _, value := range []*string{nil, new(string)} { // absent, then empty
			h := tc.signed.Clone()
			h.Del(tc.header)
			if value != nil {
				h.Set(tc.header, *value)
			}
			v := webhook.Verifier{Scheme: tc.scheme, Secrets: []string{newSecret}, Now: clock(now)}
			err := v.Verify(h, payload)
			if !errors.Is(err, webhook.ErrMissingHeaders) || !strings.Contains(err.Error(), tc.header) {
				t.Errorf("%s without %s: err = %v, want ErrMissingHeaders naming it", tc.scheme, tc.header, err)
			}
		}
	}
	v := webhook.Verifier{Secrets: []string{newSecret}, Now: clock(now)}
	if err := v.Verify(http.Header{}, payload); !errors.Is(err, webhook.ErrMissingHeaders) {
		t.Errorf("no headers: err = %v, want ErrMissingHeaders", err)
	}
}

func TestWrongScheme(t *testing.T) {
	fc := sign(t, webhook.Signing{Scheme: webhook.SchemeFlowCatalyst, Secret: newSecret}, payload)
	sw := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload)

	v := webhook.Verifier{Scheme: webhook.SchemeStandardWebhooks, Secrets: []string{newSecret}, Now: clock(now)}
	if err := v.Verify(fc, payload); !errors.Is(err, webhook.ErrMissingHeaders) {
		t.Errorf("FLOWCATALYST request, STANDARD_WEBHOOKS verifier: err = %v, want ErrMissingHeaders", err)
	}
	v.Scheme = webhook.SchemeFlowCatalyst
	if err := v.Verify(sw, payload); !errors.Is(err, webhook.ErrMissingHeaders) {
		t.Errorf("STANDARD_WEBHOOKS request, FLOWCATALYST verifier: err = %v, want ErrMissingHeaders", err)
	}
	v.Scheme = "HMAC"
	if err := v.Verify(fc, payload); err == nil {
		t.Error("unknown verifier scheme: err = nil")
	}
}

func TestBadTimestamp(t *testing.T) {
	v := webhook.Verifier{Secrets: []string{newSecret}, Now: clock(now)}
	for _, stamp := range []string{"yesterday", "1759588245", "2025-10-04 14:30:45.123", "2025-13-04T14:30:45.123Z"} {
		h := sign(t, webhook.Signing{Secret: newSecret}, payload)
		h.Set(webhook.HeaderTimestamp, stamp)
		if err := v.Verify(h, payload); !errors.Is(err, webhook.ErrBadTimestamp) {
			t.Errorf("FLOWCATALYST timestamp %q: err = %v, want ErrBadTimestamp", stamp, err)
		}
	}
	for _, stamp := range []string{"yesterday", "2025-10-04T14:30:45Z", "1.5e9", "99999999999999999999"} {
		h := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload)
		h.Set(webhook.HeaderWebhookTimestamp, stamp)
		if err := v.Verify(h, payload); !errors.Is(err, webhook.ErrBadTimestamp) {
			t.Errorf("STANDARD_WEBHOOKS timestamp %q: err = %v, want ErrBadTimestamp", stamp, err)
		}
	}
}

func TestVerifierMisconfigured(t *testing.T) {
	fc := sign(t, webhook.Signing{Secret: newSecret}, payload)
	sw := sign(t, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload)
	for _, tc := range []struct {
		name string
		v    webhook.Verifier
		h    http.Header
	}{
		{"no secrets", webhook.Verifier{}, fc},
		{"empty FLOWCATALYST secret", webhook.Verifier{Secrets: []string{newSecret, ""}}, fc},
		{"undecodable STANDARD_WEBHOOKS secret", webhook.Verifier{Secrets: []string{"whsec_s3cr3t!!"}}, sw},
		{"empty STANDARD_WEBHOOKS key", webhook.Verifier{Secrets: []string{"whsec_"}}, sw},
	} {
		tc.v.Now = clock(now)
		err := tc.v.Verify(tc.h, payload)
		for _, sentinel := range []error{nil, webhook.ErrMissingHeaders, webhook.ErrBadTimestamp, webhook.ErrTimestampOutOfRange, webhook.ErrNoMatch} {
			if errors.Is(err, sentinel) {
				t.Errorf("%s: err = %v, want a configuration error", tc.name, err)
			}
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: error %q contains the secret", tc.name, err)
		}
	}
}

func TestSignErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    webhook.Signing
	}{
		{"empty secret", webhook.Signing{}},
		{"unknown scheme", webhook.Signing{Scheme: "HMAC", Secret: newSecret}},
		{"STANDARD_WEBHOOKS without id", webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, Secret: newSecret}},
		{"STANDARD_WEBHOOKS bad secret", webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: "whsec_%%%"}},
		{"STANDARD_WEBHOOKS bad previous", webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret, Previous: []string{"%%%"}}},
	} {
		h := http.Header{}
		err := webhook.Sign(h, tc.s, payload)
		if err == nil {
			t.Errorf("%s: err = nil", tc.name)
			continue
		}
		if strings.Contains(err.Error(), "%%%") {
			t.Errorf("%s: error %q contains the secret", tc.name, err)
		}
		if len(h) != 0 {
			t.Errorf("%s: headers %v set despite the error", tc.name, h)
		}
	}
	if err := webhook.Sign(nil, webhook.Signing{Secret: newSecret}, payload); err == nil {
		t.Error("nil header: err = nil")
	}
}

func TestSignZeroTimestampIsNow(t *testing.T) {
	before := time.Now()
	h := http.Header{}
	if err := webhook.Sign(h, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload); err != nil {
		t.Fatal(err)
	}
	sec, err := strconv.ParseInt(h.Get(webhook.HeaderWebhookTimestamp), 10, 64)
	if err != nil || sec < before.Unix() || sec > time.Now().Unix() {
		t.Errorf("timestamp = %q, want now", h.Get(webhook.HeaderWebhookTimestamp))
	}
	// And a verifier on the real clock accepts it.
	if err := (webhook.Verifier{Secrets: []string{newSecret}}).Verify(h, payload); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func TestScheme(t *testing.T) {
	for s, want := range map[webhook.Scheme]bool{
		webhook.SchemeFlowCatalyst:     true,
		webhook.SchemeStandardWebhooks: true,
		"":                             false,
		"flowcatalyst":                 false,
		"HMAC":                         false,
	} {
		if got := s.Valid(); got != want {
			t.Errorf("Scheme(%q).Valid() = %v, want %v", s, got, want)
		}
	}
}

func TestNewSecret(t *testing.T) {
	seen := map[string]bool{}
	for _, scheme := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks, ""} {
		secret, err := webhook.NewSecret(scheme)
		if err != nil {
			t.Fatalf("NewSecret(%q): %v", scheme, err)
		}
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if !strings.HasPrefix(secret, "whsec_") || err != nil || len(key) != 32 {
			t.Errorf("NewSecret(%q) = a secret of form %q...; want whsec_ and 32 base64 bytes", scheme, secret[:min(len(secret), 6)])
		}
		if seen[secret] {
			t.Errorf("NewSecret(%q) repeated a secret", scheme)
		}
		seen[secret] = true
		for _, s := range []webhook.Scheme{webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks} {
			if err := webhook.ValidateSecret(s, secret); err != nil {
				t.Errorf("ValidateSecret(%q, NewSecret(%q)): %v", s, scheme, err)
			}
		}
	}
	if _, err := webhook.NewSecret("HMAC"); err == nil {
		t.Error("NewSecret(unknown scheme): err = nil")
	}
}

func TestValidateSecret(t *testing.T) {
	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA5}, n)) }
	for _, tc := range []struct {
		scheme webhook.Scheme
		secret string
		ok     bool
	}{
		{webhook.SchemeFlowCatalyst, "x", true},
		{webhook.SchemeFlowCatalyst, "correct horse battery staple", true},
		{webhook.SchemeFlowCatalyst, strings.Repeat("s", 256), true},
		{"", "x", true},
		{webhook.SchemeFlowCatalyst, "", false},
		{webhook.SchemeFlowCatalyst, strings.Repeat("s", 257), false},
		{webhook.SchemeStandardWebhooks, oldSecret, true},
		{webhook.SchemeStandardWebhooks, "whsec_" + b64(24), true},
		{webhook.SchemeStandardWebhooks, "whsec_" + b64(64), true},
		{webhook.SchemeStandardWebhooks, b64(32), true},
		{webhook.SchemeStandardWebhooks, "whsec_" + b64(23), false},
		{webhook.SchemeStandardWebhooks, "whsec_" + b64(65), false},
		{webhook.SchemeStandardWebhooks, "whsec_", false},
		{webhook.SchemeStandardWebhooks, "", false},
		{webhook.SchemeStandardWebhooks, "whsec_s3cr3t-passw0rd!", false},
		{webhook.SchemeStandardWebhooks, "s3cr3t-passw0rd-that-is-long-enough", false},
		{webhook.SchemeStandardWebhooks, "whsec_" + strings.Repeat("A", 256), false},
		{"HMAC", "x", false},
	} {
		err := webhook.ValidateSecret(tc.scheme, tc.secret)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateSecret(%q, %.20q...) = %v, want ok %v", tc.scheme, tc.secret, err, tc.ok)
		}
		if err != nil && tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
			t.Errorf("ValidateSecret(%q, ...) error %q contains the secret", tc.scheme, err)
		}
		if err != nil && tc.scheme.Valid() && !errors.Is(err, webhook.ErrInvalidSecret) {
			t.Errorf("ValidateSecret(%q, ...) = %v, want ErrInvalidSecret", tc.scheme, err)
		}
	}
}

func TestVerifyRequest(t *testing.T) {
	v := webhook.Verifier{Secrets: []string{newSecret}, Now: clock(now)}

	r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(payload))
	r.Header = sign(t, webhook.Signing{Secret: newSecret}, payload)
	got, err := v.VerifyRequest(r)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("VerifyRequest = %q, %v; want the payload", got, err)
	}
	if again, err := io.ReadAll(r.Body); err != nil || !bytes.Equal(again, payload) {
		t.Errorf("body after VerifyRequest = %q, %v; want the payload again", again, err)
	}

	// A tampered body fails, returns nothing, and is still readable.
	tampered := append(bytes.Clone(payload), '!')
	r = httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(tampered))
	r.Header = sign(t, webhook.Signing{Secret: newSecret}, payload)
	if got, err := v.VerifyRequest(r); !errors.Is(err, webhook.ErrNoMatch) || got != nil {
		t.Errorf("tampered: VerifyRequest = %q, %v; want nil, ErrNoMatch", got, err)
	}
	if again, _ := io.ReadAll(r.Body); !bytes.Equal(again, tampered) {
		t.Errorf("tampered body after VerifyRequest = %q", again)
	}

	// An empty body is an empty payload.
	r = httptest.NewRequest(http.MethodPost, "/hook", nil)
	r.Header = sign(t, webhook.Signing{Secret: newSecret}, nil)
	if got, err := v.VerifyRequest(r); err != nil || len(got) != 0 {
		t.Errorf("empty body: VerifyRequest = %q, %v", got, err)
	}
	r.Body = nil
	if _, err := v.VerifyRequest(r); err != nil {
		t.Errorf("nil body: VerifyRequest: %v", err)
	}
}

func TestVerifyRequestTooLarge(t *testing.T) {
	big := bytes.Repeat([]byte("a"), webhook.MaxPayloadBytes+1)
	v := webhook.Verifier{Secrets: []string{newSecret}, Now: clock(now)}

	r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(big))
	r.Header = sign(t, webhook.Signing{Secret: newSecret}, big)
	if _, err := v.VerifyRequest(r); !errors.Is(err, webhook.ErrPayloadTooLarge) {
		t.Errorf("VerifyRequest(%d bytes) err = %v, want ErrPayloadTooLarge", len(big), err)
	}
	if again, _ := io.ReadAll(r.Body); len(again) != len(big) {
		t.Errorf("body after ErrPayloadTooLarge has %d bytes, want %d", len(again), len(big))
	}

	// Exactly the limit is accepted.
	limit := big[:webhook.MaxPayloadBytes]
	r = httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(limit))
	r.Header = sign(t, webhook.Signing{Secret: newSecret}, limit)
	if _, err := v.VerifyRequest(r); err != nil {
		t.Errorf("VerifyRequest(%d bytes): %v", len(limit), err)
	}
}

func FuzzVerify(f *testing.F) {
	fcSig := sign(f, webhook.Signing{Secret: newSecret}, payload).Get(webhook.HeaderSignature)
	swSig := sign(f, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, ID: "job-1", Secret: newSecret}, payload).Get(webhook.HeaderWebhookSignature)
	stamp := now.Format("2006-01-02T15:04:05.000Z")
	unix := strconv.FormatInt(now.Unix(), 10)
	// scheme selects the verifier: 0 detect, 1 FLOWCATALYST, 2 STANDARD_WEBHOOKS.
	f.Add(uint8(1), fcSig, "", stamp, "", "", "", payload)
	f.Add(uint8(0), fcSig, fcSig, stamp, "", "", "", payload)
	f.Add(uint8(2), "", "", "", "job-1", unix, swSig, payload)
	f.Add(uint8(0), "", "", "", "job-1", unix, "v1a,xyz v1, v1,,, "+swSig, payload)
	f.Add(uint8(2), "", "", "", "job-1", "-9223372036854775808", "v1,"+strings.Repeat("A", 44), []byte{})
	f.Add(uint8(1), "zz", "", "9999-12-31T23:59:59.999999999+14:00", "", "", "", []byte("\x00"))

	f.Fuzz(func(t *testing.T, scheme uint8, sig, prev, stamp, id, unix, sigs string, body []byte) {
		h := http.Header{}
		for name, value := range map[string]string{
			webhook.HeaderSignature:         sig,
			webhook.HeaderSignaturePrevious: prev,
			webhook.HeaderTimestamp:         stamp,
			webhook.HeaderWebhookID:         id,
			webhook.HeaderWebhookTimestamp:  unix,
			webhook.HeaderWebhookSignature:  sigs,
		} {
			if value != "" {
				h.Set(name, value)
			}
		}
		v := webhook.Verifier{
			Scheme:  []webhook.Scheme{"", webhook.SchemeFlowCatalyst, webhook.SchemeStandardWebhooks}[scheme%3],
			Secrets: []string{oldSecret, newSecret},
			Now:     clock(now),
		}
		if err := v.Verify(h, body); err != nil {
			if !wrapsSentinel(err) {
				t.Errorf("Verify error %v wraps none of the sentinels", err)
			}
		}

		// Whatever the body and id, what Sign makes verifies, and not for another body.
		s := webhook.Signing{Scheme: v.Scheme, ID: id, Secret: newSecret, Previous: []string{oldSecret}, Timestamp: now}
		if s.ID == "" {
			s.ID = "job-1"
		}
		if s.Scheme == "" && scheme%2 == 0 {
			s.Scheme = webhook.SchemeStandardWebhooks
		}
		signed := http.Header{}
		if err := webhook.Sign(signed, s, body); err != nil {
			t.Fatalf("Sign: %v", err)
		}
		if err := v.Verify(signed, body); err != nil {
			t.Errorf("Verify(Sign(%+v)): %v", s, err)
		}
		if err := v.Verify(signed, append(bytes.Clone(body), 'x')); !errors.Is(err, webhook.ErrNoMatch) {
			t.Errorf("Verify(Sign(%+v)) with another body: err = %v, want ErrNoMatch", s, err)
		}
	})
}

func wrapsSentinel(err error) bool {
	for _, sentinel := range []error{webhook.ErrMissingHeaders, webhook.ErrBadTimestamp, webhook.ErrTimestampOutOfRange, webhook.ErrNoMatch} {
		if errors.Is(err, sentinel) {
			return true
		}
	}
	return false
}

// A FLOWCATALYST request captured and sent again within the tolerance with
// another job id still verifies (the id is not signed), and webhook.ReplayKey is
// what tells it from a new delivery: the same for the copy, whatever its
// job id or the order of its signatures, and different for the next
// attempt (a new timestamp) or another body.
func TestReplayKeyIsWhatTheSignatureCovers(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	v := webhook.Verifier{Secrets: []string{"new-secret", "old-secret"}, Now: func() time.Time { return at }}
	payload := []byte(`{"orderId":"12345"}`)
	signed := func(stamp time.Time, body []byte) http.Header {
		h := http.Header{}
		if err := webhook.Sign(h, webhook.Signing{Secret: "new-secret", Previous: []string{"old-secret"}, Timestamp: stamp}, body); err != nil {
			t.Fatal(err)
		}
		h.Set(webhook.HeaderJobID, "2124332685659275264")
		return h
	}
	orig := signed(at, payload)
	copied := orig.Clone()
	copied.Set(webhook.HeaderJobID, "2124332685659275999")
	copied.Set(webhook.HeaderSignature, orig.Get(webhook.HeaderSignaturePrevious)) // the old secret's signature in front
	copied.Set(webhook.HeaderSignaturePrevious, orig.Get(webhook.HeaderSignature))
	if err := v.Verify(copied, payload); err != nil {
		t.Fatalf("the copy with another job id does not verify (%v): this test no longer shows the replay", err)
	}
	key := webhook.ReplayKey(orig, payload)
	if got := webhook.ReplayKey(copied, payload); got != key {
		t.Errorf("copy's key %q, want the original's %q", got, key)
	}
	if got := webhook.ReplayKey(signed(at.Add(time.Millisecond), payload), payload); got == key {
		t.Error("the next attempt (a new timestamp) has the first one's key")
	}
	other := []byte(`{"orderId":"12346"}`)
	if got := webhook.ReplayKey(signed(at, other), other); got == key {
		t.Error("another body has the same key")
	}

	std := http.Header{}
	if err := webhook.Sign(std, webhook.Signing{Scheme: webhook.SchemeStandardWebhooks, Secret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")),
		ID: "2124332685659275264", Timestamp: at}, payload); err != nil {
		t.Fatal(err)
	}
	if got, want := webhook.ReplayKey(std, payload), "v1:2124332685659275264:"+std.Get(webhook.HeaderWebhookTimestamp); got != want {
		t.Errorf("STANDARD_WEBHOOKS key %q, want %q", got, want)
	}
}
