package e2e

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a test-local OTLP/HTTP trace endpoint: a real HTTP
// server on loopback that decodes the protobuf export requests.
type otlpReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	o := &otlpReceiver{services: map[string]bool{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces application/x-protobuf", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					o.services[a.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				o.spans = append(o.spans, ss.GetSpans()...)
			}
		}
		o.mu.Unlock()
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(o.Close)
	return o
}

// trace returns the spans of one trace (hex id).
func (o *otlpReceiver) trace(id string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if hex.EncodeToString(s.GetTraceId()) == id {
			out = append(out, s)
		}
	}
	return out
}

// withAttr returns the spans of all traces whose attribute key is value.
func (o *otlpReceiver) withAttr(key, value string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if attr(s, key) == value {
			out = append(out, s)
		}
	}
	return out
}

// withAttrContaining returns the spans received so far with an attribute
// whose string value holds part.
func (o *otlpReceiver) withAttrContaining(part string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		for _, a := range s.GetAttributes() {
			if strings.Contains(a.GetValue().GetStringValue(), part) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.GetAttributes() {
		if a.GetKey() == key {
			v := a.GetValue()
			if v.GetStringValue() != "" {
				return v.GetStringValue()
			}
			return fmt.Sprint(v.GetIntValue())
		}
	}
	return ""
}

func named(spans []*tracepb.Span, name string, kind tracepb.Span_SpanKind) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.GetName() == name && s.GetKind() == kind {
			out = append(out, s)
		}
	}
	return out
}

func spanID(s *tracepb.Span) string { return hex.EncodeToString(s.GetSpanId()) }
func parentID(s *tracepb.Span) string {
	return hex.EncodeToString(s.GetParentSpanId())
}

func outline(spans []*tracepb.Span) string {
	var lines []string
	for _, s := range spans {
		lines = append(lines, fmt.Sprintf("%s %s %s parent=%s job=%s", s.GetKind(), s.GetName(), spanID(s), parentID(s), attr(s, "dispatch.job.id")))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// A caller's traceparent on create makes every delivery of the job part of
// the caller's trace: the create under the caller's span, the router's
// receive of each attempt's message (or, in `all`, its taking of the first
// in process), the claim, each HTTP delivery (its
// traceparent reaches the receiver) and the attempt's record, with each
// attempt its own delivery span linked to the create. In `all` the router
// hands pointers over in process; split, the router calls the API's
// processing endpoint, and the trace crosses that request too.
func TestTracesFollowEachJobFromCallerToReceiver(t *testing.T) {
	t.Parallel()
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "all", true: "api+router"}[split], func(t *testing.T) {
			t.Parallel()
			otlp := newOTLPReceiver(t)
			otel := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL, "OTEL_SERVICE_NAME": "dispatch-under-test"}
			var (
				mu      sync.Mutex
				parents []string // the traceparent of each webhook request
			)
			rc := newReceiver(t, func(n int, r *http.Request, _ []byte) int {
				mu.Lock()
				parents = append(parents, r.Header.Get("traceparent"))
				mu.Unlock()
				if n == 1 {
					return http.StatusServiceUnavailable // the first attempt fails: the job is retried
				}
				return http.StatusOK
			})
			var api, rt *instance
			if split {
				api = start(t, "api", otel)
				env := map[string]string{"DISPATCH_PROCESS_URL": api.apiURL + "/api/dispatch/process"}
				for k, v := range otel {
					env[k] = v
				}
				rt = startWith(t, "router", api.dbURL, api.queue, env)
				waitForOfferRequest(t, api.apiURL) // the job is offered to the router
			} else {
				api = start(t, "all", otel)
			}

			const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			b, _ := jsonBytes(jobBody(rc.URL, map[string]any{"maxRetries": 3}))
			req, _ := http.NewRequest(http.MethodPost, api.apiURL+"/api/dispatch/jobs", b)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+apiToken)
			req.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var job jobJSON
			if resp.StatusCode != http.StatusCreated {
				t.Fatalf("create with a traceparent: %d", resp.StatusCode)
			}
			if err := decodeJSON(resp, &job); err != nil {
				t.Fatal(err)
			}
			other := api.createJob(jobBody(newReceiver(t, nil).URL, nil)) // no traceparent: a trace of its own
			api.waitStatus(job.ID, 30*time.Second, "COMPLETED")
			api.waitStatus(other.ID, 30*time.Second, "COMPLETED")
			if rt != nil {
				_ = rt.stop() // flushes its spans
			}
			_ = api.stop()

			spans := otlp.trace(callerTrace)
			tree := outline(spans)
			server := named(spans, "POST /api/dispatch/jobs", tracepb.Span_SPAN_KIND_SERVER)
			if len(server) != 1 || parentID(server[0]) != callerSpan {
				t.Fatalf("want one server span under the caller's span %s:\n%s", callerSpan, tree)
			}
			create := named(spans, "create job", tracepb.Span_SPAN_KIND_PRODUCER)
			if len(create) != 1 || parentID(create[0]) != spanID(server[0]) || attr(create[0], "dispatch.job.id") != job.ID {
				t.Fatalf("want one create span of job %s under the server span:\n%s", job.ID, tree)
			}
			createID := spanID(create[0])
			// The first attempt is taken in process (split: offered by the
			// API to the router that asked), the retry comes back through
			// the queue.
			receives := named(spans, "receive "+api.queue.Name, tracepb.Span_SPAN_KIND_CONSUMER)
			locals := named(spans, "deliver in process", tracepb.Span_SPAN_KIND_INTERNAL)
			if len(receives) != 1 || len(locals) != 1 {
				t.Errorf("want 1 attempt taken in process and 1 received, got %d and %d:\n%s", len(locals), len(receives), tree)
			}
			for _, l := range locals {
				if parentID(l) != createID {
					t.Errorf("in-process span %s: parent %s, want the create %s", spanID(l), parentID(l), createID)
				}
			}
			for _, r := range receives {
				if parentID(r) != createID || attr(r, "messaging.system") != "aws_sqs" {
					t.Errorf("receive span %s: parent %s, messaging.system %q; want the create %s, aws_sqs", spanID(r), parentID(r), attr(r, "messaging.system"), createID)
				}
			}
			if n := len(named(spans, "claim job", tracepb.Span_SPAN_KIND_INTERNAL)); n != 2 {
				t.Errorf("want a claim span per attempt, got %d:\n%s", n, tree)
			}
			if n := len(named(spans, "record attempt", tracepb.Span_SPAN_KIND_INTERNAL)); n != 2 {
				t.Errorf("want a record span per attempt, got %d:\n%s", n, tree)
			}
			var deliveries []*tracepb.Span
			for _, s := range named(spans, "POST", tracepb.Span_SPAN_KIND_CLIENT) {
				if strings.HasPrefix(attr(s, "url.full"), rc.URL) {
					deliveries = append(deliveries, s)
				}
			}
			if len(deliveries) != 2 {
				t.Fatalf("want 2 delivery spans, got %d:\n%s", len(deliveries), tree)
			}
			sort.Slice(deliveries, func(i, j int) bool {
				return attr(deliveries[i], "dispatch.attempt") < attr(deliveries[j], "dispatch.attempt")
			})
			mu.Lock()
			got := append([]string(nil), parents...)
			mu.Unlock()
			if len(got) < 2 {
				t.Fatalf("the receiver saw %d requests", len(got))
			}
			for i, d := range deliveries {
				wantCode := []string{"503", "200"}[i]
				if c := attr(d, "http.response.status_code"); c != wantCode || attr(d, "dispatch.attempt") != fmt.Sprint(i+1) {
					t.Errorf("delivery span %d: attempt %s, code %s; want attempt %d, %s", i, attr(d, "dispatch.attempt"), c, i+1, wantCode)
				}
				linked := false
				for _, l := range d.GetLinks() {
					linked = linked || hex.EncodeToString(l.GetSpanId()) == createID
				}
				if !linked {
					t.Errorf("delivery span of attempt %d is not linked to the create %s", i+1, createID)
				}
				// The receiver's traceparent names this delivery span in the caller's trace.
				if want := "00-" + callerTrace + "-" + spanID(d) + "-01"; got[i] != want {
					t.Errorf("attempt %d: the receiver got traceparent %q, want %q", i+1, got[i], want)
				}
			}
			if split {
				if len(named(spans, "POST /api/dispatch/process", tracepb.Span_SPAN_KIND_SERVER)) != 2 {
					t.Errorf("want the processing endpoint's server span of each mediation in the trace:\n%s", tree)
				}
			}
			// One trace per job: every span about the job is in the caller's trace.
			for _, s := range otlp.withAttr("dispatch.job.id", job.ID) {
				if id := hex.EncodeToString(s.GetTraceId()); id != callerTrace {
					t.Errorf("span %s of job %s is in trace %s, not the caller's", s.GetName(), job.ID, id)
				}
			}
			// The job created without a traceparent has a trace of its own.
			otherSpans := otlp.withAttr("dispatch.job.id", other.ID)
			traces := map[string]bool{}
			for _, s := range otherSpans {
				traces[hex.EncodeToString(s.GetTraceId())] = true
			}
			if len(otherSpans) == 0 || len(traces) != 1 || traces[callerTrace] {
				t.Errorf("the other job's spans are in traces %v, want one of its own:\n%s", traces, outline(otherSpans))
			}
			otlp.mu.Lock()
			svc := otlp.services["dispatch-under-test"]
			otlp.mu.Unlock()
			if !svc {
				t.Errorf("no span came from service.name dispatch-under-test (OTEL_SERVICE_NAME)")
			}
		})
	}
}
