package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/router/sqstest"
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
// process, PostgreSQL per delivery, memory), each child's among them.
func TestBenchRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole pipeline twice")
	}
	bin := binaries(t)
	sqstest.SetEnv()
	env := append(os.Environ(), "AWS_ENDPOINT_URL_SQS="+sqstest.Endpoint(), "DATABASE_URL="+storetest.AdminURL())
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	splitProfile := filepath.Join(t.TempDir(), "split.pprof")
	for _, tc := range []struct {
		name string
		args []string
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
				`^  dispatch all +[0-9.]+ MiB`,
				`^  PostgreSQL +[0-9.]+ ms`,
				`^context switches +[0-9.]+ +\(per delivery, whole box`,
				`^PG round trips +[0-9.]+ +\(per delivery`,
				`^PG (statements|transactions) +[0-9.]+ `,
				`^peak RSS +[0-9.]+ MiB`,
			},
		},
		{
			name: "fixed rate split",
			args: []string{"-rate", "100", "-duration", "2s", "-split", "-cpuprofile", splitProfile},
			want: []string{
				`^dispatch-bench +fixed rate: 100 jobs/s for 2s \(200 jobs, open loop\).*child processes`,
				`^deliveries .*200 in .*; 200 requests, 0 duplicates, 0 bad signatures`,
				`^latency p50 +[0-9.]+ ms +\(create scheduled → first delivery\)`,
				`^  dispatch api +[0-9.]+ ms`,
				`^  dispatch router +[0-9.]+ ms`,
				`^  dispatch api +[0-9.]+ MiB`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Env = env
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
