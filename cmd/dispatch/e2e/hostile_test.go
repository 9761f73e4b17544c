package e2e

// End-to-end tests of hostile input and authentication: a few
// hundred generated bad requests, the processing endpoint's token, and
// DISPATCH_INSECURE. Every job target named here is on 127.0.0.1.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch/router/sqstest"
)

// hostileRequest is one request that must be refused.
type hostileRequest struct {
	name        string
	path        string // default /api/dispatch/jobs
	contentType string // default application/json; "-" sends none
	token       string // default apiToken (adminToken for admin paths)
	body        []byte
	chunked     bool     // send without Content-Length
	want        int      // default 400
	fields      []string // fields the answer must name in details
}

// hostileSecrets are values configured for the hostile-input instance;
// none may appear in an answer or a log line.
type hostileSecrets struct {
	key, credBearer, credSecret string
}

func (s hostileSecrets) all() []string {
	return []string{apiToken, adminToken, internalToken, s.key, s.credBearer, s.credSecret}
}

// hostileCreateRequests generates the bad requests. Each mutates a valid
// body (base) in one way, so a 4xx can only come from the mutation; the
// secrets are planted where an echo would leak them.
func hostileCreateRequests(target string, maxPayload int, sec hostileSecrets) []hostileRequest {
	base := func() map[string]any {
		return map[string]any{"source": "order-service", "type": "order.created", "targetUrl": target,
			"payload": `{"orderId":"12345"}`}
	}
	with := func(k string, v any) []byte {
		b := base()
		b[k] = v
		out, err := json.Marshal(b)
		if err != nil {
			panic(err)
		}
		return out
	}
	// withRaw puts raw JSON text as the value of k.
	withRaw := func(k, raw string) []byte {
		b, _ := json.Marshal(base())
		return append(b[:len(b)-1], fmt.Sprintf(`,%q:%s}`, k, raw)...)
	}
	without := func(k string) []byte {
		b := base()
		delete(b, k)
		out, _ := json.Marshal(b)
		return out
	}
	valid, _ := json.Marshal(base())
	var reqs []hostileRequest
	add := func(name string, body []byte, fields ...string) {
		reqs = append(reqs, hostileRequest{name: name, body: body, fields: fields})
	}

	// Oversize bodies → 413, with and without Content-Length.
	pad := strings.Repeat("A", maxPayload)
	reqs = append(reqs,
		hostileRequest{name: "oversize payload", body: with("payload", pad), want: 413},
		hostileRequest{name: "oversize payload chunked", body: with("payload", pad), chunked: true, want: 413},
		hostileRequest{name: "oversize 4x garbage", body: bytes.Repeat([]byte("x"), 4*maxPayload), want: 413},
		hostileRequest{name: "oversize metadata chunked", body: with("metadata", map[string]string{"k": pad}), chunked: true, want: 413},
		hostileRequest{name: "oversize batch", path: "/api/dispatch/jobs/batch", body: []byte(`{"jobs":[` + strings.Repeat(string(valid)+",", maxPayload/len(valid)+1) + string(valid) + `]}`), want: 413},
	)
	// Wrong content types with a valid body → 415.
	for _, ct := range []string{"-", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
		"application/xml", "text/json", "application/jsonp", "application/json-seq", "json", "*/*", "application/*",
		"application/json; charset=utf-8; charset=latin1", "application/json;;", "text/html; charset=utf-8", "image/png"} {
		reqs = append(reqs, hostileRequest{name: "content type " + ct, contentType: ct, body: valid, want: 415})
	}
	reqs = append(reqs, hostileRequest{name: "batch as text/plain", path: "/api/dispatch/jobs/batch", contentType: "text/plain",
		body: []byte(`{"jobs":[` + string(valid) + `]}`), want: 415})

	// Malformed JSON and bodies that are not an object.
	for i, raw := range []string{
		``, ` `, `{`, `}`, `{"source":"a"`, `{"source":"a",}`, `{'source':'a'}`, `{source:"a"}`,
		`{"source":"a"/*c*/}`, `{"maxRetries":NaN}`, `{"maxRetries":Infinity}`, `{"maxRetries":007}`,
		`{"maxRetries":0x10}`, `{} {}`, `{}garbage`, "{\"source\":\"a\nb\"}", `{"source":"\x41"}`,
		`{"source":"\u12"}`, "\xef\xbb\xbf" + string(valid), `[]`, `[{}]`, `[` + string(valid) + `]`, `null`,
		`"string"`, `123`, `true`, `false`, `{"source" "a"}`, `{"source":}`, `{,}`, `{"a":1 "b":2}`,
	} {
		add(fmt.Sprintf("malformed %d %.20q", i, raw), []byte(raw))
	}
	// Deeply nested JSON.
	// Deeper than encoding/json's limit of 10,000, within the 64 KiB body limit.
	add("nested body arrays", []byte(strings.Repeat("[", 30000)+strings.Repeat("]", 30000)), "body")
	add("nested body objects", []byte(strings.Repeat(`{"a":`, 10002)+"1"+strings.Repeat("}", 10002)), "body")
	add("nested metadata", withRaw("metadata", strings.Repeat("[", 10001)+strings.Repeat("]", 10001)), "body")
	add("nested payload", withRaw("payload", strings.Repeat(`{"p":`, 5000)+`"x"`+strings.Repeat("}", 5000)), "payload")
	add("nested headers", withRaw("headers", `{"X-A":`+strings.Repeat("[", 500)+strings.Repeat("]", 500)+`}`), "headers.X-A")

	// Duplicate keys, also spelled with escapes.
	for _, k := range []string{"source", "type", "targetUrl", "payload"} {
		add("duplicate "+k, withRaw(k, `"dup"`), k)
	}
	add("duplicate maxRetries", withRaw("maxRetries", `3,"maxRetries":4`), "maxRetries")
	add("duplicate escaped key", []byte(strings.Replace(string(valid), `"source":`, `"\u0073ource":"x","source":`, 1)), "source")
	add("duplicate header", withRaw("headers", `{"X-A":"1","X-A":"2"}`), "headers.X-A")
	add("duplicate metadata", withRaw("metadata", `{"k":"1","k":"2"}`), "metadata.k")

	// Not UTF-8.
	for name, raw := range map[string]string{
		"source 0xff":        `{"source":"` + "\xff" + `","type":"t","targetUrl":"` + target + `","payload":"p"}`,
		"payload latin-1":    `{"source":"s","type":"t","targetUrl":"` + target + `","payload":"caf` + "\xe9" + `"}`,
		"overlong slash":     `{"source":"` + "\xc0\xaf" + `","type":"t","targetUrl":"` + target + `","payload":"p"}`,
		"truncated sequence": `{"source":"s","type":"t","targetUrl":"` + target + `","payload":"` + "\xe2\x82" + `"}`,
		"key 0xfe":           `{"` + "\xfe" + `":"x","source":"s","type":"t","targetUrl":"` + target + `","payload":"p"}`,
		"header value":       `{"source":"s","type":"t","targetUrl":"` + target + `","payload":"p","headers":{"X-A":"` + "\xff\xfe" + `"}}`,
		"utf-16":             "\xff\xfe{\x00}\x00",
		"surrogate bytes":    `{"source":"` + "\xed\xa0\x80" + `","type":"t","targetUrl":"` + target + `","payload":"p"}`,
	} {
		add("non-UTF-8 "+name, []byte(raw), "body")
	}

	// Header injection, reserved and hop-by-hop headers; secrets planted
	// in the values, which no answer may echo.
	for i, v := range []string{"a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rb", "a\x00b", "\x7f", "Bearer " + sec.credBearer + "\r\n",
		sec.credSecret + "\n\nGET / HTTP/1.1"} {
		add(fmt.Sprintf("header CR/LF %d", i), with("headers", map[string]string{"X-Custom": v}), "headers.X-Custom")
	}
	for _, name := range []string{"Authorization", "authorization", "AUTHORIZATION", "Host", "Content-Type", "Content-Length",
		"Transfer-Encoding", "Connection", "Keep-Alive", "TE", "Trailer", "Upgrade", "Proxy-Authorization",
		"Proxy-Connection", "Expect", "X-FLOWCATALYST-SIGNATURE", "x-flowcatalyst-timestamp",
		"X-FLOWCATALYST-SIGNATURE-PREVIOUS", "webhook-id", "Webhook-Signature", "webhook-timestamp",
		"X-Dispatch-Job-Id", "x-dispatch-attempt"} {
		add("reserved header "+name, with("headers", map[string]string{name: "Bearer " + sec.credBearer}), "headers."+name)
	}
	for _, name := range []string{"Bad Header", "X:Y", "X\r\nY", "é", "X(", "X@Y", strings.Repeat("X", 129)} {
		add(fmt.Sprintf("header name %.12q", name), with("headers", map[string]string{name: "v"}), "headers."+name)
	}
	add("empty header name", with("headers", map[string]string{"": "v"}))
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("X-H%d", i)] = "v"
	}
	add("33 headers", with("headers", many), "headers")
	add("header value 4097 bytes", with("headers", map[string]string{"X-Big": strings.Repeat(sec.credSecret, 4097/len(sec.credSecret)+1)}), "headers.X-Big")

	// Absurd numbers.
	for _, raw := range []string{"-1", "0", "51", "1000000", "2147483648", "9223372036854775807", "9223372036854775808",
		"-9223372036854775809", "1e400", "-1e400", "1.5", "5.0000001", "1e2", `"5"`, "true", "[]", "{}", `"` + sec.credSecret + `"`} {
		add("maxRetries "+raw[:min(len(raw), 24)], withRaw("maxRetries", raw), "maxRetries")
	}
	for _, raw := range []string{"true", "[]", "{}", `"abc"`, "-1", "0", "1.5", `"1e3"`, "99999999999999999999", `"424242"`, `" 1"`} {
		add("credentialsId "+raw, withRaw("credentialsId", raw), "credentialsId")
	}

	// Dates: year 9999 and other nonsense.
	for _, v := range []string{"9999-12-31T23:59:59Z", "9999-12-31T23:59:59.999999999Z", "10000-01-01T00:00:00Z",
		"0000-00-00T00:00:00Z", "2025-13-01T00:00:00Z", "2025-02-30T00:00:00Z", "yesterday", "1700000000",
		"2025-10-04 14:30:45", "2025-10-04T14:30:45", "2025-10-04T14:30:45+25:00", "+275760-09-13T00:00:00Z"} {
		add("scheduledFor "+v, with("scheduledFor", v), "scheduledFor")
		add("expiresAt "+v, with("expiresAt", v), "expiresAt")
	}
	add("expiresAt in the past", with("expiresAt", "2000-01-01T00:00:00Z"), "expiresAt")
	b := base()
	b["scheduledFor"], b["expiresAt"] = time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339), time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	inverted, _ := json.Marshal(b)
	add("expiresAt before scheduledFor", inverted, "expiresAt")

	// Huge metadata.
	for _, n := range []int{33, 1000} {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		add(fmt.Sprintf("metadata %d pairs", n), with("metadata", m), "metadata")
	}
	add("metadata key 65 chars", with("metadata", map[string]string{strings.Repeat("k", 65): "v"}), "metadata")
	add("metadata value 257 chars", with("metadata", map[string]string{"k": strings.Repeat(sec.credSecret, 257/len(sec.credSecret)+1)}), "metadata.k")
	add("metadata empty key", with("metadata", map[string]string{"": "v"}), "metadata")
	add("metadata NUL", with("metadata", map[string]string{"k": "a\x00" + sec.credSecret}), "metadata.k")
	add("metadata nested", withRaw("metadata", `{"a":{"b":"c"}}`), "metadata.a")
	add("metadata number", withRaw("metadata", `{"a":1}`), "metadata.a")

	// Unknown fields.
	for _, k := range []string{"queueUrl", "id", "status", "attemptCount", "__proto__", "constructor", "Source", "SOURCE",
		"targetURL", "", "\u0000", "signingSecret", "bearerToken"} {
		add(fmt.Sprintf("unknown field %q", k), with(k, sec.credSecret), k)
	}

	// Wrong types, and required fields null or missing.
	for _, k := range []string{"externalId", "source", "type", "groupId", "targetUrl", "protocol", "payload",
		"payloadContentType", "retryStrategy", "scheduledFor", "expiresAt", "idempotencyKey"} {
		for _, raw := range []string{"1", "1.5", "true", "false", "[]", `["x"]`, "{}", `{"a":"b"}`} {
			add("type "+k+"="+raw, withRaw(k, raw), k)
		}
	}
	for _, k := range []string{"headers", "metadata"} {
		for _, raw := range []string{`"x"`, "1", "true", "[]", `[["a","b"]]`} {
			add("type "+k+"="+raw, withRaw(k, raw), k)
		}
	}
	for _, k := range []string{"source", "type", "targetUrl", "payload"} {
		add("null "+k, withRaw(k, "null"), k)
		add("missing "+k, without(k), k)
		if k != "payload" {
			add("blank "+k, with(k, "  \t "), k)
		}
	}
	add("protocol", with("protocol", "SMTP"), "protocol")
	add("retryStrategy", with("retryStrategy", "random"), "retryStrategy")
	add("payloadContentType CRLF", with("payloadContentType", "text/plain\r\nX-Injected: 1"), "payloadContentType")
	add("payload NUL", with("payload", "a\x00b"), "payload")
	for name, n := range map[string]int{"source": 129, "type": 129, "groupId": 129, "externalId": 33, "idempotencyKey": 129} {
		add(name+" too long", with(name, strings.Repeat("é", n)), name)
	}

	// Hostile target URLs (nothing is ever sent: every one is refused).
	for _, u := range []string{"javascript:alert(1)", "file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1:70/_x",
		"ws://127.0.0.1/", "//127.0.0.1/x", "/relative", "127.0.0.1:8080", "http://", "http:///x", "http://[::1",
		"http://user:pw@127.0.0.1:9/", "http://127.0.0.1:9/#frag", "http://127.0.0.1:9/\r\nHost: x", "http://127.0.0.1:99999/",
		"http://127.0.0.1:0/", target + "?" + strings.Repeat("a", 2048), "data:text/plain,x", "\x00http://127.0.0.1/", "http://127.0.0.1:9 /"} {
		add(fmt.Sprintf("targetUrl %.30q", u), with("targetUrl", u), "targetUrl")
	}

	// Every problem at once, each named.
	all := base()
	all["maxRetries"], all["retryStrategy"], all["queueUrl"] = -5, "sometimes", "x"
	all["headers"] = map[string]string{"Authorization": "Bearer " + sec.credBearer, "X-A": "a\r\nb"}
	all["metadata"] = map[string]string{"k": strings.Repeat("v", 300)}
	all["expiresAt"] = "9999-12-31T23:59:59Z"
	delete(all, "source")
	compound, _ := json.Marshal(all)
	add("every problem at once", compound, "source", "maxRetries", "retryStrategy", "queueUrl", "headers.Authorization",
		"headers.X-A", "metadata.k", "expiresAt")

	// The batch endpoint refuses malformed wholes.
	for name, raw := range map[string]string{
		"batch not object":    `[` + string(valid) + `]`,
		"batch jobs object":   `{"jobs":{}}`,
		"batch jobs string":   `{"jobs":"x"}`,
		"batch empty":         `{"jobs":[]}`,
		"batch unknown field": `{"jobs":[` + string(valid) + `],"x":1}`,
		"batch 101 jobs":      `{"jobs":[` + strings.Repeat(string(valid)+",", 100) + string(valid) + `]}`,
		"batch dup jobs":      `{"jobs":[],"jobs":[]}`,
	} {
		reqs = append(reqs, hostileRequest{name: name, path: "/api/dispatch/jobs/batch", body: []byte(raw)})
	}

	// The credentials endpoint too (counted separately).
	cred := func(name, raw string, fields ...string) {
		reqs = append(reqs, hostileRequest{name: "credentials " + name, path: "/api/admin/dispatch/credentials",
			token: adminToken, body: []byte(raw), fields: fields})
	}
	cred("bearer CRLF", `{"bearerToken":"`+sec.credBearer+`\r\nX-A: 1"}`, "bearerToken")
	cred("bearer NUL", `{"bearerToken":"a\u0000b"}`, "bearerToken")
	cred("bearer 1025", `{"bearerToken":"`+strings.Repeat("b", 1025)+`"}`, "bearerToken")
	cred("secret 257", `{"signingSecret":"`+strings.Repeat("s", 257)+`"}`, "signingSecret")
	cred("secret empty", `{"signingSecret":""}`, "signingSecret")
	cred("scheme", `{"signatureScheme":"MD5"}`, "signatureScheme")
	cred("algorithm", `{"algorithm":"HMAC_MD5"}`, "algorithm")
	cred("sw secret not base64", `{"signatureScheme":"STANDARD_WEBHOOKS","signingSecret":"whsec_`+sec.credSecret+`!!"}`, "signingSecret")
	cred("sw secret short", `{"signatureScheme":"STANDARD_WEBHOOKS","signingSecret":"whsec_`+base64.StdEncoding.EncodeToString([]byte("short"))+`"}`, "signingSecret")
	cred("unknown field", `{"password":"`+sec.credSecret+`"}`, "password")
	cred("wrong type", `{"bearerToken":123}`, "bearerToken")
	cred("duplicate", `{"bearerToken":"a","bearerToken":"b"}`, "bearerToken")
	cred("non-UTF-8", "{\"bearerToken\":\"\xff\"}", "body")
	cred("array", `[]`, "body")
	reqs = append(reqs, hostileRequest{name: "credentials text/plain", path: "/api/admin/dispatch/credentials",
		token: adminToken, contentType: "text/plain", body: []byte(`{}`), want: 415})
	return reqs
}

// send sends one hostile request and returns its status, headers and body.
func (h hostileRequest) send(t *testing.T, baseURL string) (int, http.Header, []byte) {
	t.Helper()
	path := h.path
	if path == "" {
		path = "/api/dispatch/jobs"
	}
	var body io.Reader = bytes.NewReader(h.body)
	if h.chunked {
		body = io.MultiReader(bytes.NewReader(h.body)) // unknown length: sent chunked
	}
	req, err := http.NewRequest("POST", baseURL+path, body)
	if err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	switch h.contentType {
	case "":
		req.Header.Set("Content-Type", "application/json")
	case "-":
	default:
		req.Header.Set("Content-Type", h.contentType)
	}
	token := h.token
	if token == "" {
		token = apiToken
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", h.name, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

// errorAnswer is the API's error format.
type errorAnswer struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Details []struct {
			Field   string `json:"field"`
			Message string `json:"message"`
		} `json:"details"`
	} `json:"error"`
}

// TestHostileCreateRequests sends a few hundred generated hostile requests:
// each gets the expected 4xx in the JSON error format naming the bad fields,
// no job or credentials row is stored, nothing reaches the target, and no
// answer or log line carries a configured token, key or secret.
func TestHostileCreateRequests(t *testing.T) {
	t.Parallel()
	sec := hostileSecrets{key: testKey(), credBearer: "bt_hostile_bearer_7f3a9c1e5b", credSecret: "sk_hostile_signing_secret_2d8e4b6a"}
	in := start(t, "all", guardedEnv(map[string]string{"DISPATCH_ENCRYPTION_KEY": sec.key, "DISPATCH_MAX_PAYLOAD": "65536"}))
	target, _ := newCountingServer(t, "tcp4", "127.0.0.1:0", nil)
	adminCall(t, in, "POST", "/api/admin/dispatch/credentials",
		map[string]any{"bearerToken": sec.credBearer, "signingSecret": sec.credSecret}, http.StatusCreated)

	// The unmutated body is valid: every refusal below is the mutation's.
	in.createJob(jobBody(target.URL+"/hook", nil))
	jobs, creds := tableCount(t, in.dbURL, "dispatch_job"), tableCount(t, in.dbURL, "dispatch_credentials")

	reqs := hostileCreateRequests(target.URL+"/hook", 65536, sec)
	if len(reqs) < 300 {
		t.Fatalf("only %d hostile requests generated", len(reqs))
	}
	byStatus := map[int]int{}
	for _, h := range reqs {
		code, header, raw := h.send(t, in.apiURL)
		byStatus[code]++
		want := h.want
		if want == 0 {
			want = http.StatusBadRequest
		}
		if code != want {
			t.Errorf("%s: status %d, want %d: %.300s", h.name, code, want, raw)
			continue
		}
		if mt, _, _ := mime.ParseMediaType(header.Get("Content-Type")); mt != "application/json" {
			t.Errorf("%s: answer Content-Type %q, want application/json", h.name, header.Get("Content-Type"))
		}
		var e errorAnswer
		if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Errorf("%s: answer %.300q is not the JSON error format (%v)", h.name, raw, err)
			continue
		}
		if code == http.StatusBadRequest && len(e.Error.Details) == 0 {
			t.Errorf("%s: a 400 without details: %s", h.name, raw)
		}
		named := map[string]bool{}
		for _, d := range e.Error.Details {
			named[d.Field] = true
			if d.Message == "" {
				t.Errorf("%s: a detail without a message: %s", h.name, raw)
			}
		}
		for _, f := range h.fields {
			if !named[f] {
				t.Errorf("%s: details do not name %q: %.500s", h.name, f, raw)
			}
		}
		for _, s := range sec.all() {
			if bytes.Contains(raw, []byte(s)) || strings.Contains(fmt.Sprint(header), s) {
				t.Errorf("%s: the answer contains a configured secret", h.name)
			}
		}
	}
	t.Logf("%d hostile requests, answers by status: %v", len(reqs), byStatus)

	if n := tableCount(t, in.dbURL, "dispatch_job"); n != jobs {
		t.Errorf("dispatch_job holds %d rows after the hostile requests, want %d", n, jobs)
	}
	if n := tableCount(t, in.dbURL, "dispatch_credentials"); n != creds {
		t.Errorf("dispatch_credentials holds %d rows after the hostile requests, want %d", n, creds)
	}
	if n := target.hits.Load(); n != 0 {
		t.Errorf("the target got %d requests", n)
	}
	for _, line := range strings.Split(in.stderr.String(), "\n") {
		for _, s := range sec.all() {
			if strings.Contains(line, s) {
				t.Errorf("a log line contains a configured secret: %.200s…", line)
			}
		}
	}
}

// tableCount counts a table's rows.
func tableCount(t *testing.T, dbURL, table string) int {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestProcessingEndpointNeedsTheInternalToken: in an otherwise valid setup,
// the processing endpoint answers 401 to every request without exactly the
// internal token (other tokens, near misses, other places), never echoes a
// token, and the job is not touched.
func TestProcessingEndpointNeedsTheInternalToken(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	// Not due for an hour: only a request to the processing endpoint could
	// make it be attempted now.
	j := in.createJob(jobBody(rc.URL, map[string]any{"scheduledFor": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}))
	ptr := fmt.Sprintf(`{"id":%q,"poolCode":"DISPATCH-POOL","mediationType":"HTTP","messageGroupId":%q,"authToken":%q}`,
		j.ID, j.ID, internalToken)

	post := func(path string, header map[string]string) (int, http.Header, string) {
		req, _ := http.NewRequest("POST", in.apiURL+path, strings.NewReader(ptr))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(raw)
	}
	const process = "/api/dispatch/process"
	for name, tc := range map[string]struct {
		path   string
		header map[string]string
	}{
		"no token":           {process, nil},
		"API token":          {process, map[string]string{"Authorization": "Bearer " + apiToken}},
		"admin token":        {process, map[string]string{"Authorization": "Bearer " + adminToken}},
		"token plus a byte":  {process, map[string]string{"Authorization": "Bearer " + internalToken + "x"}},
		"token prefix":       {process, map[string]string{"Authorization": "Bearer " + internalToken[:len(internalToken)-1]}},
		"token upper case":   {process, map[string]string{"Authorization": "Bearer " + strings.ToUpper(internalToken)}},
		"two spaces":         {process, map[string]string{"Authorization": "Bearer  " + internalToken}},
		"no scheme":          {process, map[string]string{"Authorization": internalToken}},
		"basic scheme":       {process, map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("internal:"+internalToken))}},
		"empty bearer":       {process, map[string]string{"Authorization": "Bearer "}},
		"other header":       {process, map[string]string{"X-Api-Key": internalToken, "X-Internal-Token": internalToken}},
		"query string":       {process + "?token=" + internalToken + "&access_token=" + internalToken, nil},
		"cookie":             {process, map[string]string{"Cookie": "token=" + internalToken}},
		"token in body only": {process, map[string]string{"Authorization": "Bearer wrong-token-0123456789"}},
	} {
		code, header, body := post(tc.path, tc.header)
		if code != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401: %s", name, code, body)
			continue
		}
		var e errorAnswer
		if json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "unauthorized" {
			t.Errorf("%s: answer %q is not the JSON error format", name, body)
		}
		if !strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("%s: WWW-Authenticate = %q", name, header.Get("WWW-Authenticate"))
		}
		for _, tok := range []string{apiToken, adminToken, internalToken, strings.ToUpper(internalToken)} {
			if strings.Contains(body, tok) || strings.Contains(fmt.Sprint(header), tok) {
				t.Errorf("%s: the answer echoes a token", name)
			}
		}
	}
	if got := in.job(j.ID); got.Status != "PENDING" || got.AttemptCount != 0 {
		t.Errorf("after refused process calls the job is %+v, want PENDING without attempts", got)
	}

	// Control: with the internal token the same pointer is processed (the
	// job is not due, so it answers "retry later" without an attempt).
	code, _, body := post(process, map[string]string{"Authorization": "Bearer " + internalToken})
	if code != http.StatusBadRequest || !strings.Contains(body, "retryAfterSeconds") || strings.Contains(body, internalToken) {
		t.Errorf("with the internal token: %d %s, want 400 retry later", code, body)
	}

	// The routers' requests for new jobs and their give-backs (package
	// handoff) need the internal token too, and a bad one is refused
	// field by field, touching nothing.
	for _, path := range []string{process + "/offers", process + "/offers/give-back"} {
		for _, tok := range []string{"", apiToken, adminToken} {
			var raw json.RawMessage
			if code := in.do("POST", path, tok, map[string]any{"room": map[string]int{"DISPATCH-POOL": 1}}, &raw); code != http.StatusUnauthorized {
				t.Errorf("POST %s without the internal token: %d, want 401", path, code)
			}
		}
	}
	for _, tc := range []struct {
		path   string
		body   any
		fields []string
	}{
		{process + "/offers", map[string]any{"room": map[string]int{"DISPATCH-POOL": 0, "": 3}, "waitSeconds": 99},
			[]string{"room.DISPATCH-POOL", "room", "queues", "waitSeconds"}},
		{process + "/offers", map[string]any{"room": map[string]int{}, "queues": []string{""}}, []string{"room", "queues"}},
		{process + "/offers", "not an object", []string{"body"}},
		{process + "/offers/give-back", map[string]any{"handle": map[string]any{}, "afterSeconds": -1},
			[]string{"handle.id", "handle.mark", "afterSeconds"}},
	} {
		var e errorAnswer
		code := in.do("POST", tc.path, internalToken, tc.body, &e)
		var got []string
		for _, d := range e.Error.Details {
			got = append(got, d.Field)
		}
		for _, f := range tc.fields {
			if code != http.StatusBadRequest || !slices.Contains(got, f) {
				t.Errorf("POST %s %v: %d naming %v, want 400 naming %s", tc.path, tc.body, code, got, f)
			}
		}
	}

	// The other realms do not accept each other's tokens either.
	for _, tc := range []struct{ method, path, token string }{
		{"GET", "/api/dispatch/jobs", adminToken},
		{"GET", "/api/dispatch/jobs", internalToken},
		{"POST", "/api/admin/dispatch/credentials", apiToken},
		{"POST", "/api/admin/dispatch/credentials", internalToken},
	} {
		var raw json.RawMessage
		if code := in.do(tc.method, tc.path, tc.token, map[string]any{}, &raw); code != http.StatusUnauthorized {
			t.Errorf("%s %s with another realm's token: %d, want 401", tc.method, tc.path, code)
		}
		for _, tok := range []string{apiToken, adminToken, internalToken} {
			if strings.Contains(string(raw), tok) {
				t.Errorf("%s %s: the answer echoes a token", tc.method, tc.path)
			}
		}
	}
	if n := rc.count(); n != 0 {
		t.Errorf("the target got %d requests", n)
	}
	for _, tok := range []string{apiToken, adminToken, internalToken} {
		if strings.Contains(in.stderr.String(), tok) {
			t.Errorf("the log contains a token")
		}
	}
}

// TestInsecureModeIsExplicitAndLoud: without tokens the service refuses to
// start unless DISPATCH_INSECURE=true, which logs a warning; tokens that are
// configured are still required in insecure mode.
func TestInsecureModeIsExplicitAndLoud(t *testing.T) {
	t.Parallel()
	noTokens := map[string]string{"DISPATCH_API_TOKENS": "", "DISPATCH_ADMIN_TOKEN": "", "DISPATCH_INTERNAL_TOKEN": "", "DISPATCH_ENCRYPTION_KEY": ""}

	// Configuration is checked before anything is dialed.
	unused := sqstest.Queue{URL: "http://127.0.0.1:1/000000000000/unused.fifo", Endpoint: "http://127.0.0.1:1"}
	_, _, err := runToExit(t, "all", "postgres://127.0.0.1:1/unused", unused, noTokens)
	if err == nil {
		t.Fatal("started without tokens or DISPATCH_INSECURE")
	}
	for _, name := range []string{"DISPATCH_API_TOKENS", "DISPATCH_ADMIN_TOKEN", "DISPATCH_INTERNAL_TOKEN", "DISPATCH_ENCRYPTION_KEY"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the start error does not name %s: %v", name, err)
		}
	}

	insecure := map[string]string{"DISPATCH_INSECURE": "true"}
	for k, v := range noTokens {
		insecure[k] = v
	}
	open := start(t, "all", insecure)
	if !hasWarning(open.stderr.String(), "DISPATCH_INSECURE=true") {
		t.Errorf("DISPATCH_INSECURE=true started without a WARN log line naming it:\n%s", tail(open.stderr.String(), 20))
	}
	if code := open.do("GET", "/api/dispatch/jobs", "", nil, nil); code != http.StatusOK {
		t.Errorf("insecure without tokens: GET jobs = %d, want 200 (open)", code)
	}

	guarded := start(t, "all", map[string]string{"DISPATCH_INSECURE": "true"})
	if !hasWarning(guarded.stderr.String(), "DISPATCH_INSECURE=true") {
		t.Errorf("DISPATCH_INSECURE=true with tokens started without the warning")
	}
	for _, path := range []string{"/api/dispatch/jobs", "/api/admin/dispatch/credentials/1"} {
		if code := guarded.do("GET", path, "", nil, nil); code != http.StatusUnauthorized {
			t.Errorf("insecure with tokens configured: GET %s without a token = %d, want 401", path, code)
		}
	}
	if code := guarded.do("POST", "/api/dispatch/process", "", map[string]any{"id": "1"}, nil); code != http.StatusUnauthorized {
		t.Errorf("insecure with an internal token configured: process without it = %d, want 401", code)
	}

	secure := start(t, "all", nil)
	if strings.Contains(secure.stderr.String(), "DISPATCH_INSECURE") {
		t.Errorf("a secure start mentions DISPATCH_INSECURE")
	}
}

// hasWarning reports whether a JSON log holds a WARN line containing text.
func hasWarning(log, text string) bool {
	for _, line := range strings.Split(log, "\n") {
		var rec struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" && strings.Contains(rec.Msg, text) {
			return true
		}
	}
	return false
}
