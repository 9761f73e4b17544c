package e2e

// Chaos tests: each causes a real failure between two steps of
// the pipeline — a router killed with SIGKILL, a send that fails, the SQS
// stand-in stopped and restarted empty, PostgreSQL restarted, SIGTERM under
// load — and checks that no job is lost. They use private services (their
// own SQS stand-in, their own PostgreSQL cluster) so the shared ones stay up
// for the tests running beside them.

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch/localstack/sqsfake"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// dispatchPkg is the command the tests that need a real process build.
const dispatchPkg = "github.com/dispatchhq/dispatch/cmd/dispatch"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// dispatchBinary builds bin/dispatch once for the tests that must kill a
// real process.
func dispatchBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dispatch-chaos-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "dispatch")
		out, err := exec.Command("go", "build", "-o", binPath, dispatchPkg).CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is a dispatch subprocess.
type proc struct {
	t         *testing.T
	cmd       *exec.Cmd
	apiURL    string
	routerURL string
	log       *syncBuffer
	exited    chan struct{}
	exitErr   error
}

// spawn starts `dispatch <command>` as a subprocess with the test
// environment plus env, and waits until it listens.
func spawn(t *testing.T, command string, env []string) *proc {
	t.Helper()
	cmd := exec.Command(dispatchBinary(t), command)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{t: t, cmd: cmd, log: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		// The addresses are set once, before ready closes; the close orders
		// these writes before the test's reads.
		var apiURL, routerURL string
		sent := false
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "api listening on "); ok {
				apiURL = "http://" + v
			}
			if v, ok := strings.CutPrefix(line, "router listening on "); ok {
				routerURL = "http://" + v
			}
			if !sent && ((command == "api" && apiURL != "") || (command != "api" && routerURL != "")) {
				p.apiURL, p.routerURL = apiURL, routerURL
				close(ready)
				sent = true
			}
		}
	}()
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	select {
	case <-ready:
	case <-p.exited:
		t.Fatalf("dispatch %s exited at start: %v\n%s", command, p.exitErr, p.log.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("dispatch %s did not start:\n%s", command, p.log.String())
	}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("dispatch %s (pid %d) log:\n%s", command, cmd.Process.Pid, tail(p.log.String(), 80))
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// term sends SIGTERM and returns the exit error and how long the exit took.
func (p *proc) term(limit time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return time.Since(start), p.exitErr
	case <-time.After(limit):
		p.t.Fatalf("no exit within %s of SIGTERM", limit)
		return 0, nil
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// emulator is a private SQS stand-in that a test may stop and restart on
// the same port; a restart loses every queue and message, as a restart of
// the stand-in binary (or the loss of a queue) does.
type emulator struct {
	t    *testing.T
	port int
	srv  *http.Server
	done chan struct{}
}

func startEmulator(t *testing.T, port int) *emulator {
	t.Helper()
	e := &emulator{t: t, port: port}
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *emulator) url() string { return fmt.Sprintf("http://127.0.0.1:%d", e.port) }

func (e *emulator) start() {
	e.t.Helper()
	var ln net.Listener
	eventually(e.t, 15*time.Second, func() bool {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", e.port))
		return err == nil
	}, func() string { return fmt.Sprintf("port %d did not come free for the stand-in", e.port) })
	e.srv = &http.Server{Handler: sqsfake.New().Handler(), ConnContext: sqsfake.ConnContext, ReadHeaderTimeout: 10 * time.Second}
	e.done = make(chan struct{})
	go func(srv *http.Server, done chan struct{}) {
		defer close(done)
		_ = srv.Serve(ln)
	}(e.srv, e.done)
}

func (e *emulator) stop() {
	if e.srv != nil {
		_ = e.srv.Close()
		<-e.done
		e.srv = nil
	}
}

// privatePostgres is a PostgreSQL cluster of the test's own, which it may
// restart; it lives under /tmp and runs as the postgres user when root.
type privatePostgres struct {
	t        *testing.T
	dir      string
	port     int
	bin      string
	asUser   []string
	password string
}

// startPostgres starts a private cluster with a database named dispatch.
// Its postgres user signs in without a password (trust) when password is
// empty, and with password (scram-sha-256) otherwise.
func startPostgres(t *testing.T, password string) *privatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			bins = []string{p}
		}
	}
	if len(bins) == 0 {
		t.Fatal("initdb not found: PostgreSQL server binaries are required for this test")
	}
	pg := &privatePostgres{t: t, port: freePort(t), bin: filepath.Dir(bins[len(bins)-1]), password: password}
	dir, err := os.MkdirTemp("/tmp", "dispatch-pg-")
	if err != nil {
		t.Fatal(err)
	}
	pg.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal("running as root needs a postgres user for initdb")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		pg.asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	auth := []string{"--auth=trust"}
	if password != "" {
		if err := os.WriteFile(dir+"/pw", []byte(password+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		auth = []string{"--auth=scram-sha-256", "--pwfile=" + dir + "/pw"}
	}
	pg.run("initdb", append([]string{"-D", dir + "/data", "-U", "postgres", "--no-sync"}, auth...)...)
	pg.ctl("start")
	t.Cleanup(func() {
		pg.run("pg_ctl", "-D", dir+"/data", "stop", "-m", "immediate", "-w")
		os.RemoveAll(dir)
	})
	conn, err := pgx.Connect(context.Background(), pg.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "CREATE DATABASE dispatch"); err != nil {
		t.Fatal(err)
	}
	return pg
}

func (pg *privatePostgres) url(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User("postgres"), Host: fmt.Sprintf("127.0.0.1:%d", pg.port), Path: "/" + db, RawQuery: "sslmode=disable"}
	if pg.password != "" {
		u.User = url.UserPassword("postgres", pg.password)
	}
	return u.String()
}

func (pg *privatePostgres) run(name string, args ...string) {
	pg.t.Helper()
	argv := append(append([]string{}, pg.asUser...), filepath.Join(pg.bin, name))
	argv = append(argv, args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		pg.t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

func (pg *privatePostgres) ctl(action string) {
	pg.t.Helper()
	opts := fmt.Sprintf("-p %d -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off", pg.port)
	pg.run("pg_ctl", "-D", pg.dir+"/data", "-o", opts, "-l", pg.dir+"/log", "-m", "fast", "-w", action)
}

// deliveries counts deliveries per job id at a receiver.
func deliveries(rc *receiver) map[string]int {
	m := map[string]int{}
	for _, r := range rc.snapshot() {
		if r.code == http.StatusOK {
			m[r.header.Get("X-Dispatch-Job-Id")]++
		}
	}
	return m
}

// countStatus returns how many jobs have the status, through the API.
func (in *instance) countStatus(status string) int {
	in.t.Helper()
	var page struct {
		TotalItems int `json:"totalItems"`
	}
	if code := in.do("GET", "/api/dispatch/jobs?size=1&status="+status, apiToken, nil, &page); code != http.StatusOK {
		in.t.Fatalf("search: %d", code)
	}
	return page.TotalItems
}

func TestRouterKilledMidDeliveryJobStillCompletes(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 3*time.Second)
	in := startWith(t, "api", dbURL, q, nil)
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rc := newReceiver(t, func(int, *http.Request, []byte) int {
		once.Do(func() { close(arrived) })
		<-release
		return http.StatusOK
	})
	routerEnv := baseEnv(dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process"})
	rt := spawn(t, "router", routerEnv)
	j := in.createJob(jobBody(rc.URL, nil))
	select {
	case <-arrived:
	case <-time.After(20 * time.Second):
		t.Fatal("delivery never started")
	}
	rt.kill() // SIGKILL while the webhook request is open
	close(release)
	in.waitStatus(j.ID, 20*time.Second, "COMPLETED")
	// The dead router never deleted the message; a new router finds the job
	// finished and drops the pointer without delivering again.
	spawn(t, "router", routerEnv)
	eventually(t, 30*time.Second, in.queueEmpty, func() string { return "the pointer was not acknowledged after the restart" })
	if n := rc.count(); n != 1 {
		t.Errorf("target got %d requests, want 1", n)
	}
}

func TestFailedSendIsPublishedLater(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	rc := newReceiver(t, nil)
	// The API's SQS endpoint is a closed port: every send fails.
	down := startWith(t, "api", dbURL, q, map[string]string{
		"AWS_ENDPOINT_URL_SQS": fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
	})
	var ids []string
	for range 10 {
		ids = append(ids, down.createJob(jobBody(rc.URL, nil)).ID) // 201 although the queue is unreachable
	}
	if code := down.do("GET", "/health/ready", "", nil, nil); code != http.StatusServiceUnavailable {
		t.Errorf("/health/ready = %d while the queue is unreachable, want 503", code)
	}
	if err := down.stop(); err != nil {
		t.Fatalf("api exit: %v", err)
	}
	if rc.count() != 0 {
		t.Fatal("delivered although nothing could be queued")
	}
	up := startWith(t, "all", dbURL, q, nil)
	for _, id := range ids {
		up.waitStatus(id, 30*time.Second, "COMPLETED")
	}
	if got := len(deliveries(rc)); got != len(ids) {
		t.Errorf("%d jobs delivered, want %d", got, len(ids))
	}
}

func TestSQSOutageDuringCreatesLosesNothing(t *testing.T) {
	t.Parallel()
	emu := startEmulator(t, freePort(t))
	dbURL := storetest.NewDatabase(t)
	rc := newReceiver(t, nil)
	in := startWith(t, "all", dbURL, sqstest.Queue{Endpoint: emu.url()}, map[string]string{
		"DISPATCH_QUEUE_NAME":    "chaos.fifo",
		"DISPATCH_QUEUE_CREATE":  "true",
		"DISPATCH_REQUEUE_AFTER": "3s",
	})
	var ids []string
	for range 10 {
		ids = append(ids, in.createJob(jobBody(rc.URL, nil)).ID)
	}
	emu.stop() // the emulator keeps nothing: its queue and messages are gone
	for range 20 {
		ids = append(ids, in.createJob(jobBody(rc.URL, nil)).ID)
	}
	eventually(t, 10*time.Second, func() bool { return in.do("GET", "/health/ready", "", nil, nil) == 503 },
		func() string { return "/health/ready stayed 200 with SQS down" })
	emu.start()
	for _, id := range ids {
		in.waitStatus(id, 60*time.Second, "COMPLETED")
	}
	eventually(t, 10*time.Second, func() bool { return in.do("GET", "/health/ready", "", nil, nil) == 200 },
		func() string { return "/health/ready did not recover" })
	d := deliveries(rc)
	dups := 0
	for _, n := range d {
		dups += n - 1
	}
	report(t, "SQS outage: %d jobs, %d delivered, %d duplicate deliveries", len(ids), len(d), dups)
	if len(d) != len(ids) {
		t.Errorf("%d jobs delivered, want %d", len(d), len(ids))
	}
}

func TestPostgresRestartUnderLoadLosesNothing(t *testing.T) {
	t.Parallel()
	pg := startPostgres(t, "")
	q := sqstest.New(t, 30*time.Second)
	rc := newReceiver(t, nil)
	in := startWith(t, "all", pg.url("dispatch"), q, nil)
	const n = 150
	var wg sync.WaitGroup
	ids := make([]string, n)
	created := make(chan int, n)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 3 {
				// A client retries with the same idempotency key until it
				// gets an answer: outages cost latency, never a job.
				ids[i] = createWithRetry(t, in, jobBody(rc.URL, map[string]any{"idempotencyKey": fmt.Sprintf("k-%d", i)}))
				created <- i
			}
		}()
	}
	for range n / 3 {
		<-created
	}
	pg.ctl("restart")
	wg.Wait()
	for _, id := range ids {
		in.waitStatus(id, 90*time.Second, "COMPLETED")
	}
	if got := len(deliveries(rc)); got != n {
		t.Errorf("%d jobs delivered, want %d", got, n)
	}
	if total := in.countStatus("COMPLETED"); total != n {
		t.Errorf("%d COMPLETED jobs stored, want %d (idempotency keys must prevent doubles)", total, n)
	}
}

// createWithRetry creates a job, retrying while the service is unavailable.
func createWithRetry(t *testing.T, in *instance, body map[string]any) string {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := jsonBytes(body)
		req, _ := http.NewRequest("POST", in.apiURL+"/api/dispatch/jobs", b)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			var j jobJSON
			_ = decodeJSON(resp, &j)
			if resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK {
				return j.ID
			}
			if resp.StatusCode < 500 {
				t.Errorf("create: %d", resp.StatusCode)
				return ""
			}
		}
		time.Sleep(100 * time.Millisecond) // client-side retry pause
	}
	t.Errorf("create did not succeed within 60s")
	return ""
}

func TestSIGTERMDuringLoadExitsCleanlyAndLosesNothing(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	// A message a receive took as the process stopped reaches nobody and
	// comes back after the visibility timeout: the restart waits that long.
	q := sqstest.New(t, 5*time.Second)
	rc := newReceiver(t, nil)
	rc.hold = 5 * time.Millisecond
	env := baseEnv(dbURL, q, map[string]string{"DISPATCH_SHUTDOWN_TIMEOUT": "10s"})
	p := spawn(t, "all", env)
	in := &instance{t: t, apiURL: p.apiURL, queue: q, dbURL: dbURL}
	const n = 1000
	for b := range n / 100 {
		jobs := make([]map[string]any, 100)
		for i := range jobs {
			jobs[i] = jobBody(rc.URL, map[string]any{"externalId": fmt.Sprintf("j%d", b*100+i)})
		}
		var out struct {
			Results []struct{ Status int } `json:"results"`
		}
		if code := in.do("POST", "/api/dispatch/jobs/batch", apiToken, map[string]any{"jobs": jobs}, &out); code != 200 {
			t.Fatalf("batch: %d", code)
		}
	}
	eventually(t, 30*time.Second, func() bool { return rc.count() >= 50 }, func() string { return "deliveries did not start" })
	took, err := p.term(30 * time.Second)
	if err != nil {
		t.Errorf("exit after SIGTERM: %v, want exit 0", err)
	}
	if took > 12*time.Second {
		t.Errorf("took %s to exit; the deadline is 10s", took)
	}
	report(t, "SIGTERM: exited in %s (deadline 10s) after %d of %d deliveries; the rest delivered after restart", took.Round(time.Millisecond), len(deliveries(rc)), n)
	again := startWith(t, "all", dbURL, q, nil)
	eventually(t, 120*time.Second, func() bool { return again.countStatus("COMPLETED") == n },
		func() string { return fmt.Sprintf("%d of %d COMPLETED", again.countStatus("COMPLETED"), n) })
	if got := len(deliveries(rc)); got != n {
		t.Errorf("%d distinct jobs delivered, want %d", got, n)
	}
}

// A second SIGTERM (or Ctrl-C) ends the process at once, though its
// graceful stop is still waiting for a delivery in progress. Before, every
// signal after the first was swallowed until the shutdown timeout.
func TestASecondSignalEndsAGracefulStopAtOnce(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	// The receiver answers in 20 s, within the delivery timeout: a graceful
	// stop waits for it.
	rc, arrived := slowFirstReceiver(t, 20*time.Second)
	p := spawn(t, "all", baseEnv(dbURL, q, map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "30s", "DISPATCH_SHUTDOWN_TIMEOUT": "35s"}))
	in := &instance{t: t, apiURL: p.apiURL, queue: q, dbURL: dbURL}
	in.createJob(jobBody(rc.URL, nil))
	waitClosed(t, arrived, 20*time.Second, "the delivery did not reach the receiver")
	first := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 10*time.Second, func() bool { return strings.Contains(p.log.String(), "stopping: finishing the work in progress") },
		func() string { return "no graceful stop begun:\n" + p.log.String() })
	select {
	case <-p.exited:
		t.Fatal("the graceful stop did not wait for the delivery in progress; the test shows nothing")
	default:
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		report(t, "second SIGTERM: exited %s after it, %s after the first", time.Since(start).Round(time.Millisecond), time.Since(first).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5 s after a second SIGTERM")
	}
}

func TestScheduledJobWaitsForItsTime(t *testing.T) {
	t.Parallel()
	in := start(t, "all", nil)
	rc := newReceiver(t, nil)
	at := time.Now().Add(3 * time.Second).UTC()
	j := in.createJob(jobBody(rc.URL, map[string]any{"scheduledFor": at.Format(time.RFC3339Nano)}))
	in.waitStatus(j.ID, 30*time.Second, "COMPLETED")
	reqs := rc.snapshot()
	if len(reqs) != 1 || reqs[0].at.Before(at) {
		t.Fatalf("delivered at %v, scheduled for %v", reqs[0].at, at)
	}
}

func TestExpiredAndCancelledJobsAreNeverDelivered(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	// Only the API runs: pointers go onto the queue, nothing consumes them.
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_REQUEUE_AFTER": "2s"})
	rc := newReceiver(t, nil)
	expiring := in.createJob(jobBody(rc.URL, map[string]any{"expiresAt": time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)}))
	cancelled := in.createJob(jobBody(rc.URL, nil))
	var c jobJSON
	if code := in.do("POST", "/api/dispatch/jobs/"+cancelled.ID+"/cancel", apiToken, nil, &c); code != 200 || c.Status != "CANCELLED" {
		t.Fatalf("cancel: %d %+v", code, c)
	}
	in.waitStatus(expiring.ID, 20*time.Second, "EXPIRED")
	// Now a router takes the two pointers and must drop both.
	startWith(t, "router", dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process"})
	eventually(t, 30*time.Second, in.queueEmpty, func() string { return "pointers not acknowledged" })
	if n := rc.count(); n != 0 {
		t.Errorf("target got %d requests for an expired and a cancelled job", n)
	}
	if code := in.do("POST", "/api/dispatch/jobs/"+cancelled.ID+"/cancel", apiToken, nil, nil); code != http.StatusConflict {
		t.Errorf("cancelling a cancelled job: %d, want 409", code)
	}
}

func TestSoakWithRouterKills(t *testing.T) {
	t.Parallel()
	jobs := 5000
	if v, err := strconv.Atoi(os.Getenv("DISPATCH_TEST_SOAK_JOBS")); err == nil && v > 0 {
		jobs = v
	}
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 3*time.Second)
	rc := newReceiver(t, nil)
	in := startWith(t, "api", dbURL, q, map[string]string{"DISPATCH_LOG_LEVEL": "warn"})
	routerEnv := baseEnv(dbURL, q, map[string]string{
		"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process", "DISPATCH_LOG_LEVEL": "warn",
		"DISPATCH_POOLS": "DISPATCH-POOL:32",
	})
	for b := 0; b < jobs; b += 100 {
		batch := make([]map[string]any, 0, 100)
		for i := b; i < min(b+100, jobs); i++ {
			extra := map[string]any{}
			if i%5 == 0 {
				extra["groupId"] = fmt.Sprintf("g%d", i%50) // some ordered groups too
			}
			batch = append(batch, jobBody(rc.URL, extra))
		}
		if code := in.do("POST", "/api/dispatch/jobs/batch", apiToken, map[string]any{"jobs": batch}, nil); code != 200 {
			t.Fatalf("batch: %d", code)
		}
	}
	kills := 0
	deadline := time.Now().Add(5 * time.Minute)
	for {
		rt := spawn(t, "router", routerEnv)
		done := in.countStatus("COMPLETED")
		if done == jobs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("soak: %d of %d completed after 5 minutes", done, jobs)
		}
		// Let it work for a random while, then SIGKILL it mid-flight.
		wait := time.Duration(500+rand.IntN(2000)) * time.Millisecond
		stopAt := time.Now().Add(wait)
		for time.Now().Before(stopAt) && in.countStatus("COMPLETED") < jobs {
			time.Sleep(100 * time.Millisecond) // poll progress
		}
		if in.countStatus("COMPLETED") == jobs {
			break
		}
		rt.kill()
		kills++
	}
	d := deliveries(rc)
	dups := 0
	for _, n := range d {
		dups += n - 1
	}
	report(t, "soak: %d jobs, %d router kills (SIGKILL), %d delivered, %d duplicate deliveries", jobs, kills, len(d), dups)
	if len(d) != jobs {
		t.Errorf("%d distinct jobs delivered, want %d", len(d), jobs)
	}
	for _, st := range []string{"PENDING", "IN_PROGRESS", "FAILED", "ERROR"} {
		if n := in.countStatus(st); n != 0 {
			t.Errorf("%d jobs left %s", n, st)
		}
	}
}

func TestDeliveryLongerThanVisibilityIsNotDuplicated(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 2*time.Second) // shorter than the delivery below
	rc := newReceiver(t, nil)
	rc.hold = 5 * time.Second
	// The job goes through the queue (not in process), whose heartbeat is
	// what this is about.
	in := startWith(t, "all", dbURL, q, map[string]string{"DISPATCH_DELIVERY_TIMEOUT": "10s", "DISPATCH_SHUTDOWN_TIMEOUT": "15s",
		"DISPATCH_LOCAL_DELIVERY": "false"})
	// A second router competes for the same queue: if the heartbeat did not
	// keep the message invisible, it would receive the copy after 2s.
	other := spawn(t, "router", baseEnv(dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": in.apiURL + "/api/dispatch/process"}))
	j := in.createJob(jobBody(rc.URL, nil))
	in.waitStatus(j.ID, 30*time.Second, "COMPLETED")
	// Exactly one router mediated it: the other never saw a copy.
	var mine, theirs []struct{ Succeeded, Retried, Failed int }
	getJSON(t, in.routerURL+"/monitoring/pools", &mine)
	getJSON(t, other.routerURL+"/monitoring/pools", &theirs)
	seen := func(s []struct{ Succeeded, Retried, Failed int }) int {
		return s[0].Succeeded + s[0].Retried + s[0].Failed
	}
	if seen(mine)+seen(theirs) != 1 {
		t.Errorf("mediations: %+v and %+v, want exactly one in all (the heartbeat keeps the message invisible)", mine, theirs)
	}
	eventually(t, 10*time.Second, in.queueEmpty, func() string { return "message not acknowledged" })
	if n := rc.count(); n != 1 {
		t.Errorf("target got %d requests for one job, want 1", n)
	}
	if !strings.Contains(in.stderr.String(), "queue visibility timeout is shorter than the mediation timeout") {
		t.Errorf("no start-up warning about the short visibility timeout")
	}
}

// slowFirstReceiver is a receiver whose first request takes hold before
// it answers 200 (the others answer at once), and a channel closed when
// that request has arrived.
func slowFirstReceiver(t *testing.T, hold time.Duration) (*receiver, <-chan struct{}) {
	arrived := make(chan struct{})
	var once sync.Once
	rc := newReceiver(t, func(n int, _ *http.Request, _ []byte) int {
		if n == 1 {
			once.Do(func() { close(arrived) })
			time.Sleep(hold)
		}
		return http.StatusOK
	})
	return rc, arrived
}

// waitClosed fails the test unless ch is closed within timeout.
func waitClosed(t *testing.T, ch <-chan struct{}, timeout time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(timeout):
		t.Fatal(what)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeJSON(resp, v); err != nil {
		t.Fatal(err)
	}
}

// report logs a chaos test's figures and appends them to the file named by
// DISPATCH_TEST_REPORT, which `make test` prints after the run (go test
// shows a passing test's log only with -v).
func report(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	if path := os.Getenv("DISPATCH_TEST_REPORT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("report: %v", err)
			return
		}
		defer f.Close()
		fmt.Fprintf(f, "%s: %s\n", t.Name(), line)
	}
}

func TestAPIKilledMidDeliveryJobIsTakenOverAndCompletes(t *testing.T) {
	t.Parallel()
	dbURL := storetest.NewDatabase(t)
	q := sqstest.New(t, 30*time.Second)
	// The first request is slow; its sender dies meanwhile.
	rc, arrived := slowFirstReceiver(t, 3*time.Second)
	apiPort := freePort(t)
	apiEnv := baseEnv(dbURL, q, map[string]string{
		"DISPATCH_HTTP_ADDR":        fmt.Sprintf("127.0.0.1:%d", apiPort),
		"DISPATCH_DELIVERY_TIMEOUT": "2s", // claim lease 2×2s+15s
	})
	api1 := spawn(t, "api", apiEnv)
	in := &instance{t: t, apiURL: api1.apiURL, queue: q, dbURL: dbURL}
	startWith(t, "router", dbURL, q, map[string]string{"DISPATCH_PROCESS_URL": api1.apiURL + "/api/dispatch/process"})
	j := in.createJob(jobBody(rc.URL, nil))
	waitClosed(t, arrived, 20*time.Second, "delivery never started")
	// The job was created by this API a moment ago, so its claim is
	// deferred (written with the outcome) until the delivery has run for
	// a second (docs/decisions/commits-per-delivery.md): the slow request
	// shows IN_PROGRESS once it is written.
	in.waitStatus(j.ID, 20*time.Second, "IN_PROGRESS")
	api1.kill() // SIGKILL while the webhook request is open: its outcome is never recorded
	spawn(t, "api", apiEnv)
	// The router retries the pointer; the new API waits out the dead claim,
	// takes it over, records the lost attempt and delivers again.
	done := in.waitStatus(j.ID, 60*time.Second, "COMPLETED", "ERROR")
	at := in.attempts(j.ID)
	if done.Status != "COMPLETED" || len(at) != 2 || at[0].Status != "TIMEOUT" || at[1].Status != "SUCCESS" {
		t.Fatalf("job %s with attempts %+v; want COMPLETED after a TIMEOUT (outcome unknown) and a SUCCESS", done.Status, at)
	}
	report(t, "API SIGKILL mid-delivery: lost attempt recorded as TIMEOUT, job COMPLETED on attempt 2; the target got %d requests (the kill's one duplicate)", rc.count())
}
