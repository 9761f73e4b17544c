package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// The router's routes, as the OpenAPI document must describe them.
var routerRoutes = []string{
	"GET /monitoring/pools", "PUT /monitoring/pools/{code}", "POST /monitoring/reload", "GET /monitoring/queues",
	"GET /monitoring/in-flight", "GET /monitoring/warnings", "GET /monitoring/circuit-breakers",
	"POST /monitoring/circuit-breakers/{host}/reset",
}

var (
	specOnce sync.Once
	spec     validator.Validator
	specDoc  libopenapi.Document
	specErr  error
)

// openAPI is api/openapi.json's validator (the document the API serves).
func openAPI(t *testing.T) (validator.Validator, libopenapi.Document) {
	t.Helper()
	specOnce.Do(func() {
		raw, err := os.ReadFile("../api/openapi.json")
		if err != nil {
			specErr = err
			return
		}
		if specDoc, specErr = libopenapi.NewDocument(raw); specErr != nil {
			return
		}
		v, errs := validator.NewValidator(specDoc)
		if len(errs) > 0 {
			specErr = errs[0]
			return
		}
		spec = v
	})
	if specErr != nil {
		t.Fatalf("api/openapi.json: %v", specErr)
	}
	return spec, specDoc
}

// fetch sends a request to the router's listener and checks its answer
// against the OpenAPI document; it returns the status and body.
func fetch(t *testing.T, method, url, token, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	v, _ := openAPI(t)
	check := &http.Response{StatusCode: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(raw)), Request: req}
	if ok, errs := v.ValidateHttpResponse(req, check); !ok {
		for _, e := range errs {
			msg := e.Message + ": " + e.Reason
			for _, se := range e.SchemaValidationErrors {
				msg += "\n    " + se.FieldPath + ": " + se.Reason
			}
			t.Errorf("OpenAPI: %s %s (%d) does not match the document: %s\nbody: %.500s", method, req.URL.Path, resp.StatusCode, msg, raw)
		}
	}
	return resp.StatusCode, raw
}

// fakeBreakers is a hand-written Breakers with function fields.
type fakeBreakers struct {
	states func() []dispatch.BreakerState
	reset  func(host string) bool
}

func (f fakeBreakers) States(context.Context) ([]dispatch.BreakerState, error) {
	return f.states(), nil
}
func (f fakeBreakers) Reset(_ context.Context, host string) (bool, error) { return f.reset(host), nil }

// The router's monitoring answers in the shapes the OpenAPI document gives:
// its queues (a missing one named), pools, the messages it holds with their
// age, its recent warnings by type, and the circuit breakers with a reset.
func TestRouterMonitoringAnswersAsDocumented(t *testing.T) {
	t.Parallel()
	const admin = "admin-token-0123456789"
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	missing, err := queue.Open(context.Background(), queue.Config{
		URL: strings.TrimSuffix(q.URL, q.Name) + "t-nothing-here.fifo", Endpoint: q.Endpoint, CallTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	med := &fakeMediator{fn: func(ptr dispatch.Pointer, _ int) error {
		switch ptr.ID {
		case "1":
			once.Do(func() { close(started) })
			<-release
		case "7":
			return context.DeadlineExceeded // no usable answer
		}
		return nil
	}}
	open := time.Now().Add(time.Minute)
	var (
		resetMu sync.Mutex
		resets  []string
	)
	br := fakeBreakers{
		states: func() []dispatch.BreakerState {
			return []dispatch.BreakerState{
				{Host: "down.example:443", State: dispatch.BreakerOpen, ConsecutiveFailures: 5, OpenUntil: &open},
				{Host: "fine.example:443", State: dispatch.BreakerClosed},
			}
		},
		reset: func(host string) bool {
			resetMu.Lock()
			defer resetMu.Unlock()
			resets = append(resets, host)
			return host == "down.example:443"
		},
	}
	r, srv := poolRouter(t, nil, med, router.Config{
		Sources:    []router.Source{{Queue: rq, Connections: 2}, {Queue: missing}},
		Pools:      []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 2}},
		AdminToken: admin, Breakers: br,
		Reload: func() ([]router.PoolConfig, error) {
			return []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 3}}, nil
		},
	})
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	sendPointers(t, rq, dispatch.DefaultPool, "g", 1, 2)
	sendPointers(t, rq, "NO-SUCH-POOL", "", 5)
	sendPointers(t, rq, dispatch.DefaultPool, "", 7)
	<-started
	eventually(t, 10*time.Second, func() bool { return slices.Contains(med.seen(), "5") && slices.Contains(med.seen(), "7") }, "5 and 7 mediated")

	var inflight []router.InFlightMessage
	eventually(t, 10*time.Second, func() bool {
		_, body := fetch(t, "GET", srv.URL+"/monitoring/in-flight", "", "")
		_ = json.Unmarshal(body, &inflight)
		return len(inflight) >= 2
	}, "1 and 2 held")
	byJob := map[string]router.InFlightMessage{}
	for _, m := range inflight {
		byJob[m.JobID] = m
	}
	if m := byJob["1"]; m.State != router.Mediating || m.MediatingMillis <= 0 || m.Queue != q.Name || m.Pool != dispatch.DefaultPool || m.GroupID != "g" || m.StartedAt == "" {
		t.Errorf("job 1 = %+v, want MEDIATING in its queue and pool", m)
	}
	if m := byJob["2"]; m.State != router.Buffered || m.StartedAt != "" || m.ReceiveCount < 1 {
		t.Errorf("job 2 = %+v, want BUFFERED behind 1", m)
	}

	var warnings []router.Warning
	eventually(t, 10*time.Second, func() bool {
		_, body := fetch(t, "GET", srv.URL+"/monitoring/warnings", "", "")
		_ = json.Unmarshal(body, &warnings)
		types := map[string]bool{}
		for _, w := range warnings {
			types[w.Type] = true
		}
		return types[router.WarnUnknownPool] && types[router.WarnMediationFailed] && types[router.WarnQueueUnavailable]
	}, "the unknown pool, the failed mediation and the missing queue among the warnings")
	for _, w := range warnings {
		switch w.Type {
		case router.WarnUnknownPool:
			if w.Pool != "NO-SUCH-POOL" || w.JobID != "5" || w.Count < 1 {
				t.Errorf("unknown pool warning: %+v", w)
			}
		case router.WarnQueueUnavailable:
			if w.Queue != "t-nothing-here.fifo" {
				t.Errorf("queue warning names %q, want the missing queue", w.Queue)
			}
		}
	}

	code, body := fetch(t, "GET", srv.URL+"/monitoring/queues", "", "")
	var qs []router.QueueStats
	_ = json.Unmarshal(body, &qs)
	if code != http.StatusOK || len(qs) != 2 || qs[0].Depth == nil || qs[0].Held < 2 || qs[1].Status != router.QueueDown {
		t.Errorf("/monitoring/queues: %d %s", code, body)
	}
	fetch(t, "GET", srv.URL+"/monitoring/pools", "", "")

	code, body = fetch(t, "GET", srv.URL+"/monitoring/circuit-breakers", "", "")
	var bs []router.BreakerStats
	_ = json.Unmarshal(body, &bs)
	if code != http.StatusOK || len(bs) != 2 || bs[0].State != "OPEN" || bs[0].OpenUntil == "" || bs[0].ConsecutiveFailures != 5 {
		t.Errorf("/monitoring/circuit-breakers: %d %s", code, body)
	}
	if code, _ := fetch(t, "POST", srv.URL+"/monitoring/circuit-breakers/down.example:443/reset", "", ""); code != http.StatusUnauthorized {
		t.Errorf("reset without the admin token: %d, want 401", code)
	}
	if code, body := fetch(t, "POST", srv.URL+"/monitoring/circuit-breakers/down.example:443/reset", admin, ""); code != http.StatusOK {
		t.Errorf("reset: %d %s", code, body)
	}
	if code, _ := fetch(t, "POST", srv.URL+"/monitoring/circuit-breakers/nobody.example:443/reset", admin, ""); code != http.StatusNotFound {
		t.Errorf("reset of an unknown host: %d, want 404", code)
	}
	resetMu.Lock()
	if !slices.Equal(resets, []string{"down.example:443", "nobody.example:443"}) {
		t.Errorf("resets = %v", resets)
	}
	resetMu.Unlock()

	// The changes answer as documented too.
	fetch(t, "PUT", srv.URL+"/monitoring/pools/SLOW", admin, `{"concurrency": 1, "rateLimitPerMinute": 30}`)
	fetch(t, "PUT", srv.URL+"/monitoring/pools/SLOW", admin, `{"concurrency": 0}`)
	fetch(t, "PUT", srv.URL+"/monitoring/pools/SLOW", "", `{"concurrency": 2}`)
	fetch(t, "POST", srv.URL+"/monitoring/reload", admin, "")
	released.Do(func() { close(release) })
	_ = r
}

// The document describes every route of the router's listener, on the
// router's server, and no route the router does not serve.
func TestOpenAPIDescribesTheRoutersRoutes(t *testing.T) {
	_, doc := openAPI(t)
	model, err := doc.BuildV3Model()
	if err != nil {
		t.Fatal(err)
	}
	var described []string
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		if !strings.HasPrefix(path, "/monitoring/") {
			continue
		}
		if len(item.Servers) != 1 || !strings.HasSuffix(item.Servers[0].URL, ":8081") {
			t.Errorf("%s is not described on the router's listener (servers %v)", path, item.Servers)
		}
		for method, op := range item.GetOperations().FromOldest() {
			described = append(described, strings.ToUpper(method)+" "+path)
			if op.OperationId == "" {
				t.Errorf("%s %s has no operationId", method, path)
			}
		}
	}
	// The validator does look at the router's paths: a wrong shape fails.
	v, _ := openAPI(t)
	req, _ := http.NewRequest("GET", "http://127.0.0.1:8081/monitoring/queues", nil)
	wrong := &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`[{"name": 5}]`)), Request: req}
	if ok, _ := v.ValidateHttpResponse(req, wrong); ok {
		t.Error("a /monitoring/queues answer of the wrong shape passes the validator")
	}
	slices.Sort(described)
	want := slices.Clone(routerRoutes)
	slices.Sort(want)
	if !slices.Equal(described, want) {
		t.Errorf("the document describes the router's routes as\n%v\nthe router serves\n%v", described, want)
	}
}
