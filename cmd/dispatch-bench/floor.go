package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch/webhook"
)

// The floor (-floor): the least a service of dispatch's shape does for one
// delivery, run in place of dispatch under the same load, receiver and
// measurements. It takes a create over HTTP and commits the job before its
// 201, POSTs the signed payload to the target, and commits the outcome: two
// HTTP exchanges and two PostgreSQL statements a delivery, with net/http
// and pgx, the libraries dispatch is built on. It has none of dispatch's
// guarantees: no queue, no retry, no group order, no idempotency, no
// metrics, no tracing, no validation beyond the JSON; a job in flight at a
// crash is never delivered. What it costs at a given rate is what any service of this
// shape costs on the machine, so dispatch's figures can be read against it.

// floorCommand is the floor service's own process: dispatch-bench floor.
const floorCommand = "floor"

// floorSchema is the floor's one table: a job and its outcome.
const floorSchema = `CREATE TABLE IF NOT EXISTS floor_job (
	id bigint PRIMARY KEY,
	target_url text NOT NULL,
	payload bytea NOT NULL,
	status text NOT NULL,
	created_at timestamptz NOT NULL,
	completed_at timestamptz
)`

// floorJob is a job handed to a delivery worker.
type floorJob struct {
	id      int64
	target  string
	payload []byte
}

type floorService struct {
	pool   *pgxpool.Pool
	client *http.Client
	secret atomic.Pointer[string] // set by the credentials call
	lastID atomic.Int64
	work   chan floorJob
	lost   atomic.Int64 // outcomes not committed
}

// runFloorService serves the floor on 127.0.0.1 until ctx ends. It prints
// "api listening on ADDR" as dispatch does, reads DATABASE_URL and takes
// its delivery concurrency from DISPATCH_POOLS (CODE:N).
func runFloorService(ctx context.Context, getenv func(string) string, stdout io.Writer) error {
	concurrency := 20
	if _, n, ok := strings.Cut(getenv("DISPATCH_POOLS"), ":"); ok {
		if c, err := strconv.Atoi(n); err == nil && c > 0 {
			concurrency = c
		}
	}
	pool, err := pgxpool.New(ctx, getenv("DATABASE_URL"))
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, floorSchema); err != nil {
		return fmt.Errorf("floor: create table: %w", err)
	}
	f := &floorService{
		pool:   pool,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}, Timeout: 5 * time.Second},
		work:   make(chan floorJob, concurrency),
	}
	f.lastID.Store(time.Now().UnixMicro())
	var workers sync.WaitGroup
	for range concurrency {
		workers.Go(func() {
			for j := range f.work {
				f.deliver(context.WithoutCancel(ctx), j)
			}
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /api/admin/dispatch/credentials", f.createCredentials)
	mux.HandleFunc("POST /api/dispatch/jobs", f.createJob)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "api listening on %s\n", ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(sctx)
		cancel()
	}
	close(f.work) // the handlers have returned: nothing sends any more
	workers.Wait()
	if n := f.lost.Load(); n > 0 {
		err = errors.Join(err, fmt.Errorf("floor: %d outcomes not committed", n))
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (f *floorService) createCredentials(w http.ResponseWriter, r *http.Request) {
	var in struct {
		SigningSecret string `json:"signingSecret"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SigningSecret == "" {
		http.Error(w, "a signingSecret is required", http.StatusBadRequest)
		return
	}
	f.secret.Store(&in.SigningSecret)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":"1"}`)
}

// createJob commits the job, answers 201 and hands it to a worker.
func (f *floorService) createJob(w http.ResponseWriter, r *http.Request) {
	var in struct {
		TargetURL string          `json:"targetUrl"`
		Payload   json.RawMessage `json:"payload"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.TargetURL == "" || len(in.Payload) == 0 {
		http.Error(w, "targetUrl and payload are required", http.StatusBadRequest)
		return
	}
	j := floorJob{id: f.lastID.Add(1), target: in.TargetURL, payload: in.Payload}
	if _, err := f.pool.Exec(r.Context(), `INSERT INTO floor_job (id, target_url, payload, status, created_at)
		VALUES ($1, $2, $3, 'PENDING', now())`, j.id, j.target, j.payload); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = fmt.Fprintf(w, `{"id":"%d"}`, j.id)
	f.work <- j
}

// deliver signs and POSTs the payload once, then commits the outcome.
func (f *floorService) deliver(ctx context.Context, j floorJob) {
	status := "ERROR"
	if secret := f.secret.Load(); secret != nil {
		if req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.target, strings.NewReader(string(j.payload))); err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(webhook.HeaderJobID, strconv.FormatInt(j.id, 10))
			if err := webhook.Sign(req.Header, webhook.Signing{Secret: *secret}, j.payload); err == nil {
				if resp, err := f.client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode < 300 {
						status = "COMPLETED"
					}
				}
			}
		}
	}
	if _, err := f.pool.Exec(ctx, `UPDATE floor_job SET status = $2, completed_at = now() WHERE id = $1`, j.id, status); err != nil {
		f.lost.Add(1)
	}
}
