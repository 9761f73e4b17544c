package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/router/sqstest"
)

// gauge counts the mediations under way and their peak since reset.
type gauge struct {
	mu         sync.Mutex
	open, peak int
}

func (g *gauge) enter() {
	g.mu.Lock()
	g.open++
	g.peak = max(g.peak, g.open)
	g.mu.Unlock()
}

func (g *gauge) leave() { g.mu.Lock(); g.open--; g.mu.Unlock() }

func (g *gauge) now() int { g.mu.Lock(); defer g.mu.Unlock(); return g.open }

func (g *gauge) peakSince() int { g.mu.Lock(); defer g.mu.Unlock(); return g.peak }

func (g *gauge) reset() { g.mu.Lock(); g.peak = g.open; g.mu.Unlock() }

// poolRouter starts a router over q with pools and the given handler
// options; it returns the router and its listener.
func poolRouter(t *testing.T, q *queue.Queue, med router.Mediator, cfg router.Config) (*router.Router, *httptest.Server) {
	t.Helper()
	cfg.ReceiveWait, cfg.MediationTimeout, cfg.ShutdownTimeout = time.Second, 10*time.Second, 10*time.Second
	cfg.Logger = slog.New(slog.DiscardHandler)
	r, err := router.New(q, med, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.Handler(nil))
	t.Cleanup(srv.Close)
	runUntilCleanup(t, r)
	return r, srv
}

func poolStats(r *router.Router, code string) (router.PoolStats, bool) {
	for _, s := range r.Stats() {
		if s.Code == code {
			return s, true
		}
	}
	return router.PoolStats{}, false
}

// sendPointers puts pointers on q: each id in its own group unless group is
// given, naming pool.
func sendPointers(t *testing.T, q *queue.Queue, pool, group string, ids ...int) {
	t.Helper()
	var entries []queue.Entry
	for _, id := range ids {
		g := group
		if g == "" {
			g = "g" + strconv.Itoa(id)
		}
		ptr, _ := json.Marshal(dispatch.Pointer{ID: strconv.Itoa(id), PoolCode: pool, MessageGroupID: g, Sequence: int64(id)})
		entries = append(entries, queue.Entry{Body: string(ptr), GroupID: g, DeduplicationID: fmt.Sprint(id)})
	}
	for len(entries) > 0 {
		n := min(10, len(entries))
		if _, err := q.SendBatch(context.Background(), entries[:n]); err != nil {
			t.Fatal(err)
		}
		entries = entries[n:]
	}
}

// A pool's concurrency changes under load without a restart: up, and the
// new workers start at once; down, and the extra workers leave as their
// mediations end. Every message is mediated, once.
func TestPoolConcurrencyChangesInPlaceUnderLoad(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	var g gauge
	gate := make(chan struct{})
	med := &fakeMediator{fn: func(dispatch.Pointer, int) error {
		g.enter()
		defer g.leave()
		<-gate
		return nil
	}}
	r, _ := poolRouter(t, rq, med, router.Config{Pools: []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 1}}})
	const n = 30
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i + 1
	}
	sendPointers(t, rq, dispatch.DefaultPool, "", ids...)
	eventually(t, 10*time.Second, func() bool { return g.now() == 1 }, "one mediation under way")

	if _, err := r.SetPool(router.PoolConfig{Code: dispatch.DefaultPool, Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return g.now() == 4 }, "four mediations under way once the concurrency is 4")

	if _, err := r.SetPool(router.PoolConfig{Code: dispatch.DefaultPool, Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	gate <- struct{}{} // two mediations end: their workers leave
	gate <- struct{}{}
	eventually(t, 10*time.Second, func() bool { s, _ := poolStats(r, dispatch.DefaultPool); return g.now() == 2 && s.InFlight == 2 },
		"two mediations under way once the concurrency is 2")
	g.reset()
	close(gate)
	eventually(t, 20*time.Second, func() bool { return len(med.seen()) >= n }, "every message mediated")
	if p := g.peakSince(); p > 2 {
		t.Errorf("%d mediations at once after the concurrency went down to 2", p)
	}
	calls := med.seen()
	slices.Sort(calls)
	if len(slices.Compact(calls)) != n || len(med.seen()) != n {
		t.Errorf("mediated %d times, %d distinct; want each of %d once", len(med.seen()), len(slices.Compact(calls)), n)
	}
	if s, _ := poolStats(r, dispatch.DefaultPool); s.Concurrency != 2 || s.Succeeded != n {
		t.Errorf("pool = %+v", s)
	}
}

// A pool removed by a new configuration drains: what it holds is mediated
// there, in order, and a later message of a group it still holds joins it;
// other messages naming it go to the default pool; once empty, it is gone.
func TestRemovedPoolDrains(t *testing.T) {
	t.Parallel()
	// The group's later message comes on a second queue: the first holds
	// the group while its messages are in flight.
	q, q2 := sqstest.New(t, 30*time.Second), sqstest.New(t, 30*time.Second)
	rq, rq2 := q.Open(t), q2.Open(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	med := &fakeMediator{fn: func(ptr dispatch.Pointer, _ int) error {
		if ptr.ID == "1" {
			once.Do(func() { close(started) })
			<-release
		}
		return nil
	}}
	r, _ := poolRouter(t, nil, med, router.Config{DefaultPool: "A", Sources: []router.Source{{Queue: rq}, {Queue: rq2}},
		Pools: []router.PoolConfig{{Code: "A", Concurrency: 2}, {Code: "B", Concurrency: 2}}})
	t.Cleanup(func() { released.Do(func() { close(release) }) }) // before the router stops
	sendPointers(t, rq, "B", "g", 1, 2, 3)
	<-started
	eventually(t, 10*time.Second, func() bool { s, _ := poolStats(r, "B"); return s.Buffered == 2 }, "2 and 3 wait behind 1 in pool B")

	if err := r.SetPools([]router.PoolConfig{{Code: "A", Concurrency: 2}, {Code: "C", Concurrency: 1}}); err != nil {
		t.Fatal(err)
	}
	if s, ok := poolStats(r, "B"); !ok || !s.Draining || s.InFlight != 1 || s.Buffered != 2 {
		t.Errorf("the removed pool: %+v (present %v), want draining with its 1 in flight and 2 buffered", s, ok)
	}
	if _, ok := poolStats(r, "C"); !ok {
		t.Error("the added pool C is not there")
	}
	sendPointers(t, rq2, "B", "g", 4)  // its group is held by B: it joins them
	sendPointers(t, rq2, "B", "", 100) // another group naming B: the default pool
	eventually(t, 10*time.Second, func() bool { s, _ := poolStats(r, "A"); return s.Succeeded == 1 }, "100 mediated in the default pool")
	eventually(t, 10*time.Second, func() bool { s, _ := poolStats(r, "B"); return s.Buffered == 3 }, "4 joined its group in the draining pool")
	released.Do(func() { close(release) })
	eventually(t, 10*time.Second, func() bool { _, ok := poolStats(r, "B"); return !ok }, "the drained pool is gone")
	var group []string
	for _, id := range med.seen() {
		if id != "100" {
			group = append(group, id)
		}
	}
	if !slices.Equal(group, []string{"1", "2", "3", "4"}) {
		t.Errorf("group g mediated as %v, want 1 2 3 4", group)
	}
	sendPointers(t, rq, "B", "g", 5) // the pool is gone: the default pool
	eventually(t, 10*time.Second, func() bool { s, _ := poolStats(r, "A"); return s.Succeeded == 2 }, "5 mediated in the default pool")
}

// A removed pool that comes back while it drains has its workers again:
// those that were idle left when it was removed, and it is taken back with
// its whole concurrency, not with the one still mediating.
func TestAPoolTakenBackWhileItDrainsHasAllItsWorkers(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	var g gauge
	first, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	med := &fakeMediator{fn: func(ptr dispatch.Pointer, _ int) error {
		g.enter()
		defer g.leave()
		if ptr.ID == "1" {
			once.Do(func() { close(first) })
		}
		<-gate
		return nil
	}}
	r, _ := poolRouter(t, rq, med, router.Config{DefaultPool: "A",
		Pools: []router.PoolConfig{{Code: "A", Concurrency: 1}, {Code: "B", Concurrency: 3}}})
	t.Cleanup(func() { close(gate) })
	sendPointers(t, rq, "B", "", 1)
	<-first
	if err := r.SetPools([]router.PoolConfig{{Code: "A", Concurrency: 1}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() bool { return r.Workers("B") == 1 }, "the draining pool's idle workers left")
	if err := r.SetPools([]router.PoolConfig{{Code: "A", Concurrency: 1}, {Code: "B", Concurrency: 3}}); err != nil {
		t.Fatal(err)
	}
	sendPointers(t, rq, "B", "", 2, 3)
	eventually(t, 10*time.Second, func() bool { return g.now() == 3 }, "three mediations at once in the pool taken back with concurrency 3")
}

// A new rate limit applies at once, to the mediation waiting for a turn
// under the old one too.
func TestPoolRateLimitChangesInPlace(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	rq := q.Open(t)
	med := &fakeMediator{}
	r, _ := poolRouter(t, rq, med, router.Config{Pools: []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 2, RatePerMinute: 1}}})
	sendPointers(t, rq, dispatch.DefaultPool, "", 1, 2)
	eventually(t, 10*time.Second, func() bool {
		s, _ := poolStats(r, dispatch.DefaultPool)
		return len(med.seen()) == 1 && s.RateLimited == 1
	}, "one mediated, the other waiting a minute for its turn")
	if _, err := r.SetPool(router.PoolConfig{Code: dispatch.DefaultPool, Concurrency: 2, RatePerMinute: 6000}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return len(med.seen()) == 2 }, "the waiting one mediated under the new limit")
	if s, _ := poolStats(r, dispatch.DefaultPool); s.RatePerMinute != 6000 {
		t.Errorf("pool = %+v", s)
	}
}

// call is fetch with the answer's body as text.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	code, b := fetch(t, method, url, token, body)
	return code, string(b)
}

// PUT /monitoring/pools/{code} and POST /monitoring/reload change the pools
// with the admin token, and only with it; a bad change changes nothing.
func TestPoolsChangeOverTheListener(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	const admin = "admin-token-0123456789"
	var (
		mu     sync.Mutex
		file   = []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 3}, {Code: "SLOW", Concurrency: 1, RatePerMinute: 60}}
		broken error
	)
	var told [][]router.PoolConfig
	r, srv := poolRouter(t, q.Open(t), &fakeMediator{}, router.Config{
		Pools:      []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 2}},
		AdminToken: admin,
		Reload: func() ([]router.PoolConfig, error) {
			mu.Lock()
			defer mu.Unlock()
			return file, broken
		},
		PoolsChanged: func(pcs []router.PoolConfig) { mu.Lock(); told = append(told, pcs); mu.Unlock() },
	})
	for _, token := range []string{"", "wrong-token-0123456789"} {
		if code, _ := call(t, "PUT", srv.URL+"/monitoring/pools/DISPATCH-POOL", token, `{"concurrency": 9}`); code != http.StatusUnauthorized {
			t.Errorf("PUT with token %q: %d, want 401", token, code)
		}
		if code, _ := call(t, "POST", srv.URL+"/monitoring/reload", token, ``); code != http.StatusUnauthorized {
			t.Errorf("reload with token %q: %d, want 401", token, code)
		}
	}
	// The scheme is read in any case, as the API reads it (RFC 9110 §11.1).
	req, _ := http.NewRequest("POST", srv.URL+"/monitoring/reload", nil)
	req.Header.Set("Authorization", "bearer "+admin)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("reload with the scheme in lower case: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}
	code, body := call(t, "PUT", srv.URL+"/monitoring/pools/DISPATCH-POOL", admin, `{"concurrency": 5, "rateLimitPerMinute": 120}`)
	var st router.PoolStats
	_ = json.Unmarshal([]byte(body), &st)
	if code != http.StatusOK || st.Concurrency != 5 || st.RatePerMinute != 120 {
		t.Errorf("PUT: %d %s", code, body)
	}
	if code, body := call(t, "PUT", srv.URL+"/monitoring/pools/DISPATCH-POOL", admin, `{"rateLimitPerMinute": 0}`); code != http.StatusOK || !strings.Contains(body, `"concurrency":5`) {
		t.Errorf("PUT of the rate alone: %d %s, want the concurrency kept", code, body)
	}
	for _, bad := range []struct{ path, body string }{
		{"/monitoring/pools/DISPATCH-POOL", `{"concurrency": 0}`},
		{"/monitoring/pools/DISPATCH-POOL", `{"concurrency": 1001}`},
		{"/monitoring/pools/DISPATCH-POOL", `{"concurrency": 2, "colour": "red"}`},
		{"/monitoring/pools/NEW", `{"rateLimitPerMinute": 5}`}, // a new pool needs its concurrency
		{"/monitoring/pools/DISPATCH-POOL", `{"rateLimitPerMinute": -1}`},
	} {
		if code, body := call(t, "PUT", srv.URL+bad.path, admin, bad.body); code != http.StatusBadRequest || !strings.Contains(body, `"invalid_request"`) {
			t.Errorf("PUT %s %s: %d %s, want 400", bad.path, bad.body, code, body)
		}
	}
	if code, _ := call(t, "PUT", srv.URL+"/monitoring/pools/FAST", admin, `{"concurrency": 4}`); code != http.StatusOK {
		t.Errorf("PUT of a new pool: %d", code)
	}
	if s, ok := poolStats(r, "FAST"); !ok || s.Concurrency != 4 {
		t.Errorf("the pool PUT added: %+v", s)
	}

	code, body = call(t, "POST", srv.URL+"/monitoring/reload", admin, ``)
	if code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}
	want := []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 3}, {Code: "SLOW", Concurrency: 1, RatePerMinute: 60}}
	if got := r.PoolConfigs(); !slices.Equal(got, want) {
		t.Errorf("after the reload: %+v, want the file's %+v (FAST, not in it, gone)", got, want)
	}
	mu.Lock()
	broken = errors.New("the file is not valid YAML")
	mu.Unlock()
	if code, body := call(t, "POST", srv.URL+"/monitoring/reload", admin, ``); code != http.StatusBadRequest || !strings.Contains(body, "not valid YAML") {
		t.Errorf("a failing reload: %d %s, want 400 saying why", code, body)
	}
	if got := r.PoolConfigs(); !slices.Equal(got, want) {
		t.Errorf("a failing reload changed the pools: %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) == 0 || !slices.Equal(told[len(told)-1], want) {
		t.Errorf("PoolsChanged was told %+v", told)
	}
}
