package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/dispatchhq/dispatch/localstack/sqsfake"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// routerJSON GETs path on the router's listener and decodes the answer.
func (in *instance) routerJSON(path string, v any) int {
	in.t.Helper()
	resp, err := http.Get(in.routerURL + path)
	if err != nil {
		in.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		in.t.Fatalf("GET %s: %q: %v", path, body, err)
	}
	return resp.StatusCode
}

func writeRouterConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "router.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The router configuration file in seed 002's shape names the queue; a
// second queue that does not exist stops neither delivery nor the process,
// and the router's /health/ready and /monitoring/queues say which it is.
func TestQueuesFromTheRouterConfigurationFile(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL, q := storetest.NewDatabase(t), sqstest.New(t, 30*time.Second)
	missing := strings.TrimSuffix(q.URL, q.Name) + "t-absent-" + q.Name
	file := writeRouterConfig(t, `{
  "queues": [
    {"queueUri": "`+q.URL+`", "connections": 2},
    {"queueUri": "`+missing+`", "visibilityTimeout": 60}
  ],
  "processingPools": [{"code": "DISPATCH-POOL", "concurrency": 5}]
}`)
	in := startWith(t, "all", dbURL, q, map[string]string{"DISPATCH_QUEUE_URL": "", "DISPATCH_ROUTER_CONFIG": file})
	rc := newReceiver(t, nil)
	// A job naming its queue goes through it, even in `all` (which takes
	// the others in process when a worker is idle).
	j := in.createJob(jobBody(rc.URL, map[string]any{"queueUrl": q.URL}))
	in.waitStatus(j.ID, 20*time.Second, "COMPLETED")

	var ready struct {
		Status string `json:"status"`
		Queues []struct{ Name, Status, Error string }
	}
	eventually(t, 10*time.Second, func() bool {
		return in.routerJSON("/health/ready", &ready) == http.StatusServiceUnavailable && len(ready.Queues) == 2 && ready.Queues[1].Status == "DOWN"
	}, func() string { return "the router's /health/ready does not name the missing queue" })
	if ready.Queues[0].Name != q.Name || ready.Queues[0].Status != "UP" || ready.Queues[1].Name != "t-absent-"+q.Name || ready.Queues[1].Error == "" {
		t.Errorf("/health/ready = %+v", ready)
	}
	var queues []struct {
		Name, Status             string
		Connections              int
		VisibilityTimeoutSeconds int
		MessagesReceived         int
	}
	in.routerJSON("/monitoring/queues", &queues)
	if len(queues) != 2 || queues[0].Connections != 2 || queues[0].MessagesReceived < 1 || queues[0].Status != "UP" || queues[1].Status != "DOWN" {
		t.Errorf("/monitoring/queues = %+v", queues)
	}
	// The API stays ready: its default queue answers.
	if code := in.do("GET", "/health/ready", "", nil, nil); code != http.StatusOK {
		t.Errorf("the API's /health/ready = %d with one of two queues missing, want 200", code)
	}
}

// seedBody is seed 002's create-job example, as its clients send it.
const seedBody = `{
  "source": "order-service",
  "type": "order.created",
  "groupId": "order-12345",
  "metadata": {
    "tenantId": "acme-corp",
    "userId": "user-789",
    "priority": "high"
  },
  "targetUrl": "https://partner.com/webhooks/orders",
  "protocol": "HTTP_WEBHOOK",
  "headers": {
    "X-Custom-Header": "value"
  },
  "payload": "{\"orderId\":\"12345\",\"amount\":99.99}",
  "payloadContentType": "application/json",
  "credentialsId": "cred-uuid-here",
  "maxRetries": 3,
  "retryStrategy": "exponential",
  "scheduledFor": "2025-10-04T15:00:00Z",
  "queueUrl": "http://localhost:9324/000000000000/flow-catalyst-dispatch.fifo"
}`

// seedQueueURL is the queue seed 002's example names.
const seedQueueURL = "http://localhost:9324/000000000000/flow-catalyst-dispatch.fifo"

// privateSQS is an SQS stand-in of the test's own, with the queues named:
// the seed's queue name is fixed, and no other test may share the queue.
func privateSQS(t *testing.T, names ...string) []sqstest.Queue {
	t.Helper()
	sqstest.SetEnv()
	srv := httptest.NewUnstartedServer(sqsfake.New().Handler())
	srv.Config.ConnContext = sqsfake.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) })
	out := make([]sqstest.Queue, len(names))
	for i, name := range names {
		q, err := client.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name),
			Attributes: map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = sqstest.Queue{Name: name, URL: aws.ToString(q.QueueUrl), Endpoint: srv.URL, API: client}
	}
	return out
}

// poolSucceeded is how many mediations a pool of a router finished.
func (in *instance) poolSucceeded(code string) int {
	var pools []struct {
		Code      string `json:"code"`
		Succeeded int    `json:"succeeded"`
	}
	in.routerJSON("/monitoring/pools", &pools)
	for _, p := range pools {
		if p.Code == code {
			return p.Succeeded
		}
	}
	return -1
}

// Seed 002's create request names its queue with queueUrl. When that queue
// is configured, the job is accepted and its pointer goes through that
// queue (a router polling only it delivers it, in the pool the job names);
// a queue or pool not configured is refused, naming those that are. A
// subscription names its jobs' queue the same way.
func TestSeedJobNamingItsQueueIsDeliveredThroughIt(t *testing.T) {
	t.Parallel()
	qs := privateSQS(t, "t-default.fifo", "flow-catalyst-dispatch.fifo")
	def := qs[0]
	dbURL := storetest.NewDatabase(t)
	pools := "DISPATCH-POOL:4,SLOW:1"
	in := startWith(t, "api", dbURL, def, map[string]string{"DISPATCH_QUEUE_URL": "",
		"DISPATCH_QUEUES": def.URL + "," + seedQueueURL, "DISPATCH_POOLS": pools})
	process := in.apiURL + "/api/dispatch/process"
	// One router polls only the default queue, the other only the seed's.
	byDefault := startWith(t, "router", dbURL, def, map[string]string{"DISPATCH_PROCESS_URL": process, "DISPATCH_POOLS": pools})
	bySeed := startWith(t, "router", dbURL, def, map[string]string{"DISPATCH_QUEUE_URL": seedQueueURL, "DISPATCH_PROCESS_URL": process, "DISPATCH_POOLS": pools})
	rc := newReceiver(t, nil)

	// The seed's body as it is: only its placeholder credentials are refused.
	var refused errorAnswer
	if code := in.do("POST", "/api/dispatch/jobs", apiToken, json.RawMessage(seedBody), &refused); code != http.StatusBadRequest {
		t.Fatalf("the seed's body with its placeholder credentialsId: %d, want 400", code)
	}
	for _, d := range refused.Error.Details {
		if d.Field != "credentialsId" {
			t.Errorf("the seed's body is refused for %s: %s", d.Field, d.Message)
		}
	}

	var cred struct{ ID string }
	if code := in.do("POST", "/api/admin/dispatch/credentials", adminToken,
		map[string]any{"signingSecret": "whsec_seed_secret", "allowedTargets": []string{rc.URL}}, &cred); code != http.StatusCreated {
		t.Fatalf("create credentials: %d", code)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(seedBody), &body); err != nil {
		t.Fatal(err)
	}
	body["credentialsId"], body["targetUrl"], body["poolCode"] = cred.ID, rc.URL+"/webhooks/orders", "SLOW"
	var j struct {
		ID, QueueURL, PoolCode, Status string
	}
	if code := in.do("POST", "/api/dispatch/jobs", apiToken, body, &j); code != http.StatusCreated {
		t.Fatalf("the seed's body, with real credentials and target: %d, want 201", code)
	}
	if j.QueueURL != seedQueueURL || j.PoolCode != "SLOW" {
		t.Errorf("job names queue %q and pool %q, want the seed's queue and SLOW", j.QueueURL, j.PoolCode)
	}
	in.waitStatus(j.ID, 20*time.Second, "COMPLETED")
	if n := bySeed.poolSucceeded("SLOW"); n != 1 {
		t.Errorf("the router polling the seed's queue mediated %d in pool SLOW, want 1", n)
	}
	if n := byDefault.poolSucceeded("SLOW") + byDefault.poolSucceeded("DISPATCH-POOL"); n != 0 {
		t.Errorf("the router polling only the default queue mediated %d, want 0", n)
	}
	plain := in.createJob(jobBody(rc.URL, nil))
	in.waitStatus(plain.ID, 20*time.Second, "COMPLETED")
	if n := byDefault.poolSucceeded("DISPATCH-POOL"); n != 1 {
		t.Errorf("a job naming no queue: the default queue's router mediated %d, want 1", n)
	}
	// The router polling only the seed's queue asks the API for new jobs
	// too, and is told it is offered none: they are bound for the default
	// queue, which it does not serve.
	eventually(t, 10*time.Second, func() bool {
		return strings.Contains(bySeed.stderr.String(), "offers this router no new jobs") &&
			strings.Contains(bySeed.stderr.String(), def.Name)
	}, func() string {
		return "the seed queue's router logged no refused offer request:\n" + tail(bySeed.stderr.String(), 10)
	})

	// Neither a queue nor a pool that is not configured.
	for field, value := range map[string]string{"queueUrl": "http://localhost:9324/000000000000/other.fifo", "poolCode": "FAST"} {
		var e errorAnswer
		code := in.do("POST", "/api/dispatch/jobs", apiToken, jobBody(rc.URL, map[string]any{field: value}), &e)
		if code != http.StatusBadRequest || len(e.Error.Details) != 1 || e.Error.Details[0].Field != field {
			t.Errorf("%s %q: %d %+v, want 400 naming %s", field, value, code, e, field)
			continue
		}
		want := map[string]string{"queueUrl": def.URL + ", " + seedQueueURL, "poolCode": "DISPATCH-POOL, SLOW"}[field]
		if !strings.Contains(e.Error.Details[0].Message, want) {
			t.Errorf("%s refused with %q; it does not name the configured ones (%s)", field, e.Error.Details[0].Message, want)
		}
	}

	// A subscription's jobs go to its queue.
	var sub struct{ ID, QueueURL string }
	if code := in.do("POST", "/api/dispatch/subscriptions", apiToken, map[string]any{"name": "seed", "url": rc.URL + "/sub",
		"eventTypes": []string{"order.*"}, "queueUrl": "flow-catalyst-dispatch.fifo"}, &sub); code != http.StatusCreated {
		t.Fatalf("create subscription: %d", code)
	}
	if sub.QueueURL != seedQueueURL {
		t.Errorf("subscription names queue %q, want %q (the configured queue's URL)", sub.QueueURL, seedQueueURL)
	}
	var ev struct {
		Jobs []struct{ ID string } `json:"jobs"`
	}
	if code := in.do("POST", "/api/dispatch/events", apiToken, map[string]any{"source": "shop", "type": "order.created", "data": map[string]any{"id": 1}}, &ev); code != http.StatusCreated || len(ev.Jobs) != 1 {
		t.Fatalf("publish: %d %+v", code, ev)
	}
	in.waitStatus(ev.Jobs[0].ID, 20*time.Second, "COMPLETED")
	if n := bySeed.poolSucceeded("DISPATCH-POOL"); n != 1 {
		t.Errorf("the event's job: the seed queue's router mediated %d in DISPATCH-POOL, want 1", n)
	}
}

// routerCall sends a request with the admin token to the router's listener.
func routerCall(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A pool's concurrency raised under load, with PUT /monitoring/pools/{code},
// takes effect without a restart, and every job is delivered once.
func TestPoolConcurrencyChangedUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	in := start(t, "all", map[string]string{"DISPATCH_POOLS": "DISPATCH-POOL:1"})
	const n = 30
	rc, ids := in.heldLoad(n, 100*time.Millisecond)
	eventually(t, 10*time.Second, func() bool { return rc.count() > 0 }, func() string { return "nothing delivered" })
	if code, body := routerCall(t, "PUT", in.routerURL+"/monitoring/pools/DISPATCH-POOL", "", `{"concurrency": 5}`); code != http.StatusUnauthorized {
		t.Errorf("PUT without the admin token: %d %s, want 401", code, body)
	}
	if code, body := routerCall(t, "PUT", in.routerURL+"/monitoring/pools/DISPATCH-POOL", adminToken, `{"concurrency": 5}`); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, body)
	}
	for _, id := range ids {
		in.waitStatus(id, 60*time.Second, "COMPLETED")
	}
	if maxOpen := rc.mostOpen(); maxOpen < 2 || maxOpen > 5 {
		t.Errorf("at most %d deliveries at once after the concurrency went from 1 to 5, want 2 to 5", maxOpen)
	}
	if c := rc.count(); c != n {
		t.Errorf("the target got %d requests for %d jobs, want each once", c, n)
	}
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "messages left on the queue" })
}

// SIGHUP, and POST /monitoring/reload, read the router configuration file
// again: the pools change in place, and the API accepts jobs naming a new
// one; a broken file changes nothing.
func TestReloadOfTheRouterConfigurationChangesThePools(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL, q := storetest.NewDatabase(t), sqstest.New(t, 30*time.Second)
	path := writeRouterConfig(t, `{"queues": [{"queueUri": "`+q.URL+`"}], "processingPools": [{"code": "DISPATCH-POOL", "concurrency": 2}]}`)
	write := func(content string) {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := spawn(t, "all", baseEnv(dbURL, q, map[string]string{"DISPATCH_QUEUE_URL": "", "DISPATCH_ROUTER_CONFIG": path}))
	in := &instance{t: t, apiURL: p.apiURL, routerURL: p.routerURL, queue: q}
	rc := newReceiver(t, nil)
	if code := in.do("POST", "/api/dispatch/jobs", apiToken, jobBody(rc.URL, map[string]any{"poolCode": "SLOW"}), nil); code != http.StatusBadRequest {
		t.Errorf("a job naming a pool not configured yet: %d, want 400", code)
	}
	pools := func() map[string]int {
		var ps []struct {
			Code        string `json:"code"`
			Concurrency int    `json:"concurrency"`
		}
		in.routerJSON("/monitoring/pools", &ps)
		out := map[string]int{}
		for _, x := range ps {
			out[x.Code] = x.Concurrency
		}
		return out
	}

	write(`{"queues": [{"queueUri": "` + q.URL + `"}], "processingPools": [{"code": "DISPATCH-POOL", "concurrency": 7}, {"code": "SLOW", "concurrency": 1, "rateLimitPerMinute": 30}]}`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { ps := pools(); return ps["DISPATCH-POOL"] == 7 && ps["SLOW"] == 1 },
		func() string { return fmt.Sprintf("pools after SIGHUP: %v\n%s", pools(), p.log.String()) })
	j := in.createJob(jobBody(rc.URL, map[string]any{"poolCode": "SLOW"}))
	in.waitStatus(j.ID, 20*time.Second, "COMPLETED")

	write(`{"processingPools": [{"code": "DISPATCH-POOL", "concurrency": 0}]}`)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return strings.Contains(p.log.String(), "reload failed") },
		func() string { return "a broken file's reload is not reported" })
	if code, body := routerCall(t, "POST", in.routerURL+"/monitoring/reload", adminToken, ""); code != http.StatusBadRequest || !strings.Contains(body, "concurrency") {
		t.Errorf("POST /monitoring/reload of a broken file: %d %s, want 400 saying why", code, body)
	}
	if ps := pools(); ps["DISPATCH-POOL"] != 7 || ps["SLOW"] != 1 {
		t.Errorf("a broken file changed the pools: %v", ps)
	}

	write(`{"processingPools": [{"code": "DISPATCH-POOL", "concurrency": 3}]}`)
	if code, body := routerCall(t, "POST", in.routerURL+"/monitoring/reload", adminToken, ""); code != http.StatusOK {
		t.Fatalf("POST /monitoring/reload: %d %s", code, body)
	}
	if ps := pools(); ps["DISPATCH-POOL"] != 3 {
		t.Errorf("after POST /monitoring/reload: %v", ps)
	}
	eventually(t, 10*time.Second, func() bool { _, ok := pools()["SLOW"]; return !ok }, func() string { return "the removed pool did not go" })
	if code := in.do("POST", "/api/dispatch/jobs", apiToken, jobBody(rc.URL, map[string]any{"poolCode": "SLOW"}), nil); code != http.StatusBadRequest {
		t.Errorf("a job naming the removed pool: %d, want 400", code)
	}
}

// A router running apart shows the circuit breakers of the API that
// delivers (they live there), and its admin resets one there.
func TestRouterAloneShowsAndResetsTheAPIsBreakers(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL, q := storetest.NewDatabase(t), sqstest.New(t, 30*time.Second)
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_BREAKER_FAILURES": "2", "DISPATCH_BREAKER_OPEN": "1m"})
	rt := startWith(t, "router", dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process"})
	rc := newReceiver(t, func(int, *http.Request, []byte) int { return http.StatusServiceUnavailable })
	host := strings.TrimPrefix(rc.URL, "http://")
	in.createJob(jobBody(rc.URL, map[string]any{"maxRetries": 10, "retryStrategy": "fixed"}))

	type breaker struct {
		Host, State         string
		ConsecutiveFailures int
	}
	find := func() (breaker, bool) {
		var bs []breaker
		if code := rt.routerJSON("/monitoring/circuit-breakers", &bs); code != http.StatusOK {
			t.Fatalf("/monitoring/circuit-breakers: %d", code)
		}
		for _, b := range bs {
			if b.Host == host {
				return b, true
			}
		}
		return breaker{}, false
	}
	eventually(t, 30*time.Second, func() bool { b, ok := find(); return ok && b.State == "OPEN" },
		func() string {
			b, _ := find()
			return fmt.Sprintf("the target's breaker, as the router shows it: %+v", b)
		})
	if b, _ := find(); b.ConsecutiveFailures != 2 {
		t.Errorf("breaker %+v, want opened by 2 failures", b)
	}
	if code, body := routerCall(t, "POST", rt.routerURL+"/monitoring/circuit-breakers/"+host+"/reset", "", ""); code != http.StatusUnauthorized {
		t.Errorf("reset without the admin token: %d %s", code, body)
	}
	if code, body := routerCall(t, "POST", rt.routerURL+"/monitoring/circuit-breakers/"+host+"/reset", adminToken, ""); code != http.StatusOK {
		t.Fatalf("reset: %d %s", code, body)
	}
	if b, ok := find(); ok && b.State == "OPEN" {
		t.Errorf("after the reset the breaker is %+v", b)
	}
	for _, path := range []string{"/monitoring/in-flight", "/monitoring/warnings", "/monitoring/queues"} {
		var v any
		if code := rt.routerJSON(path, &v); code != http.StatusOK {
			t.Errorf("%s: %d", path, code)
		}
	}
}
