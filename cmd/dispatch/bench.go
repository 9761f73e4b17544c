package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/dispatchhq/dispatch/config"
	"github.com/dispatchhq/dispatch/webhook"
)

const benchUsage = `usage: dispatch bench [flags]

Pushes jobs through the whole pipeline (API → PostgreSQL → SQS → router →
processing endpoint → signed webhook) to a local receiver and reports
throughput, create→delivery latency, CPU per delivery (the whole box and each
process), PostgreSQL's work per delivery and memory.

Two modes:
  throughput   -jobs N from -clients N clients, each sending its next create
               as soon as the last one is answered (the default)
  fixed rate   -rate R -duration D: R jobs a second on a fixed schedule,
               whether or not earlier creates were answered (open loop), and
               latency counted from each job's scheduled time, so a stall
               shows up in the percentiles instead of slowing the load

api and router run in this process (dispatch all), or with -split as two
child processes of this binary (dispatch api, dispatch router mediating
over HTTP). It uses DATABASE_URL's server but a fresh database
dispatch_bench_<random>, and a fresh FIFO queue bench-<random>.fifo on
AWS_ENDPOINT_URL_SQS (default http://127.0.0.1:9324); both are removed at
the end. Both must be on this machine (loopback or a Unix socket).

flags:
  -jobs N           jobs to deliver in throughput mode (default 5000)
  -clients N        concurrent API clients creating jobs (default 8)
  -rate R           fixed-rate mode: jobs per second
  -duration D       fixed-rate mode: how long to create jobs (default 10s)
  -batch N          jobs per request; above 1 uses /api/dispatch/jobs/batch (1-100, default 1)
  -concurrency N    the processing pool's concurrency (default 20)
  -split            run dispatch api and dispatch router as child processes
  -timeout D        give up when not every job arrived within D (default 5m)
  -cpuprofile FILE  write a pprof CPU profile of this process over the load
  -blockprofile FILE, -mutexprofile FILE
                    the same for blocking and mutex contention (sampled)
  (with -split they cover the load generator and receiver; -cpuprofile
  FILE also has each child write FILE.api and FILE.router, over its
  whole run, through DISPATCH_CPU_PROFILE)`

const (
	benchDefaultSQS      = "http://127.0.0.1:9324"
	benchMaxBatch        = 100 // the API's batch limit
	benchStartTimeout    = time.Minute
	benchStopTimeout     = time.Minute
	benchCleanupTimeout  = 30 * time.Second
	benchVisibility      = "60" // seconds, as router.Queue creates queues
	benchShutdownTimeout = "10s"
	benchStatsTimeout    = 10 * time.Second // for the service's connections to leave PostgreSQL
)

// benchPayload is a typical small webhook payload.
const benchPayload = `{"orderId":"ord_8f14e45fceea167a","customerId":"cus_c9f0f895fb98ab91","amount":99.99,"currency":"EUR","items":3}`

type benchOptions struct {
	jobs, clients, batch, concurrency int
	rate                              float64 // jobs per second; 0: throughput mode
	duration, timeout                 time.Duration
	split                             bool
	cpuProfile, blockProfile          string
	mutexProfile                      string
}

func parseBenchFlags(args []string, stderr io.Writer) (benchOptions, error) {
	var o benchOptions
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, benchUsage) }
	fs.IntVar(&o.jobs, "jobs", 5000, "")
	fs.IntVar(&o.clients, "clients", 8, "")
	fs.Float64Var(&o.rate, "rate", 0, "")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "")
	fs.IntVar(&o.batch, "batch", 1, "")
	fs.IntVar(&o.concurrency, "concurrency", 20, "")
	fs.BoolVar(&o.split, "split", false, "")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "")
	fs.StringVar(&o.blockProfile, "blockprofile", "", "")
	fs.StringVar(&o.mutexProfile, "mutexprofile", "", "")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if o.rate > 0 {
		if set["jobs"] {
			errs = append(errs, errors.New("-jobs and -rate exclude each other (-rate runs for -duration)"))
		}
		if o.duration <= 0 {
			errs = append(errs, errors.New("-duration must be positive"))
		}
		o.jobs = int(o.rate*o.duration.Seconds() + 0.5)
		if o.jobs < 1 {
			errs = append(errs, errors.New("-rate × -duration must make at least one job"))
		}
	} else if set["rate"] {
		errs = append(errs, errors.New("-rate must be positive"))
	} else if set["duration"] {
		errs = append(errs, errors.New("-duration needs -rate"))
	}
	if o.jobs < 1 {
		errs = append(errs, errors.New("-jobs must be at least 1"))
	}
	if o.clients < 1 {
		errs = append(errs, errors.New("-clients must be at least 1"))
	}
	if o.batch < 1 || o.batch > benchMaxBatch {
		errs = append(errs, fmt.Errorf("-batch must be 1 to %d", benchMaxBatch))
	}
	if o.concurrency < 1 || o.concurrency > 1000 {
		errs = append(errs, errors.New("-concurrency must be 1 to 1000"))
	}
	if o.timeout <= 0 {
		errs = append(errs, errors.New("-timeout must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("bench: %w", err)
	}
	return o, nil
}

// runBench is `dispatch bench`.
func runBench(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) error {
	o, err := parseBenchFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	getenv := envLookup(environ)
	sqsEndpoint := getenv("AWS_ENDPOINT_URL_SQS")
	if sqsEndpoint == "" {
		sqsEndpoint = benchDefaultSQS
	}
	dbURL := getenv("DATABASE_URL")
	if dbURL == "" {
		dbURL = config.DefaultDatabaseURL
	}
	if err := checkLocalSQS(sqsEndpoint); err != nil {
		return err
	}
	adminCfg, err := localDatabaseConfig(dbURL)
	if err != nil {
		return err
	}
	setLocalAWSEnv()

	suffix := randomHex(6)
	dbName, queueName := "dispatch_bench_"+suffix, "bench-"+suffix+".fifo"
	if err := createBenchDatabase(ctx, adminCfg, dbName); err != nil {
		return err
	}
	defer dropBenchDatabase(ctx, adminCfg, dbName, stderr)
	queueURL, deleteQueue, err := createBenchQueue(ctx, sqsEndpoint, queueName)
	if err != nil {
		return err
	}
	defer deleteQueue()

	secret, err := webhook.NewSecret(webhook.SchemeFlowCatalyst)
	if err != nil {
		return err
	}
	rc, err := startBenchReceiver(o.jobs, secret)
	if err != nil {
		return err
	}
	defer rc.stop()

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	env := benchEnv(environ, map[string]string{
		"DATABASE_URL":                   withDatabaseName(dbURL, dbName),
		"AWS_ENDPOINT_URL_SQS":           sqsEndpoint,
		"DISPATCH_QUEUE_URL":             queueURL,
		"DISPATCH_INSECURE":              "true",
		"DISPATCH_ALLOW_PRIVATE_TARGETS": "true",
		"DISPATCH_HTTP_ADDR":             "127.0.0.1:0",
		"DISPATCH_ROUTER_ADDR":           "127.0.0.1:0",
		"DISPATCH_POOLS":                 fmt.Sprintf("DISPATCH-POOL:%d", o.concurrency),
		"DISPATCH_LOG_LEVEL":             "warn",
		"DISPATCH_AUTO_MIGRATE":          "true",
		"DISPATCH_ENCRYPTION_KEY":        base64.StdEncoding.EncodeToString(key),
		"DISPATCH_SHUTDOWN_TIMEOUT":      benchShutdownTimeout,
		// The bench receiver answers at once; a short delivery timeout lets
		// the short shutdown above pass the start-up check.
		"DISPATCH_DELIVERY_TIMEOUT": "5s",
	})
	var svc benchSystem
	if o.split {
		svc, err = startBenchSplit(ctx, env, o.cpuProfile, stderr)
	} else {
		svc, err = startBenchService(ctx, env, stderr)
	}
	if err != nil {
		return err
	}
	defer svc.stop() // on early returns; the normal path stops it below

	idle := o.clients
	if o.rate > 0 { // open loop: as many requests in flight as the service makes wait
		idle = max(idle, 256)
	}
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConns: idle, MaxIdleConnsPerHost: idle, IdleConnTimeout: time.Minute},
		Timeout:   30 * time.Second,
	}
	defer client.CloseIdleConnections()
	credID, err := createBenchCredentials(ctx, client, svc.url(), secret, rc.url)
	if err != nil {
		return err
	}

	benchDB := adminCfg.Copy()
	benchDB.Database = dbName
	pg := newPGStats(ctx, benchDB)
	pg0, err := pg.read(ctx)
	if err != nil {
		return err
	}
	var pids []int
	for _, c := range svc.children() {
		pids = append(pids, c.pid)
	}
	profiles, err := startProfiles(o.cpuProfile, o.blockProfile, o.mutexProfile)
	if err != nil {
		return err
	}
	// The service's connections to PostgreSQL are in this process or, split,
	// in the API's (the router never connects).
	servicePIDs := append([]int{os.Getpid()}, pids...)
	seg0, segErr := pgSegments(servicePIDs, adminCfg.Port)
	cpu0 := sampleCPU(dbName, pids)
	res, loadErr := runLoad(ctx, o, client, svc.url(), rc, credID)
	cpu1 := sampleCPU(dbName, pids)
	seg1, err := pgSegments(servicePIDs, adminCfg.Port)
	if segErr == nil && err == nil && len(seg1) > 0 {
		res.pgRoundTrips = segmentsSent(seg0, seg1)
	} else {
		res.pgRoundTrips = -1 // unknown: no TCP connection seen (a Unix socket), or pidfd_getfd not allowed
	}
	if err := profiles.stop(); err != nil && loadErr == nil {
		loadErr = err
	}
	res.cpu = cpu0.until(cpu1)
	res.peakRSS = peakRSS()
	for _, c := range svc.children() {
		res.children = append(res.children, benchChildUse{name: c.name, peakRSS: pidPeakRSS(c.pid)})
	}
	stopErr := svc.stop()
	if loadErr != nil {
		return loadErr
	}
	if stopErr != nil {
		return fmt.Errorf("bench: stop the service: %w", stopErr)
	}
	pg.waitIdle(ctx, benchStatsTimeout)
	pg1, err := pg.read(ctx)
	if err != nil {
		return err
	}
	res.pg = pg0.until(pg1)
	res.write(stdout, o, dbName)
	return nil
}

// ---------------------------------------------------------------- load

type benchResult struct {
	jobs          int
	start         time.Time
	createdIn     time.Duration // first request → last create answered
	deliveredIn   time.Duration // first request → last first delivery
	deliveries    int           // requests the receiver saw, duplicates included
	duplicates    int
	badSignatures int
	latencies     []time.Duration // create (sent or scheduled) → first delivery, sorted
	answers       []time.Duration // create (sent or scheduled) → its answer, per request, sorted
	maxLag        time.Duration   // fixed rate: how late the schedule sent a request at worst
	cpu           cpuUse
	pg            pgUse
	pgRoundTrips  int64 // -1: unknown
	peakRSS       int64 // bytes; 0: unknown
	children      []benchChildUse
}

type benchChildUse struct {
	name    string
	peakRSS int64
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
		}
	}
	slices.Sort(res.latencies)
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
	id := r.Header.Get("X-Dispatch-Job-Id")
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

func (rc *benchReceiver) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rc.srv.Shutdown(ctx)
	<-rc.done
}

// ---------------------------------------------------------------- service

// benchService is `dispatch all` running in this process.
type benchService struct {
	apiURL   string
	cancel   context.CancelFunc
	done     chan error // run's result
	scanning sync.WaitGroup
	once     sync.Once
	err      error
}

// startBenchService starts run(ctx, "all") and waits until both of its
// listeners are up.
func startBenchService(ctx context.Context, env []string, stderr io.Writer) (*benchService, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &benchService{cancel: cancel, done: make(chan error, 1)}
	pr, pw := io.Pipe()
	go func() {
		err := run(ctx, []string{"all"}, env, pw, stderr)
		pw.Close()
		s.done <- err
	}()
	ready := make(chan string, 1)
	s.scanning.Go(func() {
		var apiAddr string
		var routerUp, sent bool
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "api listening on "); ok {
				apiAddr = v
			}
			if strings.HasPrefix(sc.Text(), "router listening on ") {
				routerUp = true
			}
			if apiAddr != "" && routerUp && !sent {
				ready <- "http://" + apiAddr
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pr) // keep run from blocking on stdout
	})
	select {
	case s.apiURL = <-ready:
		return s, nil
	case err := <-s.done:
		s.done <- err
		s.stop()
		return nil, fmt.Errorf("bench: dispatch all exited before listening: %v", err)
	case <-time.After(benchStartTimeout):
		s.stop()
		return nil, fmt.Errorf("bench: dispatch all did not start within %s", benchStartTimeout)
	}
}

// stop cancels run, waits for it to return and reports its error. It is
// safe to call more than once.
func (s *benchService) stop() error {
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if !errors.Is(err, context.Canceled) {
				s.err = err
			}
		case <-time.After(benchStopTimeout):
			s.err = fmt.Errorf("did not stop within %s", benchStopTimeout)
			return // the scanner ends only with run
		}
		s.scanning.Wait()
	})
	return s.err
}

// benchEnv is the environment of the in-process service: the caller's,
// minus the settings that would point it at other data or change the shape
// of the run, plus set.
func benchEnv(environ []string, set map[string]string) []string {
	drop := map[string]bool{
		"DISPATCH_QUEUE_NAME": true, "DISPATCH_QUEUE_CREATE": true, "DISPATCH_PROCESS_URL": true,
		"DISPATCH_ROUTER_CONFIG": true, "DISPATCH_API_TOKENS": true, "DISPATCH_ADMIN_TOKEN": true,
		"DISPATCH_INTERNAL_TOKEN": true, "DISPATCH_ENCRYPTION_KEY_PREVIOUS": true,
		"DISPATCH_ALLOWED_TARGET_CIDRS": true,
	}
	out := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok && !drop[k] {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}

// ---------------------------------------------------------------- database and queue

// localDatabaseConfig parses dbURL and refuses servers not on this machine:
// bench creates and drops databases.
func localDatabaseConfig(dbURL string) (*pgx.ConnConfig, error) {
	// pgxpool's parser takes out its pool_* settings, which the service's
	// pool honours and a plain connection would send as server settings.
	poolCfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, errors.New("bench: DATABASE_URL does not parse")
	}
	cfg := poolCfg.ConnConfig
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if !strings.HasPrefix(h, "/") && !isLoopbackHost(h) {
			return nil, fmt.Errorf("bench: DATABASE_URL points at %s; bench only uses a PostgreSQL server on this machine", h)
		}
	}
	return cfg, nil
}

func checkLocalSQS(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return fmt.Errorf("bench: AWS_ENDPOINT_URL_SQS %q is not a URL", endpoint)
	}
	if !isLoopbackHost(u.Hostname()) {
		return fmt.Errorf("bench: AWS_ENDPOINT_URL_SQS points at %s; bench only uses an SQS emulator on this machine", u.Hostname())
	}
	return nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// setLocalAWSEnv gives the SDK's credential chain (which reads the process
// environment) static local credentials, so it never looks further (shared
// files, instance metadata) for an emulator that ignores them anyway.
func setLocalAWSEnv() {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			_ = os.Setenv(k, v)
		}
	}
}

// adminConnect connects to the server of cfg, trying its own database, then
// the maintenance databases.
func adminConnect(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	var errs []error
	for _, db := range []string{cfg.Database, "postgres", "template1"} {
		c := cfg.Copy()
		c.Database = db
		conn, err := pgx.ConnectConfig(ctx, c)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("bench: connect to PostgreSQL: %w", errors.Join(errs...))
}

func createBenchDatabase(ctx context.Context, cfg *pgx.ConnConfig, name string) error {
	conn, err := adminConnect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("bench: create database %s: %w", name, err)
	}
	return nil
}

func dropBenchDatabase(ctx context.Context, cfg *pgx.ConnConfig, name string, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
	defer cancel()
	conn, err := adminConnect(ctx, cfg)
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: could not drop database %s: %v\n", name, err)
	}
}

// withDatabaseName returns dbURL (a URL or a keyword/value string) naming db.
func withDatabaseName(dbURL, db string) string {
	if strings.HasPrefix(dbURL, "postgres://") || strings.HasPrefix(dbURL, "postgresql://") {
		if u, err := url.Parse(dbURL); err == nil {
			u.Path = "/" + db
			return u.String()
		}
	}
	return dbURL + " dbname=" + db
}

// createBenchQueue creates a FIFO queue and returns its URL and a function
// that deletes it.
func createBenchQueue(ctx context.Context, endpoint, name string) (string, func(), error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("bench: aws config: %w", err)
	}
	api := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	out, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName: aws.String(name),
		Attributes: map[string]string{
			"FifoQueue": "true", "ContentBasedDeduplication": "false", "VisibilityTimeout": benchVisibility,
		},
	})
	if err != nil {
		return "", nil, fmt.Errorf("bench: create queue %s on %s (is the emulator up? make up): %w", name, endpoint, err)
	}
	queueURL := aws.ToString(out.QueueUrl)
	return queueURL, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
		defer cancel()
		_, _ = api.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
	}, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---------------------------------------------------------------- measurements

// procStatus returns a field of /proc/self/status ("" when unavailable).
func procStatus(field string) string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// peakRSS is the process's peak resident set (VmHWM) in bytes, 0 if unknown.
func peakRSS() int64 {
	kb, _, _ := strings.Cut(procStatus("VmHWM"), " ")
	n, err := strconv.ParseInt(kb, 10, 64)
	if err != nil {
		return 0
	}
	return n << 10
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1 // nearest rank
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func rate(n int, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(n)/d.Seconds(), 'f', 0, 64) + "/s"
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func perDelivery(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond)/float64(n), 'f', 2, 64) + " ms"
}

func perDeliveryN(v int64, n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(v)/float64(n), 'f', 2, 64)
}

func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

func (r benchResult) write(w io.Writer, o benchOptions, dbName string) {
	creates := "single creates"
	if o.batch > 1 {
		creates = fmt.Sprintf("batches of %d", o.batch)
	}
	mode := fmt.Sprintf("throughput: %d jobs, %d clients", r.jobs, o.clients)
	from := "create request sent"
	if o.rate > 0 {
		mode = fmt.Sprintf("fixed rate: %g jobs/s for %s (%d jobs, open loop)", o.rate, o.duration, r.jobs)
		from = "create scheduled"
	}
	system := "dispatch all in this process"
	if o.split {
		system = "dispatch api + dispatch router as child processes"
	}
	n := r.deliveries
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "dispatch bench\t%s, %s, pool concurrency %d, %s\n", mode, creates, o.concurrency, system)
	fmt.Fprintf(tw, "machine\t%s, %d CPUs, GOMAXPROCS %d, %s/%s, %s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(tw, "jobs created\t%s\t(%d in %s", rate(r.jobs, r.createdIn), r.jobs, r.createdIn.Round(time.Millisecond))
	if o.rate > 0 {
		fmt.Fprintf(tw, "; the schedule ran late by at most %s", ms(r.maxLag))
	}
	fmt.Fprintf(tw, ")\n")
	fmt.Fprintf(tw, "deliveries\t%s\t(%d in %s, end to end; %d requests, %d duplicates, %d bad signatures)\n",
		rate(r.jobs, r.deliveredIn), r.jobs, r.deliveredIn.Round(time.Millisecond), r.deliveries, r.duplicates, r.badSignatures)
	fmt.Fprintf(tw, "latency p50\t%s\t(%s → first delivery)\n", ms(percentile(r.latencies, 50)), from)
	fmt.Fprintf(tw, "latency p95\t%s\t\n", ms(percentile(r.latencies, 95)))
	fmt.Fprintf(tw, "latency p99\t%s\t\n", ms(percentile(r.latencies, 99)))
	fmt.Fprintf(tw, "latency max\t%s\t\n", ms(percentile(r.latencies, 100)))
	fmt.Fprintf(tw, "create answered\t%s\t(p50; p99 %s, max %s: %s → 201)\n",
		ms(percentile(r.answers, 50)), ms(percentile(r.answers, 99)), ms(percentile(r.answers, 100)), from)

	c := r.cpu
	if c.boxTotal > 0 {
		idle := 100 * float64(c.boxTotal-c.box) / float64(c.boxTotal)
		fmt.Fprintf(tw, "CPU per delivery\t%s\t(whole box: user+nice+system+irq+softirq from /proc/stat over %s; the box was %.0f%% idle)\n",
			perDelivery(c.box, n), r.deliveredIn.Round(time.Millisecond), idle)
	}
	own := "api, router, load generator and receiver"
	if o.split {
		own = "load generator and receiver"
	}
	fmt.Fprintf(tw, "  this process\t%s\t(getrusage: %s)\n", perDelivery(c.self, n), own)
	attributed := c.self
	for i, ch := range r.children {
		if i < len(c.children) {
			fmt.Fprintf(tw, "  dispatch %s\t%s\t(child process, /proc/<pid>/stat)\n", ch.name, perDelivery(c.children[i], n))
			attributed += c.children[i]
		}
	}
	fmt.Fprintf(tw, "  PostgreSQL\t%s\t(%s this database's backends, %s the server's background processes)\n",
		perDelivery(c.pgBench+c.pgBackground, n), perDelivery(c.pgBench, n), perDelivery(c.pgBackground, n))
	fmt.Fprintf(tw, "  SQS stand-in\t%s\t(sqsfake; includes anyone else's use of it)\n", perDelivery(c.sqs, n))
	attributed += c.pgBench + c.pgBackground + c.sqs
	if c.boxTotal > 0 {
		fmt.Fprintf(tw, "  rest of the box\t%s\t(other processes, interrupts, kernel threads: noise when it is large)\n",
			perDelivery(max(c.box-attributed, 0), n))
	}

	if c.switches > 0 {
		fmt.Fprintf(tw, "context switches\t%s\t(per delivery, whole box: ctxt from /proc/stat, a CPU going from one thread to another)\n",
			perDeliveryN(c.switches, n))
	}

	if r.pgRoundTrips >= 0 {
		fmt.Fprintf(tw, "PG round trips\t%s\t(per delivery: requests the service's connections sent, as TCP data segments from TCP_INFO)\n",
			perDeliveryN(r.pgRoundTrips, n))
	} else {
		fmt.Fprintf(tw, "PG round trips\t-\t(unknown: PostgreSQL on a Unix socket, or pidfd_getfd not allowed)\n")
	}
	p := r.pg
	switch p.source {
	case pgSourceStatements:
		fmt.Fprintf(tw, "PG statements\t%s\t(per delivery, pg_stat_statements, BEGIN/COMMIT included; %s transactions, %s rows inserted, %s updated, %s deleted)\n",
			perDeliveryN(p.statements, n), perDeliveryN(p.xacts, n), perDeliveryN(p.inserted, n), perDeliveryN(p.updated, n), perDeliveryN(p.deleted, n))
		for _, st := range p.top {
			fmt.Fprintf(tw, "  %s\t%s\n", perDeliveryN(st.calls, n), oneLine(st.query, 110))
		}
	default:
		fmt.Fprintf(tw, "PG transactions\t%s\t(per delivery, pg_stat_database of %s; pg_stat_statements is not loaded; each is at least one round trip)\n",
			perDeliveryN(p.xacts, n), dbName)
		fmt.Fprintf(tw, "  rows written\t%s\t(per delivery: %s inserted, %s updated, %s deleted; %s fetched, %s returned)\n",
			perDeliveryN(p.inserted+p.updated+p.deleted, n), perDeliveryN(p.inserted, n), perDeliveryN(p.updated, n),
			perDeliveryN(p.deleted, n), perDeliveryN(p.fetched, n), perDeliveryN(p.returned, n))
	}

	if r.peakRSS > 0 {
		fmt.Fprintf(tw, "peak RSS\t%s\t(VmHWM of this process: %s)\n", mib(r.peakRSS), own)
	}
	for _, ch := range r.children {
		fmt.Fprintf(tw, "  dispatch %s\t%s\t(VmHWM)\n", ch.name, mib(ch.peakRSS))
	}
	tw.Flush()
}

// oneLine squeezes a statement's whitespace and cuts it to n runes.
func oneLine(q string, n int) string {
	q = strings.Join(strings.Fields(q), " ")
	if r := []rune(q); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return q
}
