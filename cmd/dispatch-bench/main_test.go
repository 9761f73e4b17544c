package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

func TestBenchFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args     []string
		wantJobs int
		wantErr  []string
	}{
		{args: nil, wantJobs: 5000},
		{args: []string{"-jobs", "700"}, wantJobs: 700},
		{args: []string{"-rate", "200", "-duration", "10s"}, wantJobs: 2000},
		{args: []string{"-rate", "200"}, wantJobs: 2000}, // -duration defaults to 10s
		{args: []string{"-rate", "200", "-jobs", "10"}, wantErr: []string{"-jobs and -rate"}},
		{args: []string{"-duration", "5s"}, wantErr: []string{"-duration needs -rate"}},
		{args: []string{"-rate", "-1", "-batch", "0"}, wantErr: []string{"-rate must be positive", "-batch must be 1 to 100"}},
		{args: []string{"-rate", "0.01", "-duration", "1s"}, wantErr: []string{"at least one job"}},
		{args: []string{"-database", "history_copy"}, wantJobs: 5000},
		{args: []string{"-database", ""}, wantErr: []string{"-database must name a database"}},
		{args: []string{"-floor", "-rate", "200"}, wantJobs: 2000},
		{args: []string{"-floor", "-split", "-batch", "10"}, wantErr: []string{"-floor runs no dispatch: it takes no -split", "no -batch"}},
	} {
		o, err := parseBenchFlags(tc.args, io.Discard)
		if len(tc.wantErr) == 0 {
			if err != nil || o.jobs != tc.wantJobs {
				t.Errorf("%q: jobs %d, err %v; want %d jobs", tc.args, o.jobs, err, tc.wantJobs)
			}
			continue
		}
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.args, tc.wantErr)
			continue
		}
		for _, want := range tc.wantErr {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %q does not say %q", tc.args, err, want)
			}
		}
	}
}

// TestMain removes the binaries the tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds dispatch-bench and dispatch side by side, once, and
// returns the first: as `make build` leaves them in bin/.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "dispatch-bench-bin-"); buildErr != nil {
			return
		}
		for _, pkg := range []string{".", "../dispatch"} {
			name := "dispatch"
			if pkg == "." {
				name = "dispatch-bench"
			}
			out, err := exec.Command("go", "build", "-o", filepath.Join(buildDir, name), pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "dispatch-bench")
}

// TestBenchRuns runs the built dispatch-bench as a user would, in both
// modes: every job arrives signed, and the report has its figures (CPU per
// process, PostgreSQL per delivery, bytes per delivery, the service's SQS
// requests by action, memory), each child's among them.
func TestBenchRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline twice")
	}
	bin := binaries(t)
	sqstest.SetEnv()
	env := append(os.Environ(), "AWS_ENDPOINT_URL_SQS="+sqstest.Endpoint(), "DATABASE_URL="+storetest.AdminURL())
	const nonZero = `(?:[0-9]*[1-9][0-9]*\.[0-9]+|0\.[0-9]*[1-9][0-9]*)` // a per-delivery figure above 0.00
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	splitProfile := filepath.Join(t.TempDir(), "split.pprof")
	for _, tc := range []struct {
		name string
		args []string
		env  []string // added to the environment
		want []string // regular expressions, each must match a line
	}{
		{
			name: "throughput, dispatch all",
			args: []string{"-jobs", "200", "-clients", "4", "-cpuprofile", profile},
			want: []string{
				`^dispatch-bench +throughput: 200 jobs, 4 clients, .*dispatch all as a child process`,
				`^deliveries .*200 in .*; 200 requests, 0 duplicates, 0 bad signatures`,
				`^latency p99 +[0-9.]+ ms`,
				`^CPU per delivery +[0-9.]+ ms +\(whole box`,
				`^  this process +[0-9.]+ ms`,
				`^  dispatch all +[0-9.]+ ms +\(child process`,
				`^  dispatch all +[0-9.]+ MiB +\(VmHWM; the highest sample [0-9.]+ MiB: [0-9.]+ anonymous \(heap, stacks, runtime\), [0-9.]+ file pages \(the binary's\)\)`,
				`^  PostgreSQL +[0-9.]+ ms`,
				`^context switches +[0-9.]+ +\(per delivery, whole box`,
				`^PG round trips +[0-9.]+ +\(per delivery`,
				`^PG (statements|transactions) +[0-9.]+ `,
				`^PostgreSQL +[0-9.]+, autovacuum (on|off)`,
				`^PG bytes +[0-9]+ B +\(per delivery, tables\+indexes`,
				`^  WAL +[1-9][0-9]* B`,
				// In `all` most jobs are delivered in process, with no SQS
				// request: the split run below counts them by action.
				`^SQS requests +[0-9.]+ +\(per delivery.*\$[0-9.]+ per million deliveries`,
				`^  SQS counting proxy +[0-9.]+ ms +\(this benchmark's`,
				`^peak RSS +[0-9.]+ MiB`,
			},
		},
		{
			// Split, routers take most new jobs straight from the API;
			// through the queue, the SQS requests are counted by action.
			name: "fixed rate split, through the queue",
			args: []string{"-rate", "100", "-duration", "2s", "-split", "-cpuprofile", splitProfile},
			env:  []string{"DISPATCH_LOCAL_DELIVERY=false"},
			want: []string{
				`^dispatch-bench +fixed rate: 100 jobs/s for 2s \(200 jobs, open loop\).*child processes`,
				`^deliveries .*200 in .*; 200 requests, 0 duplicates, 0 bad signatures`,
				`^latency p50 +[0-9.]+ ms +\(create scheduled → first delivery\)`,
				`^  dispatch api +[0-9.]+ ms`,
				`^  dispatch router +[0-9.]+ ms`,
				`^  dispatch api +[0-9.]+ MiB +\(VmHWM; the highest sample [0-9.]+ MiB: [0-9.]+ anonymous`,
				`^  dispatch router +[0-9.]+ MiB +\(VmHWM; the highest sample [0-9.]+ MiB: [0-9.]+ anonymous`,
				`^SQS requests +` + nonZero + ` +\(per delivery.*\$[0-9.]+ per million deliveries`,
				`^  SendMessageBatch +` + nonZero + ` +\([0-9.]+ messages each\)`,
				`^  ReceiveMessage +` + nonZero + ` +\([0-9.]+ messages each\)`,
				`^  DeleteMessageBatch +` + nonZero + ` +\([0-9.]+ messages each\)`,
			},
		},
		{
			// The floor: the least a service of this shape does, under
			// the same load, receiver and measurements.
			name: "fixed rate, the floor",
			args: []string{"-floor", "-rate", "100", "-duration", "2s"},
			want: []string{
				`^dispatch-bench +fixed rate: 100 jobs/s .*the floor service \(net/http and pgx`,
				`^deliveries .*200 in .*; 200 requests, 0 duplicates, 0 bad signatures`,
				`^  floor service +[0-9.]+ ms +\(child process`,
				`^  floor service +[0-9.]+ MiB +\(VmHWM`,
				`^PG (statements|transactions) +2\.[0-9][0-9] `, // its insert and its update (transactions: and the pool's own)
				`^SQS requests +0\.00 `,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = append(env[:len(env):len(env)], tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("dispatch-bench %q: %v\n%s\n%s", tc.args, err, stdout.String(), stderr.String())
			}
			for _, want := range tc.want {
				if !regexp.MustCompile("(?m)" + want).MatchString(stdout.String()) {
					t.Errorf("no line matches %s in:\n%s", want, stdout.String())
				}
			}
		})
	}
	for _, p := range []string{profile, profile + ".all", splitProfile, splitProfile + ".api", splitProfile + ".router"} {
		data, err := os.ReadFile(p)
		if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b { // pprof: gzipped protobuf
			t.Errorf("-cpuprofile wrote %d bytes to %s (%v), want a gzipped pprof profile", len(data), filepath.Base(p), err)
		}
	}
}

// TestBenchRunsOnDatabase runs dispatch-bench -database on a database that
// already holds finished jobs and credentials sealed with its own key, as
// a copy of production would, with that key in the environment: the
// report names the database and the jobs it held, every job arrives, and
// the database is kept with its history and the run's jobs. A database
// that does not exist is refused.
func TestBenchRunsOnDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline")
	}
	bin := binaries(t)
	sqstest.SetEnv()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	env := append(os.Environ(), "AWS_ENDPOINT_URL_SQS="+sqstest.Endpoint(), "DATABASE_URL="+storetest.AdminURL(),
		"DISPATCH_ENCRYPTION_KEY="+base64.StdEncoding.EncodeToString(key))
	sealer, err := store.NewSealer(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, pool, dbURL := storetest.New(t, store.Options{NodeID: 1, Sealer: sealer})
	if err := st.CreateCredentials(t.Context(), &dispatch.Credentials{BearerToken: "tok", SigningSecret: "whsec_secret",
		Algorithm: dispatch.AlgorithmHMACSHA256, SignatureScheme: "FLOWCATALYST"}); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	const history, jobs = 3000, 100
	now := time.Now()
	if _, err := pool.Exec(t.Context(), `
		INSERT INTO dispatch_job (id, created_at, updated_at, source, type, target_url, protocol, headers,
			payload_content_type, status, max_retries, retry_strategy, attempt_count, last_attempt_at,
			completed_at, duration_millis, metadata, next_attempt_at)
		SELECT $1::bigint - (g << 22), ts, ts, 'history', 'old', 'https://example.com/hook', 'HTTP_WEBHOOK',
			'{}', 'application/json', 'COMPLETED', 5, 'exponential', 1, ts, ts, 12, '{}', ts
		FROM (SELECT g, $2::timestamptz - g * interval '1 millisecond' AS ts
			FROM generate_series(1::bigint, $3::bigint) g) s`, store.IDAt(now), now, history); err != nil {
		t.Fatalf("seed %d finished jobs: %v", history, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	args := []string{"-database", name, "-jobs", strconv.Itoa(jobs), "-clients", "4"}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dispatch-bench %q: %v\n%s\n%s", args, err, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		`^database +` + name + `, given with -database and kept; it held 3000 jobs when the load began`,
		`^deliveries .*100 in .*; 100 requests, 0 duplicates, 0 bad signatures`,
	} {
		if !regexp.MustCompile("(?m)" + want).MatchString(stdout.String()) {
			t.Errorf("no line matches %s in:\n%s", want, stdout.String())
		}
	}
	var held int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM dispatch_job`).Scan(&held); err != nil {
		t.Fatalf("the database after the run: %v", err)
	}
	if held != history+jobs {
		t.Errorf("the database holds %d jobs after the run, want its %d and the run's %d", held, history, jobs)
	}

	missing := "dispatch_bench_missing_" + strconv.FormatInt(now.UnixNano(), 36)
	cmd = exec.CommandContext(ctx, bin, "-database", missing, "-jobs", "1")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "-database "+missing+": no such database") {
		t.Errorf("-database %s: %v, %s; want it refused as no such database", missing, err, out)
	}
}

// TestSQSProxyCounts sends, receives and deletes three messages through the
// counting proxy with the SDK, as the service does: each action is counted
// once per request, with the messages the batch named or the answer held,
// and the counts endpoint tells.
func TestSQSProxyCounts(t *testing.T) {
	t.Parallel()
	q := sqstest.New(t, 30*time.Second)
	upstream, err := url.Parse(q.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newSQSProxy(upstream, io.Discard))
	t.Cleanup(srv.Close)
	p := &sqsProxyChild{url: srv.URL, client: srv.Client()}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	api := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) })

	before, err := p.counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var entries []types.SendMessageBatchRequestEntry
	for i := range 3 {
		id := strconv.Itoa(i)
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String("m" + id),
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d" + id)})
	}
	if _, err := api.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: entries}); err != nil {
		t.Fatal(err)
	}
	var received []types.Message
	receives := 0
	for len(received) < 3 {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		receives++
		received = append(received, out.Messages...)
	}
	var deletes []types.DeleteMessageBatchRequestEntry
	for i, m := range received {
		deletes = append(deletes, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	if _, err := api.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(q.URL), Entries: deletes}); err != nil {
		t.Fatal(err)
	}

	after, err := p.counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]sqsCount{}
	for _, a := range sqsUse(before, after) {
		got[a.action] = a.sqsCount
	}
	want := map[string]sqsCount{
		"SendMessageBatch":   {Requests: 1, Messages: 3},
		"ReceiveMessage":     {Requests: int64(receives), Messages: 3},
		"DeleteMessageBatch": {Requests: 1, Messages: 3},
	}
	if !maps.Equal(got, want) {
		t.Errorf("counted %+v, want %+v", got, want)
	}
}
