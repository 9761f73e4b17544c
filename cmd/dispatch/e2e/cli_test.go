package e2e

// A CLI that helps: -h/--help on every subcommand, a version
// stamped at build time, `dispatch config`, and `listen` secrets kept out
// of ps.

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/app"
	"github.com/dispatchhq/dispatch/config"
	"github.com/dispatchhq/dispatch/webhook"
)

func TestHelpOnEverySubcommand(t *testing.T) {
	t.Parallel()
	type want struct {
		has, hasNot []string
	}
	cases := map[string]want{
		"api":     {has: []string{"DATABASE_URL", "--http-addr", "DISPATCH_API_TOKENS", "AWS_ENDPOINT_URL_SQS"}, hasNot: []string{"DISPATCH_RECEIVE_WAIT"}},
		"router":  {has: []string{"DISPATCH_PROCESS_URL", "--receive-wait", "DISPATCH_INTERNAL_TOKEN", "DATABASE_URL"}, hasNot: []string{"DISPATCH_API_TOKENS", "DISPATCH_RETENTION"}},
		"all":     {has: []string{"DATABASE_URL", "DISPATCH_PROCESS_URL", "DISPATCH_API_TOKENS"}},
		"migrate": {has: []string{"DATABASE_URL", "--database-url", "Reads only the settings below"}, hasNot: []string{"DISPATCH_PROCESS_URL", "same configuration as"}},
		"rekey":   {has: []string{"DISPATCH_ENCRYPTION_KEY", "DISPATCH_ENCRYPTION_KEY_PREVIOUS", "DATABASE_URL"}},
		"config":  {has: []string{"secrets masked", "DATABASE_URL", "DISPATCH_PROCESS_URL"}},
		"listen":  {has: []string{"--secret-file", "-addr", "DISPATCH_LISTEN_SECRET"}},
		"version": {has: []string{"commit", "build date"}},
		"help":    {has: []string{"api", "router", "migrate", "listen", "config", "version"}},
	}
	bin := dispatchBinary(t)
	for name, w := range cases {
		for _, form := range [][]string{{name, "-h"}, {name, "--help"}, {"help", name}} {
			t.Run(strings.Join(form, " "), func(t *testing.T) {
				t.Parallel()
				cmd := exec.Command(bin, form...)
				cmd.Env = []string{"PATH=" + os.Getenv("PATH")} // no settings: help needs none
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("dispatch %s: %v (want exit 0)\nstdout:\n%s\nstderr:\n%s", strings.Join(form, " "), err, stdout.String(), stderr.String())
				}
				out := stdout.String()
				if !strings.HasPrefix(out, "usage: dispatch") {
					t.Errorf("the help does not start with a usage line:\n%s", out)
				}
				for _, s := range w.has {
					if !strings.Contains(out, s) {
						t.Errorf("the help of %s does not mention %s:\n%s", name, s, out)
					}
				}
				for _, s := range w.hasNot {
					if strings.Contains(out, s) {
						t.Errorf("the help of %s lists %s, which it does not read", name, s)
					}
				}
				scope := name
				if name == "config" {
					scope = "all"
				}
				for _, s := range config.SettingsFor(scope) {
					if !strings.Contains(out, s.Name) {
						t.Errorf("the help of %s does not list %s, which it reads", name, s.Name)
					}
				}
				if stderr.Len() > 0 {
					t.Errorf("help wrote to stderr:\n%s", stderr.String())
				}
			})
		}
	}
	// An unknown command still fails, with the list of commands.
	out, code := runBinary(t, nil, "nonsense", "-h")
	if code == 0 || !strings.Contains(out, "unknown command") || !strings.Contains(out, "usage: dispatch") {
		t.Errorf("dispatch nonsense -h: exit %d\n%s", code, out)
	}
}

var (
	commitLine = regexp.MustCompile(`(?m)^commit +(\S+)$`)
	builtLine  = regexp.MustCompile(`(?m)^built +(\S+)$`)
)

func gitHead(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// `make build` stamps the version, the commit and the build date.
func TestVersionIsStampedByMakeBuild(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "dispatch")
	cmd := exec.Command("make", "--no-print-directory", "build", "BIN="+bin, "BENCH="+filepath.Join(dir, "dispatch-bench"))
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	head := gitHead(t)
	if m := commitLine.FindStringSubmatch(string(out)); m == nil || !strings.HasPrefix(m[1], head) {
		t.Errorf("dispatch version after make build:\n%s\nwant commit %s", out, head)
	}
	if m := builtLine.FindStringSubmatch(string(out)); m == nil {
		t.Errorf("no build date:\n%s", out)
	} else if built, err := time.Parse(time.RFC3339, m[1]); err != nil || time.Since(built) > time.Hour || time.Until(built) > time.Minute {
		t.Errorf("build date %q is not the time of this build", m[1])
	}
	if strings.HasPrefix(string(out), "dispatch dev\n") {
		t.Errorf("make build left the version at dev:\n%s", out)
	}
	// Built as the image is: static, without gin's MessagePack codec (a
	// sixth of the code, never used) and without gRPC's debug pages.
	info, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-tags=nomsgpack,grpcnotrace"} {
		if !strings.Contains(string(info), want) {
			t.Errorf("make build's binary was not built with %s:\n%s", want, info)
		}
	}
	if strings.Contains(string(info), "github.com/ugorji/go") {
		t.Errorf("make build's binary links the MessagePack codec:\n%s", info)
	}
	// Nothing in it looks methods up by name (text/template does), so the
	// linker leaves out the methods dispatch never calls, such as gin's
	// renderers for YAML and protobuf: a third of the binary, and pages
	// every process would map (docs/benchmarks.md, "Resident memory").
	syms, err := exec.Command("go", "tool", "nm", bin).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	for _, unused := range []string{"gin-gonic/gin.(*Context).YAML", "gin-gonic/gin.(*Context).ProtoBuf", "text/template.(*state).evalField"} {
		if strings.Contains(string(syms), unused) {
			t.Errorf("make build's binary holds %s: something reachable looks methods up by reflection "+
				"(go build -ldflags=-dumpdep shows what: a function marked <ReflectMethod>)", unused)
		}
	}
}

// The Dockerfile's build stamps the same way: its -ldflags, with the build
// arguments `make image` passes, give `dispatch version` those values.
func TestVersionIsStampedByTheDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`-ldflags="([^"]*)"`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Dockerfile's go build has no -ldflags")
	}
	ldflags := strings.NewReplacer("${VERSION}", "v9.8.7", "${COMMIT}", "0123456789abcdef", "${BUILD_DATE}", "2026-01-02T03:04:05Z").Replace(string(m[1]))
	if strings.Contains(ldflags, "${") {
		t.Fatalf("the Dockerfile's -ldflags use an argument this test does not know: %s", ldflags)
	}
	bin := filepath.Join(t.TempDir(), "dispatch")
	if out, err := exec.Command("go", "build", "-ldflags="+ldflags, "-o", bin, dispatchPkg).CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags=%q: %v\n%s", ldflags, err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dispatch v9.8.7\n", "commit   0123456789abcdef\n", "built    2026-01-02T03:04:05Z\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dispatch version from the Dockerfile's build:\n%s\nwant %q", out, want)
		}
	}
}

// A build that nobody stamped (go build, with Go's VCS stamping on: its
// default in a Git checkout) still names its commit.
func TestVersionUnstampedNamesTheCommit(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "dispatch")
	if out, err := exec.Command("go", "build", "-buildvcs=true", "-o", bin, dispatchPkg).CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("dispatch version: %v", err)
	}
	out := string(b)
	if m := commitLine.FindStringSubmatch(out); m == nil || !strings.HasPrefix(m[1], gitHead(t)) {
		t.Errorf("dispatch version of a go build:\n%s\nwant commit %s", out, gitHead(t))
	}
}

func TestConfigPrintsTheSettingsInEffectWithSecretsMasked(t *testing.T) {
	t.Parallel()
	secrets := map[string]string{
		"DATABASE_URL":            "postgres://app:db-password-21@db.internal:5432/dispatch?sslmode=require",
		"DISPATCH_API_TOKENS":     "api-token-one-0123456789,api-token-two-0123456789",
		"DISPATCH_ADMIN_TOKEN":    "admin-token-0123456789",
		"DISPATCH_INTERNAL_TOKEN": "internal-token-0123456789",
		"DISPATCH_ENCRYPTION_KEY": testKey(),
		"AWS_SECRET_ACCESS_KEY":   "aws-secret-21",
	}
	env := []string{"DISPATCH_RETRY_BASE=2s", "AWS_REGION=eu-west-1"}
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	if err := app.Run(context.Background(), []string{"config", "--delivery-timeout", "40s"}, env, &stdout, &stderr); err != nil {
		t.Fatalf("dispatch config on a valid configuration: %v\n%s", err, stdout.String())
	}
	out := stdout.String()
	for name, v := range secrets {
		if strings.Contains(out, v) || strings.Contains(out, strings.Split(v, ",")[0]) {
			t.Errorf("dispatch config shows %s's secret:\n%s", name, out)
		}
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^DATABASE_URL=postgres://app:\*\*\*\*@db\.internal:5432/dispatch\?sslmode=require +# environment$`),
		regexp.MustCompile(`(?m)^DISPATCH_API_TOKENS=\*\*\*\*,\*\*\*\* +# environment$`),
		regexp.MustCompile(`(?m)^DISPATCH_ENCRYPTION_KEY=\*\*\*\* +# environment$`),
		regexp.MustCompile(`(?m)^DISPATCH_RETRY_BASE=2s +# environment$`),
		regexp.MustCompile(`(?m)^DISPATCH_DELIVERY_TIMEOUT=40s +# flag --delivery-timeout$`),
		regexp.MustCompile(`(?m)^DISPATCH_SHUTDOWN_TIMEOUT=55s +# derived$`), // 40s + 15s
		regexp.MustCompile(`(?m)^DISPATCH_QUEUE_NAME=dispatch\.fifo +# default$`),
		regexp.MustCompile(`(?m)^AWS_REGION=eu-west-1 +# environment \(AWS SDK\)$`),
		regexp.MustCompile(`(?m)^AWS_SECRET_ACCESS_KEY=\*\*\*\* +# environment \(AWS SDK\)$`),
		regexp.MustCompile(`(?m)^# valid$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("dispatch config does not print a line matching %s:\n%s", want, out)
		}
	}
	for _, s := range config.SettingsFor("all") {
		if !strings.Contains(out, "\n"+s.Name+"=") {
			t.Errorf("dispatch config does not print %s", s.Name)
		}
	}
	if strings.Contains(out, "DISPATCH_LISTEN_SECRET") {
		t.Error("dispatch config prints listen's setting among the services'")
	}
	// One command's settings only.
	stdout.Reset()
	if err := app.Run(context.Background(), []string{"config", "router"}, env, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "DISPATCH_API_TOKENS") || !strings.Contains(stdout.String(), "DISPATCH_RECEIVE_WAIT=") {
		t.Errorf("dispatch config router:\n%s", stdout.String())
	}
}

func TestConfigInvalidListsEveryProblemAndExitsNonZero(t *testing.T) {
	t.Parallel()
	out, code := runBinary(t, []string{
		"DISPATCH_API_TOKENS=short", "DISPATCH_RETRY_BASE=soon", "DISPATCH_DELIVERY_TIMOUT=5s",
		"DATABASE_URL=postgres://app:db-password-21@db/dispatch",
	}, "config")
	if code == 0 {
		t.Fatalf("dispatch config on an invalid configuration exited 0:\n%s", out)
	}
	for _, want := range []string{
		"DISPATCH_API_TOKENS each token must be at least 16 characters",
		"DISPATCH_RETRY_BASE must be a duration",
		"DISPATCH_DELIVERY_TIMOUT is not a dispatch setting",
		"DISPATCH_ADMIN_TOKEN is required",
		"DISPATCH_ENCRYPTION_KEY is required",
		"DATABASE_URL=postgres://app:****@db/dispatch", // the settings are still shown
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dispatch config does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "db-password-21") {
		t.Errorf("dispatch config shows the database password:\n%s", out)
	}
	if strings.Contains(out, "# valid") {
		t.Errorf("an invalid configuration is called valid:\n%s", out)
	}
}

// docs/operations.md's table of commands has a row for every command
// `dispatch help` lists (but help itself).
func TestOperationsGuideListsEveryCommand(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var help bytes.Buffer
	if err := app.Run(context.Background(), []string{"help"}, nil, &help, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(help.String(), "commands:\n")
	list, _, _ = strings.Cut(list, "\n\n")
	n := 0
	for _, line := range strings.Split(list, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if name == "" || name == "help" {
			continue
		}
		n++
		if !strings.Contains(string(doc), "| `dispatch "+name+"` |") {
			t.Errorf("docs/operations.md has no row for `dispatch %s`", name)
		}
	}
	if n < 7 {
		t.Fatalf("read %d commands from dispatch help:\n%s", n, help.String())
	}
}

// listen verifies with a secret from the environment or a file; --secret
// still works but warns that ps shows it.
func TestListenTakesItsSecretFromTheEnvironmentOrAFile(t *testing.T) {
	t.Parallel()
	secret, err := webhook.NewSecret(webhook.SchemeFlowCatalyst)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("# the current secret\n"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name     string
		args     []string
		env      []string
		warnsPS  bool
		verifies string
	}{
		{"environment", nil, []string{"DISPATCH_LISTEN_SECRET=" + secret}, false, "signature: valid"},
		{"file", []string{"--secret-file", file}, nil, false, "signature: valid"},
		{"flag", []string{"--secret", secret}, nil, true, "signature: valid"},
		{"wrong secret", nil, []string{"DISPATCH_LISTEN_SECRET=whsec_c29tZXRoaW5nIGVsc2UgZW50aXJlbHkgMDEyMzQ1Njc4OQ=="}, false, "signature: INVALID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			stdout, stderr := &syncBuffer{}, &syncBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- app.Run(ctx, append([]string{"listen", "--addr", "127.0.0.1:0"}, tc.args...), tc.env, stdout, stderr)
			}()
			t.Cleanup(func() { cancel(); <-done })
			var addr string
			eventually(t, 10*time.Second, func() bool {
				_, rest, ok := strings.Cut(stdout.String(), "listening on ")
				addr, _, _ = strings.Cut(rest, " ")
				return ok && addr != ""
			}, func() string { return "dispatch listen did not start: " + stdout.String() + stderr.String() })
			payload := []byte(`{"hello":"world"}`)
			req, err := http.NewRequest(http.MethodPost, addr+"/hook", bytes.NewReader(payload))
			if err != nil {
				t.Fatal(err)
			}
			if err := webhook.Sign(req.Header, webhook.Signing{Secret: secret}, payload); err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			eventually(t, 10*time.Second, func() bool { return strings.Contains(stdout.String(), "answered: ") },
				func() string { return "listen printed no delivery: " + stdout.String() })
			if !strings.Contains(stdout.String(), tc.verifies) {
				t.Errorf("listen printed:\n%s\nwant %q", stdout.String(), tc.verifies)
			}
			warned := strings.Contains(stderr.String(), "ps")
			if warned != tc.warnsPS {
				t.Errorf("warning about ps: %v, want %v (stderr: %q)", warned, tc.warnsPS, stderr.String())
			}
		})
	}
	// A file with no secret is refused, not silently "not checked".
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, []byte("# nothing yet\n"), 0o600)
	if err := app.Run(context.Background(), []string{"listen", "--secret-file", empty}, nil, &bytes.Buffer{}, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "holds no secret") {
		t.Errorf("listen --secret-file with no secret: %v", err)
	}
	// The services accept DISPATCH_LISTEN_SECRET in their environment (a
	// shell that exported it for listen); that they take no --listen-secret
	// flag is app's TestServicesTakeNoListenSecretFlag.
	if err := config.CheckUnknown([]string{"DISPATCH_LISTEN_SECRET=x"}); err != nil {
		t.Errorf("DISPATCH_LISTEN_SECRET is called unknown: %v", err)
	}
}

// listen --fail-first N says in its banner that it fails the first N
// requests, fails them, then answers --status; each delivery is printed
// with its time in UTC to the millisecond, as the README shows it.
func TestListenFailsTheFirstRequestsAsItsBannerSays(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &syncBuffer{}, &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, []string{"listen", "--addr", "127.0.0.1:0", "--fail-first", "2"}, nil, stdout, stderr)
	}()
	t.Cleanup(func() { cancel(); <-done })
	var addr string
	eventually(t, 10*time.Second, func() bool {
		_, rest, ok := strings.Cut(stdout.String(), "listening on ")
		addr, _, _ = strings.Cut(rest, " ")
		return ok && strings.Contains(rest, "\n")
	}, func() string { return "dispatch listen did not start: " + stdout.String() + stderr.String() })
	banner, _, _ := strings.Cut(stdout.String(), "\n")
	if want := "(failing the first 2 requests with 500, then answering 200; verifying with 0 secret(s))"; !strings.HasSuffix(banner, want) {
		t.Errorf("banner %q, want it to end %q", banner, want)
	}
	var got []int
	for range 3 {
		resp, err := http.Post(addr+"/hook", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	if want := []int{500, 500, 200}; !slices.Equal(got, want) {
		t.Errorf("listen --fail-first 2 answered %v, want %v", got, want)
	}
	stamped := regexp.MustCompile(`(?m)^--- #\d \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z POST /hook$`)
	if n := len(stamped.FindAllString(stdout.String(), -1)); n != 3 {
		t.Errorf("%d of 3 deliveries printed with a millisecond UTC time:\n%s", n, stdout.String())
	}
}
