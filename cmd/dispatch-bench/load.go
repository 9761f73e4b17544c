package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dispatchhq/dispatch/webhook"
)

// The load: API clients that create jobs, and the receiver the jobs are
// delivered to, which verifies every signature and notes each job's first
// arrival.

// jobLatency is one job's start (its create sent or scheduled), from the
// start of the load, and its latency to its first delivery.
type jobLatency struct{ start, latency time.Duration }

// benchResult is what one run measured.
type benchResult struct {
	jobs          int
	start         time.Time
	createdIn     time.Duration // first request → last create answered
	deliveredIn   time.Duration // first request → last first delivery
	deliveries    int           // requests the receiver saw, duplicates included
	duplicates    int
	badSignatures int
	latencies     []time.Duration // create (sent or scheduled) → first delivery, sorted
	timeline      []jobLatency    // the same per job, in the order the jobs started
	answers       []time.Duration // create (sent or scheduled) → its answer, per request, sorted
	maxLag        time.Duration   // fixed rate: how late the schedule sent a request at worst
	cpu           cpuUse
	pg            pgUse
	pgVersion     string
	autovacuum    string         // SHOW autovacuum; "" when unread
	jobsHeld      int64          // the jobs in the database when the load began
	sqs           []sqsActionUse // the service's SQS requests by action
	sqsUnknown    bool           // the proxy did not answer with its counts
	pgRoundTrips  int64          // -1: unknown
	peakRSS       int64          // bytes; 0: unknown
	children      []benchChildUse
}

type benchChildUse struct {
	name    string
	peakRSS int64
	top     rssSample // the highest sample over the load; zero: none read
}

// runLoad creates o.jobs jobs, from o.clients closed-loop clients or on
// o.rate's fixed schedule, and waits until the receiver has seen each of
// them, or the timeout passes.
func runLoad(ctx context.Context, o benchOptions, client *http.Client, apiURL string, rc *benchReceiver, credID string) (benchResult, error) {
	res := benchResult{jobs: o.jobs}
	one, err := json.Marshal(map[string]any{
		"source": "bench", "type": "order.created", "targetUrl": rc.url + "/hooks/orders",
		"payload": benchPayload, "credentialsId": credID,
		"metadata": map[string]string{"tenant": "acme"},
	})
	if err != nil {
		return res, err
	}
	batchBody := func(n int) []byte {
		b := append([]byte(`{"jobs":[`), one...)
		for range n - 1 {
			b = append(append(b, ','), one...)
		}
		return append(b, "]}"...)
	}
	full := batchBody(o.batch)

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var (
		mu      sync.Mutex
		sentAt  = make(map[string]time.Time, o.jobs)
		lastAck time.Time
	)
	// create sends n jobs in one request; from is when the request was
	// sent (throughput) or due (fixed rate).
	create := func(ctx context.Context, n int, from time.Time) error {
		var ids []string
		var err error
		if o.batch == 1 {
			ids, err = postJob(ctx, client, apiURL, one)
		} else {
			body := full
			if n < o.batch {
				body = batchBody(n)
			}
			ids, err = postBatch(ctx, client, apiURL, body, n)
		}
		if err != nil {
			return err
		}
		t1 := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			sentAt[id] = from
		}
		res.answers = append(res.answers, t1.Sub(from))
		if t1.After(lastAck) {
			lastAck = t1
		}
		return nil
	}
	res.start = time.Now()
	g, gctx := errgroup.WithContext(ctx)
	if o.rate > 0 {
		res.maxLag = schedule(gctx, g, o, res.start, create)
	} else {
		var next atomic.Int64
		for range o.clients {
			g.Go(func() error {
				for {
					first := int(next.Add(int64(o.batch))) - o.batch
					if first >= o.jobs {
						return nil
					}
					if err := create(gctx, min(o.batch, o.jobs-first), time.Now()); err != nil {
						return err
					}
				}
			})
		}
	}
	if err := g.Wait(); err != nil {
		return res, fmt.Errorf("bench: creating jobs: %w", err)
	}
	res.createdIn = lastAck.Sub(res.start)
	slices.Sort(res.answers)

	select {
	case <-rc.all:
	case <-ctx.Done():
		got, _, _, _ := rc.counts()
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return res, fmt.Errorf("bench: only %d of %d jobs were delivered within %s (raise -timeout?)", got, o.jobs, o.timeout)
		}
		return res, ctx.Err()
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	res.deliveredIn = rc.last.Sub(res.start)
	res.deliveries, res.duplicates, res.badSignatures = rc.deliveries, rc.duplicates, rc.badSignatures
	res.latencies = make([]time.Duration, 0, len(sentAt))
	for id, t0 := range sentAt {
		if at, ok := rc.first[id]; ok {
			res.latencies = append(res.latencies, at.Sub(t0))
			res.timeline = append(res.timeline, jobLatency{start: t0.Sub(res.start), latency: at.Sub(t0)})
		}
	}
	slices.Sort(res.latencies)
	slices.SortFunc(res.timeline, func(a, b jobLatency) int { return cmp.Compare(a.start, b.start) })
	return res, nil
}

// schedule is the fixed-rate load: request i is due at start + i×(batch ÷
// rate) and goes out then in a goroutine of its own, however many earlier
// ones are still unanswered, so a slow answer never delays the next
// request (no coordinated omission). It returns how late the schedule sent
// a request at worst: when that is large, the load generator itself could
// not keep up and the figures understate the rate.
func schedule(ctx context.Context, g *errgroup.Group, o benchOptions, start time.Time,
	create func(context.Context, int, time.Time) error) time.Duration {
	interval := time.Duration(float64(o.batch) / o.rate * float64(time.Second))
	timer := time.NewTimer(0)
	defer timer.Stop()
	var maxLag time.Duration
	for i, first := 0, 0; first < o.jobs; i, first = i+1, first+o.batch {
		due := start.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return maxLag
			case <-timer.C:
			}
		}
		maxLag = max(maxLag, time.Since(due))
		n := min(o.batch, o.jobs-first)
		g.Go(func() error { return create(ctx, n, due) })
	}
	return maxLag
}

func postJSON(ctx context.Context, client *http.Client, url string, body []byte, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: HTTP %d: %.300s", url, resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("POST %s: decode answer: %w", url, err)
	}
	return nil
}

func postJob(ctx context.Context, client *http.Client, apiURL string, body []byte) ([]string, error) {
	var j struct {
		ID string `json:"id"`
	}
	if err := postJSON(ctx, client, apiURL+"/api/dispatch/jobs", body, http.StatusCreated, &j); err != nil {
		return nil, err
	}
	return []string{j.ID}, nil
}

func postBatch(ctx context.Context, client *http.Client, apiURL string, body []byte, n int) ([]string, error) {
	var out struct {
		Results []struct {
			Status int `json:"status"`
			Job    struct {
				ID string `json:"id"`
			} `json:"job"`
			Error json.RawMessage `json:"error"`
		} `json:"results"`
	}
	if err := postJSON(ctx, client, apiURL+"/api/dispatch/jobs/batch", body, http.StatusOK, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != n {
		return nil, fmt.Errorf("batch of %d answered with %d results", n, len(out.Results))
	}
	ids := make([]string, n)
	for i, r := range out.Results {
		if r.Status != http.StatusCreated {
			return nil, fmt.Errorf("batch item %d: status %d: %s", i, r.Status, r.Error)
		}
		ids[i] = r.Job.ID
	}
	return ids, nil
}

// createBenchCredentials creates the signing credentials, bound to the
// bench receiver's origin (credentials are sent nowhere else).
func createBenchCredentials(ctx context.Context, client *http.Client, apiURL, secret, receiverURL string) (string, error) {
	body, _ := json.Marshal(map[string]any{"signingSecret": secret, "bearerToken": "bench-bearer-token",
		"allowedTargets": []string{receiverURL}})
	var cred struct {
		ID string `json:"id"`
	}
	if err := postJSON(ctx, client, apiURL+"/api/admin/dispatch/credentials", body, http.StatusCreated, &cred); err != nil {
		return "", fmt.Errorf("bench: create credentials: %w", err)
	}
	return cred.ID, nil
}

// ---------------------------------------------------------------- receiver

// benchReceiver is the webhook target: it verifies each request's signature
// and records the first arrival of every job id.
type benchReceiver struct {
	url      string
	srv      *http.Server
	done     chan error
	verifier webhook.Verifier
	want     int
	all      chan struct{} // closed once every job arrived

	mu            sync.Mutex
	first         map[string]time.Time
	last          time.Time
	deliveries    int
	duplicates    int
	badSignatures int
}

func startBenchReceiver(want int, secret string) (*benchReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bench: receiver: %w", err)
	}
	rc := &benchReceiver{
		url: "http://" + ln.Addr().String(), done: make(chan error, 1),
		verifier: webhook.Verifier{Scheme: webhook.SchemeFlowCatalyst, Secrets: []string{secret}},
		want:     want, all: make(chan struct{}), first: make(map[string]time.Time, want),
	}
	rc.srv = &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := rc.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			rc.done <- err
			return
		}
		rc.done <- nil
	}()
	return rc, nil
}

func (rc *benchReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, err := rc.verifier.VerifyRequest(r)
	at := time.Now()
	id := r.Header.Get(webhook.HeaderJobID)
	rc.mu.Lock()
	rc.deliveries++
	if err != nil {
		rc.badSignatures++
	}
	if _, seen := rc.first[id]; seen {
		rc.duplicates++
	} else if id != "" {
		rc.first[id] = at
		rc.last = at
		if len(rc.first) == rc.want {
			close(rc.all)
		}
	}
	rc.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (rc *benchReceiver) counts() (unique, deliveries, duplicates, bad int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.first), rc.deliveries, rc.duplicates, rc.badSignatures
}

// stop shuts the receiver down and returns what ended its server, nil for
// the shutdown itself.
func (rc *benchReceiver) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rc.srv.Shutdown(ctx)
	return <-rc.done
}

// writeTimeline writes each job's start and latency, in milliseconds, one
// job a line (-latencies).
func writeTimeline(path string, timeline []jobLatency) error {
	var b strings.Builder
	b.WriteString("start_ms latency_ms\n")
	for _, j := range timeline {
		fmt.Fprintf(&b, "%.3f %.3f\n", float64(j.start)/float64(time.Millisecond), float64(j.latency)/float64(time.Millisecond))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("bench: -latencies: %w", err)
	}
	return nil
}
