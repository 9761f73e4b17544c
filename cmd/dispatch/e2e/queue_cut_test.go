package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// cutProxy is a loopback TCP proxy in front of an SQS endpoint that a test
// cuts (its listener and every live connection closed, as a network
// partition or a crashed load balancer would) and brings back on the same
// address.
type cutProxy struct {
	t      *testing.T
	target string // host:port of the endpoint
	addr   string // its own host:port, the same after a cut
	wg     sync.WaitGroup

	mu    sync.Mutex
	ln    net.Listener // nil while cut
	conns map[net.Conn]struct{}
}

func newCutProxy(t *testing.T, endpoint string) *cutProxy {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, target: u.Host, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
	})
	return p
}

// URL is the proxy's address as an endpoint.
func (p *cutProxy) URL() string { return "http://" + p.addr }

func (p *cutProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by a cut
			}
			p.forward(c)
		}
	}()
}

// forward copies both ways between c and a new connection to the target;
// either side closing closes both.
func (p *cutProxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		_ = c.Close()
		_ = up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		defer p.wg.Done()
		_, _ = io.Copy(dst, src)
		_ = c.Close()
		_ = up.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, up)
		p.mu.Unlock()
	}
	p.wg.Add(2)
	go pipe(up, c)
	go pipe(c, up)
}

// cut closes the listener and every live connection: calls under way fail,
// new ones are refused.
func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// restore listens on the proxy's address again.
func (p *cutProxy) restore() {
	p.t.Helper()
	var ln net.Listener
	eventually(p.t, 15*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	}, func() string { return "the proxy's address " + p.addr + " did not come free again" })
	p.serve(ln)
}

// cutJob is what each job of the cut test carries, to tell its deliveries
// apart.
type cutJob struct {
	Group string `json:"g"`
	N     int    `json:"n"`
}

// A router with two queues, one of which it reaches through a proxy that
// is cut mid-run: the other queue keeps delivering, each group in its
// order; the router's /health/ready and /monitoring/queues, and its report
// on the console's monitoring view, name the failing queue; once the proxy
// is back, every job of the cut queue is delivered, in group order, once.
func TestRouterDeliversOneQueueWhileTheOthersEndpointIsCut(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	dbURL := storetest.NewDatabase(t)
	qa, qb := sqstest.New(t, 30*time.Second), sqstest.New(t, 30*time.Second)
	proxy := newCutProxy(t, qb.Endpoint)
	// The API reaches both queues directly; the router reaches b through
	// the proxy, with a short visibility timeout so that what it held at
	// the cut comes back soon.
	queues := `{"queueUri": "` + qa.URL + `", "connections": 2}, {"queueUri": "` + qb.URL + `"`
	in := startWith(t, "api", dbURL, qa, map[string]string{"DISPATCH_QUEUE_URL": "",
		"DISPATCH_ROUTER_CONFIG": writeRouterConfig(t, `{"queues": [`+queues+`}]}`)})
	rt := startWith(t, "router", dbURL, qa, map[string]string{"DISPATCH_QUEUE_URL": "",
		"DISPATCH_PROCESS_URL":   in.apiURL + "/api/dispatch/process",
		"DISPATCH_ROUTER_CONFIG": writeRouterConfig(t, `{"queues": [`+queues+`, "endpoint": "`+proxy.URL()+`", "visibilityTimeout": 8}]}`)})
	rc := newReceiver(t, nil)
	rc.hold = 20 * time.Millisecond

	created := map[string][]string{} // job ids by group, in creation order
	create := func(q sqstest.Queue, group string, n int) {
		payload, _ := json.Marshal(cutJob{Group: group, N: n})
		j := in.createJob(jobBody(rc.URL, map[string]any{"queueUrl": q.URL, "groupId": group, "payload": string(payload)}))
		created[group] = append(created[group], j.ID)
	}
	// Two groups on each queue, created interleaved.
	load := func(from, to int) {
		for n := from; n < to; n++ {
			for _, g := range []string{"a1", "b1", "a2", "b2"} {
				create(map[byte]sqstest.Queue{'a': qa, 'b': qb}[g[0]], g, n)
			}
		}
	}
	delivered := func(prefix string) int {
		n := 0
		for _, r := range rc.snapshot() {
			var j cutJob
			if json.Unmarshal([]byte(r.body), &j) == nil && strings.HasPrefix(j.Group, prefix) {
				n++
			}
		}
		return n
	}
	const before, during = 8, 10
	load(0, before)
	// Cut b's endpoint while its jobs are being delivered.
	eventually(t, 30*time.Second, func() bool { return delivered("b") >= 2 }, func() string { return "no job of queue b delivered" })
	proxy.cut()
	t.Logf("queue b cut after %d of its jobs were delivered", delivered("b"))

	type readyQueue struct{ Name, Status, Error string }
	var ready struct {
		Status string
		Queues []readyQueue
	}
	eventually(t, 20*time.Second, func() bool {
		return rt.routerJSON("/health/ready", &ready) == http.StatusServiceUnavailable && len(ready.Queues) == 2 && ready.Queues[1].Status == "DOWN"
	}, func() string {
		return fmt.Sprintf("the router's /health/ready does not name the cut queue: %+v", ready)
	})
	if a, b := ready.Queues[0], ready.Queues[1]; a.Name != qa.Name || a.Status != "UP" || b.Name != qb.Name || b.Error == "" {
		t.Errorf("/health/ready = %+v, want %s UP and %s DOWN with its error", ready, qa.Name, qb.Name)
	}
	var monitored []struct {
		Name, Status, LastError string
		ReceiveErrors           int
	}
	rt.routerJSON("/monitoring/queues", &monitored)
	if len(monitored) != 2 || monitored[0].Status != "UP" || monitored[1].Name != qb.Name || monitored[1].Status != "DOWN" ||
		monitored[1].LastError == "" || monitored[1].ReceiveErrors == 0 {
		t.Errorf("/monitoring/queues = %+v, want %s UP and %s DOWN with its error and failed receives", monitored, qa.Name, qb.Name)
	}
	// The router's report says so too, on the console's monitoring view.
	eventually(t, 20*time.Second, func() bool {
		var mon struct {
			Routers []struct {
				Queues []struct{ Name, Status string }
			}
		}
		in.do("GET", "/api/dispatch/monitoring", apiToken, nil, &mon)
		return len(mon.Routers) == 1 && len(mon.Routers[0].Queues) == 2 && mon.Routers[0].Queues[1].Status == "DOWN"
	}, func() string { return "the router's report does not name the cut queue" })

	// Queue a delivers what is created while b is cut, each group in order.
	load(before, before+during)
	for _, g := range []string{"a1", "a2"} {
		for _, id := range created[g] {
			in.waitStatus(id, 30*time.Second, "COMPLETED")
		}
	}
	for _, r := range rc.snapshot() {
		if j := (cutJob{}); json.Unmarshal([]byte(r.body), &j) == nil && j.Group[0] == 'b' && j.N >= before {
			t.Errorf("job %d of group %s, created while queue b was cut, was delivered before it came back", j.N, j.Group)
		}
	}
	if code := rt.routerJSON("/health/ready", &ready); code != http.StatusServiceUnavailable {
		t.Errorf("the router is ready (%d) while queue b is cut", code)
	}

	// Back: every job of b is delivered.
	proxy.restore()
	for _, g := range []string{"b1", "b2"} {
		for _, id := range created[g] {
			in.waitStatus(id, 60*time.Second, "COMPLETED")
		}
	}
	eventually(t, 20*time.Second, func() bool { return rt.routerJSON("/health/ready", &ready) == http.StatusOK },
		func() string { return fmt.Sprintf("the router is not ready again: %+v", ready) })

	// Each group's jobs reached the target in creation order, each once.
	got := map[string][]int{}
	for _, r := range rc.snapshot() {
		var j cutJob
		if err := json.Unmarshal([]byte(r.body), &j); err != nil {
			t.Fatalf("a delivery that is not a job of the test: %q", r.body)
		}
		got[j.Group] = append(got[j.Group], j.N)
	}
	want := make([]int, before+during)
	for i := range want {
		want[i] = i
	}
	for _, g := range []string{"a1", "a2", "b1", "b2"} {
		if !slices.Equal(got[g], want) {
			t.Errorf("group %s reached the target as %v, want %v (in order, each once)", g, got[g], want)
		}
	}
}
