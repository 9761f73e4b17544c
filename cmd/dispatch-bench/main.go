// Command dispatch-bench pushes jobs through the whole dispatch pipeline
// (API → PostgreSQL → SQS → router → processing endpoint → a signed webhook)
// and reports throughput, latency, CPU per delivery, PostgreSQL's work and
// bytes per delivery, SQS requests per delivery by action, and memory. It
// runs the service from the dispatch binary, in a throwaway database (or,
// with -database, an existing one: a copy of a long history) and queue on
// this machine. See `dispatch-bench -h`.
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/dispatchhq/dispatch/config"
	"github.com/dispatchhq/dispatch/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch-bench:", err)
		os.Exit(1)
	}
}

const benchUsage = `usage: dispatch-bench [flags]

Pushes jobs through the whole pipeline (API → PostgreSQL → SQS → router →
processing endpoint → signed webhook) to a local receiver and reports
throughput, create→delivery latency, CPU per delivery (the whole box and each
process), PostgreSQL's work per delivery, the bytes a delivery adds to the
database (tables+indexes) and to the server's WAL, the service's SQS
requests per delivery by action (and their cost at $0.50 per million),
memory, and whether the server runs autovacuum.

Two modes:
  throughput   -jobs N from -clients N clients, each sending its next create
               as soon as the last one is answered (the default)
  fixed rate   -rate R -duration D: R jobs a second on a fixed schedule,
               whether or not earlier creates were answered (open loop), and
               latency counted from each job's scheduled time, so a stall
               shows up in the percentiles instead of slowing the load

The service runs from the dispatch binary (-dispatch; by default the one
beside this binary, else on PATH): dispatch all as one child process, or
with -split dispatch api and dispatch router as two (the router mediating
over HTTP). It uses DATABASE_URL's server but a fresh database
dispatch_bench_<random>, and a fresh FIFO queue bench-<random>.fifo on
AWS_ENDPOINT_URL_SQS (default http://127.0.0.1:9324); both are removed at
the end. Both must be on this machine (loopback or a Unix socket). With
-database NAME it runs on that existing database instead (a copy of a
long history, to see what history costs): the service migrates it as
usual, the run adds its jobs to it, and it is never dropped. The service
reaches SQS through a reverse proxy that counts its requests by
action, a child process of this one: one more loopback hop per request,
whose CPU the report shows on a line of its own (the whole box's figure
includes it; production has no such proxy).

flags:
  -jobs N           jobs to deliver in throughput mode (default 5000)
  -clients N        concurrent API clients creating jobs (default 8)
  -rate R           fixed-rate mode: jobs per second
  -duration D       fixed-rate mode: how long to create jobs (default 10s)
  -batch N          jobs per request; above 1 uses /api/dispatch/jobs/batch (1-100, default 1)
  -concurrency N    the processing pool's concurrency (default 20)
  -split            run dispatch api and dispatch router as two child processes
  -floor            run the floor instead of dispatch: this binary's own
                    minimal service of the same shape (net/http and pgx; it
                    commits each job before its 201, POSTs it signed, and
                    commits the outcome: two statements, no queue, none of
                    dispatch's guarantees), to read dispatch's figures
                    against what any such service costs on this machine.
                    Takes no -split, -batch, -dispatch, -database or -cpuprofile
  -database NAME    run on this existing database of DATABASE_URL's server
                    instead of a fresh one, and keep it; the report says how
                    many jobs it held. Use a copy (CREATE DATABASE NAME
                    TEMPLATE ...): every run writes to it. A copy of
                    production needs its DISPATCH_ENCRYPTION_KEY (and
                    _PREVIOUS) in the environment, which the service is then
                    given instead of a random key
  -dispatch PATH    the dispatch binary to run (default: beside this one, else on PATH)
  -timeout D        give up when not every job arrived within D (default 5m)
  -cpuprofile FILE  write a pprof CPU profile of this process (the load
                    generator and receiver) over the load, and have each
                    child write one of its whole run to FILE.all, or
                    FILE.api and FILE.router (through DISPATCH_CPU_PROFILE)
  -blockprofile FILE, -mutexprofile FILE
                    blocking and mutex contention of this process (sampled)
  -latencies FILE   write each job's start (ms from the start of the load)
                    and its latency to its first delivery (ms), one job a
                    line in start order: when the slow ones happened`

const (
	benchDefaultSQS      = "http://127.0.0.1:9324"
	benchMaxBatch        = 100 // the API's batch limit
	benchStartTimeout    = time.Minute
	benchStopTimeout     = time.Minute
	benchCleanupTimeout  = 30 * time.Second
	benchVisibility      = "60" // seconds, as queue.Queue (router/queue) creates queues
	benchShutdownTimeout = "10s"
	benchStatsTimeout    = 10 * time.Second // for the service's connections to leave PostgreSQL
)

// benchPayload is a typical small webhook payload.
const benchPayload = `{"orderId":"ord_8f14e45fceea167a","customerId":"cus_c9f0f895fb98ab91","amount":99.99,"currency":"EUR","items":3}`

type benchOptions struct {
	jobs, clients, batch, concurrency int
	rate                              float64 // jobs per second; 0: throughput mode
	duration, timeout                 time.Duration
	split, floor                      bool
	dispatch                          string // the dispatch binary
	database                          string // an existing database to run on; "": a fresh one
	cpuProfile, blockProfile          string
	mutexProfile                      string
	latencies                         string
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
	fs.BoolVar(&o.floor, "floor", false, "")
	fs.StringVar(&o.dispatch, "dispatch", "", "")
	fs.StringVar(&o.database, "database", "", "")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "")
	fs.StringVar(&o.blockProfile, "blockprofile", "", "")
	fs.StringVar(&o.mutexProfile, "mutexprofile", "", "")
	fs.StringVar(&o.latencies, "latencies", "", "")
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
	if set["database"] && o.database == "" {
		errs = append(errs, errors.New("-database must name a database"))
	}
	if o.floor {
		for _, name := range []string{"split", "batch", "dispatch", "database", "cpuprofile"} {
			if set[name] {
				errs = append(errs, fmt.Errorf("-floor runs no dispatch: it takes no -%s", name))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return o, fmt.Errorf("bench: %w", err)
	}
	return o, nil
}

// run is the whole program; main only adds signals and the exit code.
func run(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == sqsProxyCommand { // the SQS counting proxy's own process
		return runSQSProxy(ctx, envLookup(environ), stdout, stderr)
	}
	if len(args) > 0 && args[0] == floorCommand { // the floor service's own process (-floor)
		return runFloorService(ctx, envLookup(environ), stdout)
	}
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
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	exe := self // -floor: this binary's floor command
	if !o.floor {
		if exe, err = dispatchBinary(o.dispatch); err != nil {
			return err
		}
	}
	sqsCounter, err := startSQSProxyChild(ctx, self, sqsEndpoint, environ, stderr)
	if err != nil {
		return err
	}
	defer func() { // after the service's stop, deferred below
		if err := sqsCounter.stop(); err != nil {
			fmt.Fprintf(stderr, "bench: SQS proxy: %v\n", err)
		}
	}()

	suffix := randomHex(6)
	dbName, queueName := "dispatch_bench_"+suffix, "bench-"+suffix+".fifo"
	if o.database != "" {
		dbName = o.database
		if err := checkBenchDatabase(ctx, adminCfg, dbName); err != nil {
			return err
		}
	} else {
		if err := createBenchDatabase(ctx, adminCfg, dbName); err != nil {
			return err
		}
		defer dropBenchDatabase(ctx, adminCfg, dbName, stderr)
	}
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
	defer func() {
		if err := rc.stop(); err != nil {
			fmt.Fprintf(stderr, "bench: receiver: %v\n", err)
		}
	}()

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	set := map[string]string{
		"DATABASE_URL":                   withDatabaseName(dbURL, dbName),
		"AWS_ENDPOINT_URL_SQS":           sqsCounter.url, // counts the service's requests
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
	}
	if o.database != "" && getenv("DISPATCH_ENCRYPTION_KEY") != "" {
		// The service checks that its key opens the database's newest
		// credentials: a copy of production needs production's keys.
		for _, k := range []string{"DISPATCH_ENCRYPTION_KEY", "DISPATCH_ENCRYPTION_KEY_PREVIOUS"} {
			if v := getenv(k); v != "" {
				set[k] = v
			}
		}
	}
	env := benchEnv(environ, set)
	svc, err := startBenchSystem(ctx, exe, o, env, stderr)
	if err != nil {
		return err
	}
	// On early returns; the normal path stops it below and reports its error.
	defer func() { _ = svc.stop() }()

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
	// After the service's migrations and partition upkeep (which may have
	// dropped what was past its retention), before the load.
	var jobsHeld int64
	if !o.floor { // the floor's database is fresh and has no dispatch_job
		if jobsHeld, err = countJobs(ctx, benchDB); err != nil {
			return err
		}
	}
	pg0, err := pg.read(ctx)
	if err != nil {
		return err
	}
	var pids []int
	for _, c := range svc.processes() {
		pids = append(pids, c.pid)
	}
	profiles, err := startProfiles(o.cpuProfile, o.blockProfile, o.mutexProfile)
	if err != nil {
		return err
	}
	// The service's connections to PostgreSQL are in its children (in the
	// API's when split: the router never connects).
	seg0, segErr := pgSegments(pids, adminCfg.Port)
	cpu0 := sampleCPU(dbName, pids, sqsCounter.pid())
	sqs0, sqsErr := sqsCounter.counts(ctx)
	rss := startRSSSampler(pids)
	res, loadErr := runLoad(ctx, o, client, svc.url(), rc, credID)
	rssTop := rss.highest()
	cpu1 := sampleCPU(dbName, pids, sqsCounter.pid())
	sqs1, err := sqsCounter.counts(ctx)
	if sqsErr = cmp.Or(sqsErr, err); sqsErr != nil {
		fmt.Fprintf(stderr, "%v\n", sqsErr)
		res.sqsUnknown = true
	}
	res.sqs = sqsUse(sqs0, sqs1)
	seg1, err := pgSegments(pids, adminCfg.Port)
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
	for _, c := range svc.processes() {
		res.children = append(res.children, benchChildUse{name: c.name, peakRSS: pidPeakRSS(c.pid), top: rssTop[c.pid]})
	}
	stopErr := svc.stop()
	if loadErr != nil {
		return loadErr
	}
	if o.latencies != "" {
		if err := writeTimeline(o.latencies, res.timeline); err != nil {
			return err
		}
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
	res.pgVersion, res.autovacuum = pg.version, pg.autovacuum
	res.jobsHeld = jobsHeld
	res.write(stdout, o, dbName)
	return nil
}

// envLookup is getenv over environ, the last entry of a name winning.
func envLookup(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}
