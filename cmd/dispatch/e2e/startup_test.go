package e2e

// Startup failures say why: a process that waits for its
// database logs the cause and answers /health/live meanwhile, and
// /health/ready says what it waits for; `dispatch migrate` prints the
// cause and fails; a binary older than the database's schema refuses to
// start.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/app"
	"github.com/dispatchhq/dispatch/router/sqstest"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// starting is a `dispatch <cmd>` run in process that may never become
// ready: its ports are chosen up front.
type starting struct {
	t       *testing.T
	apiURL  string
	stdout  *syncBuffer
	stderr  *syncBuffer
	done    chan error
	cancel  context.CancelFunc
	stopped bool
}

// noQueue is a queue the startup never reaches (the database comes first).
var noQueue = sqstest.Queue{URL: "http://127.0.0.1:1/000000000000/unused.fifo", Endpoint: "http://127.0.0.1:1"}

func startWaiting(t *testing.T, cmd, dbURL string, q sqstest.Queue, overrides map[string]string) *starting {
	t.Helper()
	env := map[string]string{
		"DISPATCH_HTTP_ADDR":   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"DISPATCH_ROUTER_ADDR": fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		"DISPATCH_LOG_FORMAT":  "text",
	}
	for k, v := range overrides {
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &starting{t: t, apiURL: "http://" + env["DISPATCH_HTTP_ADDR"], stdout: &syncBuffer{}, stderr: &syncBuffer{},
		done: make(chan error, 1), cancel: cancel}
	go func() { s.done <- app.Run(ctx, []string{cmd}, baseEnv(dbURL, q, env), s.stdout, s.stderr) }()
	t.Cleanup(func() {
		if !s.stopped {
			s.stop()
		}
		if t.Failed() {
			t.Logf("dispatch %s log:\n%s", cmd, tail(s.stderr.String(), 40))
		}
	})
	return s
}

func (s *starting) stop() error {
	s.t.Helper()
	s.stopped = true
	s.cancel()
	select {
	case err := <-s.done:
		return err
	case <-time.After(30 * time.Second):
		s.t.Fatal("dispatch did not stop within 30s of its context's end")
		return nil
	}
}

// exited waits for the process to end by itself and returns its error.
func (s *starting) exited(timeout time.Duration) error {
	s.t.Helper()
	select {
	case err := <-s.done:
		s.stopped = true
		return err
	case <-time.After(timeout):
		s.t.Fatalf("dispatch still runs after %s:\n%s", timeout, tail(s.stderr.String(), 20))
		return nil
	}
}

// get returns the status and JSON body of GET path (0 when nothing answers).
func (s *starting) get(path string) (int, map[string]any) {
	req, err := http.NewRequest(http.MethodGet, s.apiURL+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

func randomName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func TestStartupWaitForTheDatabaseSaysWhy(t *testing.T) {
	t.Parallel()
	admin := storetest.AdminURL()
	withDB := func(user, db string) string {
		u := strings.Replace(admin, "/postgres?", "/"+db+"?", 1)
		if user != "" {
			u = strings.Replace(u, "postgres://postgres@", "postgres://"+user+"@", 1)
		}
		return u
	}
	missing := randomName("dispatch_missing_")
	cases := []struct {
		name   string
		dbURL  string
		reason string
		says   []string // in the log and in /health/ready's detail
	}{
		{"refused", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/dispatch?sslmode=disable", freePort(t)),
			store.ReasonRefused, []string{"nothing accepts connections at 127.0.0.1:"}},
		{"wrong user", withDB("no_such_role_21", "postgres"),
			store.ReasonAuth, []string{`role "no_such_role_21" does not exist`, "check the user and password in DATABASE_URL"}},
		{"missing database", withDB("", missing),
			store.ReasonNoDatabase, []string{fmt.Sprintf("database %q does not exist", missing), "create it with: createdb -h 127.0.0.1 -p "}},
	}
	if !strings.HasPrefix(admin, "postgres://postgres@") || !strings.Contains(admin, "/postgres?") {
		t.Fatalf("these cases build URLs from an admin URL of the form postgres://postgres@host:port/postgres?…, got %s", admin)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startWaiting(t, "all", tc.dbURL, noQueue, map[string]string{"DISPATCH_INSECURE": "true"})
			eventually(t, 30*time.Second, func() bool {
				return strings.Contains(s.stderr.String(), "database not available yet ("+tc.reason+")")
			}, func() string { return "the log never said " + tc.reason + ":\n" + tail(s.stderr.String(), 10) })
			log := strings.ReplaceAll(s.stderr.String(), `\"`, `"`) // the text log's quoting
			for _, want := range tc.says {
				if !strings.Contains(log, want) {
					t.Errorf("the log does not say %q:\n%s", want, tail(log, 5))
				}
			}
			if code, body := s.get("/health/live"); code != http.StatusOK || body["status"] != "UP" {
				t.Errorf("/health/live while waiting = %d %v, want 200 UP", code, body)
			}
			code, body := s.get("/health/ready")
			if code != http.StatusServiceUnavailable || body["waitingFor"] != "database" || body["reason"] != tc.reason {
				t.Errorf("/health/ready while waiting = %d %v, want 503 waiting for the database (%s)", code, body, tc.reason)
			}
			if detail, _ := body["detail"].(string); !strings.Contains(detail, tc.says[0]) {
				t.Errorf("/health/ready's detail %q does not say %q", detail, tc.says[0])
			}
			if code, body := s.get("/api/dispatch/jobs"); code != http.StatusServiceUnavailable || !strings.Contains(fmt.Sprint(body), tc.reason) {
				t.Errorf("an API call while waiting = %d %v, want 503 saying %s", code, body, tc.reason)
			}
			if strings.Contains(s.stdout.String(), "listening on") {
				t.Errorf("it said it listens (is ready) while it waits:\n%s", s.stdout.String())
			}
			if err := s.stop(); err != nil {
				t.Errorf("stopped while waiting: %v, want a clean exit", err)
			}
		})
	}
}

// The hint is a command that works: run as printed, the waiting service
// comes up by itself.
func TestStartupMissingDatabaseComesUpAfterTheHintedCreatedb(t *testing.T) {
	t.Parallel()
	sqstest.SetEnv()
	q := sqstest.New(t, 30*time.Second)
	db := randomName("dispatch_created_")
	dbURL := strings.Replace(storetest.AdminURL(), "/postgres?", "/"+db+"?", 1)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), storetest.AdminURL())
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			conn.Close(context.Background())
		}
	})
	s := startWaiting(t, "api", dbURL, q, map[string]string{})
	var hint string
	eventually(t, 30*time.Second, func() bool {
		_, after, ok := strings.Cut(s.stderr.String(), "create it with: ")
		if ok {
			hint, _, _ = strings.Cut(after, `"`)
		}
		return ok
	}, func() string { return "no createdb hint in the log:\n" + tail(s.stderr.String(), 10) })
	out, err := exec.Command("sh", "-c", hint).CombinedOutput()
	if err != nil {
		t.Fatalf("the hinted command %q: %v\n%s", hint, err, out)
	}
	eventually(t, 60*time.Second, func() bool {
		code, _ := s.get("/health/ready")
		return code == http.StatusOK
	}, func() string { return "not ready after " + hint + ":\n" + tail(s.stderr.String(), 10) })
	if !strings.Contains(s.stdout.String(), "api listening on") {
		t.Errorf("ready but did not say it listens:\n%s", s.stdout.String())
	}
	if code, _ := s.get("/api/dispatch/jobs"); code != http.StatusOK {
		t.Errorf("GET /api/dispatch/jobs once ready = %d", code)
	}
}

// A wrong password needs a server that checks passwords: a private cluster
// with scram-sha-256.
func TestStartupWrongPasswordSaysAuthenticationFailed(t *testing.T) {
	t.Parallel()
	pg := startPostgres(t, "right-password-21")
	t.Run("api waits and says why", func(t *testing.T) {
		url := fmt.Sprintf("postgres://postgres:wrong-password@127.0.0.1:%d/dispatch?sslmode=disable", pg.port)
		s := startWaiting(t, "api", url, noQueue, map[string]string{"DISPATCH_INSECURE": "true"})
		eventually(t, 30*time.Second, func() bool {
			return strings.Contains(s.stderr.String(), "database not available yet (authentication failed)")
		}, func() string { return "the log never said authentication failed:\n" + tail(s.stderr.String(), 10) })
		log := s.stderr.String()
		if !strings.Contains(log, `password authentication failed for user \"postgres\"`) {
			t.Errorf("the log does not give the server's message:\n%s", tail(log, 3))
		}
		if strings.Contains(log, "wrong-password") {
			t.Errorf("the log shows the password:\n%s", tail(log, 3))
		}
		if code, body := s.get("/health/ready"); code != http.StatusServiceUnavailable || body["reason"] != store.ReasonAuth {
			t.Errorf("/health/ready = %d %v, want 503 authentication failed", code, body)
		}
	})
	t.Run("migrate fails and says why", func(t *testing.T) {
		url := fmt.Sprintf("postgres://postgres:wrong-password@127.0.0.1:%d/dispatch?sslmode=disable", pg.port)
		out, code := runBinary(t, []string{"DATABASE_URL=" + url, "DISPATCH_INSECURE=true"}, "migrate")
		if code == 0 || !strings.Contains(out, "authentication failed") || strings.Contains(out, "wrong-password") {
			t.Errorf("dispatch migrate with a wrong password: exit %d\n%s\nwant non-zero, saying authentication failed, without the password", code, out)
		}
	})
}

// runBinary runs the built dispatch binary to its end with env added to a
// minimal environment, and returns its output and exit code.
func runBinary(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(dispatchBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir()}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		t.Fatalf("dispatch %v: %v", args, err)
	}
	return string(out), 0
}

// dispatch migrate says what it did: on an empty database, how many
// migrations it applied and the version reached; then, that the schema
// is up to date, at that version.
func TestMigrateSaysWhatItApplied(t *testing.T) {
	t.Parallel()
	url, top := storetest.NewEmptyDatabase(t), store.MigrationsVersion()
	for _, want := range []string{
		fmt.Sprintf("applied %d migrations; schema at version %d\n", top, top),
		fmt.Sprintf("schema is up to date (version %d)\n", top),
	} {
		out, code := runBinary(t, []string{"DATABASE_URL=" + url, "DISPATCH_INSECURE=true", "DISPATCH_LOG_LEVEL=warn"}, "migrate")
		if code != 0 || !strings.HasSuffix(out, want) {
			t.Errorf("dispatch migrate: exit %d\n%s\nwant exit 0, ending %q", code, out, want)
		}
	}
}

func TestStartupMigrateSaysWhyAndFails(t *testing.T) {
	t.Parallel()
	missing := randomName("dispatch_missing_")
	cases := []struct {
		name, url string
		says      []string
	}{
		{"refused", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/dispatch?sslmode=disable", freePort(t)),
			[]string{"connection refused", "nothing accepts connections at 127.0.0.1:"}},
		{"missing database", strings.Replace(storetest.AdminURL(), "/postgres?", "/"+missing+"?", 1),
			[]string{"database does not exist", "create it with: createdb -h 127.0.0.1 -p ", missing}},
		{"wrong user", strings.Replace(storetest.AdminURL(), "postgres://postgres@", "postgres://no_such_role_21@", 1),
			[]string{"authentication failed", `role "no_such_role_21" does not exist`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := runBinary(t, []string{"DATABASE_URL=" + tc.url, "DISPATCH_INSECURE=true"}, "migrate")
			if code == 0 {
				t.Errorf("dispatch migrate exited 0:\n%s", out)
			}
			for _, want := range tc.says {
				if !strings.Contains(out, want) {
					t.Errorf("dispatch migrate does not say %q:\n%s", want, out)
				}
			}
		})
	}
}

// The upgrade of several replicas: one migrates, the others wait for its
// lock; a replica of an older version (a rollback, a late pod of the old
// release) then finds a newer schema and refuses to start, saying so.
func TestStartupOlderBinaryRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	newer := func(t *testing.T) string {
		t.Helper()
		dbURL := storetest.NewDatabase(t)
		conn, err := pgx.Connect(context.Background(), dbURL)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		// What a newer release's next migration leaves behind.
		if _, err := conn.Exec(context.Background(), `UPDATE dispatch_schema_version SET version = version + 1`); err != nil {
			t.Fatal(err)
		}
		return dbURL
	}
	wantRefusal := func(t *testing.T, err error) {
		t.Helper()
		want := fmt.Sprintf("the database schema is at version %d, newer than this binary's %d", store.MigrationsVersion()+1, store.MigrationsVersion())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start against a newer schema: %v, want a refusal saying %q", err, want)
		}
	}
	t.Run("api migrating at start", func(t *testing.T) {
		t.Parallel()
		s := startWaiting(t, "api", newer(t), noQueue, map[string]string{"DISPATCH_INSECURE": "true"})
		wantRefusal(t, s.exited(30*time.Second))
	})
	t.Run("api with DISPATCH_AUTO_MIGRATE=false", func(t *testing.T) {
		t.Parallel()
		s := startWaiting(t, "api", newer(t), noQueue, map[string]string{"DISPATCH_INSECURE": "true", "DISPATCH_AUTO_MIGRATE": "false"})
		wantRefusal(t, s.exited(30*time.Second))
	})
	t.Run("migrate", func(t *testing.T) {
		t.Parallel()
		out, code := runBinary(t, []string{"DATABASE_URL=" + newer(t), "DISPATCH_INSECURE=true"}, "migrate")
		if code == 0 || !strings.Contains(out, "newer than this binary's") {
			t.Errorf("dispatch migrate against a newer schema: exit %d\n%s", code, out)
		}
	})
	t.Run("waiting on another replica's migration lock", func(t *testing.T) {
		t.Parallel()
		dbURL := storetest.NewDatabase(t)
		ctx := context.Background()
		other, err := pgx.Connect(ctx, dbURL) // the newer replica, migrating
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close(ctx)
		const ternLock = 9628173550095224 // tern's migration lock
		if _, err := other.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(ternLock)); err != nil {
			t.Fatal(err)
		}
		s := startWaiting(t, "api", dbURL, noQueue, map[string]string{"DISPATCH_INSECURE": "true"})
		eventually(t, 30*time.Second, func() bool {
			var waiting bool
			err := other.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting)
			return err == nil && waiting
		}, func() string { return "the starting replica never waited for the migration lock" })
		code, body := s.get("/health/ready")
		if code != http.StatusServiceUnavailable || body["waitingFor"] != "migrations" {
			t.Errorf("/health/ready while another replica migrates = %d %v, want 503 waiting for migrations", code, body)
		}
		if code, _ := s.get("/health/live"); code != http.StatusOK {
			t.Errorf("/health/live while another replica migrates = %d, want 200", code)
		}
		if _, err := other.Exec(ctx, `UPDATE dispatch_schema_version SET version = version + 1`); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(ternLock)); err != nil {
			t.Fatal(err)
		}
		wantRefusal(t, s.exited(30*time.Second))
	})
	t.Run("not migrated and DISPATCH_AUTO_MIGRATE=false", func(t *testing.T) {
		t.Parallel()
		s := startWaiting(t, "api", storetest.NewEmptyDatabase(t), noQueue, map[string]string{"DISPATCH_INSECURE": "true", "DISPATCH_AUTO_MIGRATE": "false"})
		err := s.exited(30 * time.Second)
		if err == nil || !strings.Contains(err.Error(), "run `dispatch migrate`") {
			t.Errorf("start on an empty database without migrating: %v, want a refusal saying to run dispatch migrate", err)
		}
	})
}
