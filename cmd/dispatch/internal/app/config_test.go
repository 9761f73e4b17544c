package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestStartReportsEveryConfigurationProblemAtOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Run(context.Background(), []string{"api"}, []string{
		"DISPATCH_INSECURE=true",
		"DISPATCH_RETRY_BASE=soon",    // invalid value
		"DISPATCH_RECEIVE_WAIT=0s",    // below the floor: a busy receive loop
		"DISPATCH_REQUEUE_AFTER=0s",   // would requeue every live job each second
		"DISPATCH_DELIVERY_TIMOUT=5s", // a typo of a real setting
	}, &stdout, &stderr)
	if err == nil {
		t.Fatal("start succeeded with an invalid configuration")
	}
	for _, name := range []string{"DISPATCH_RETRY_BASE", "DISPATCH_RECEIVE_WAIT", "DISPATCH_REQUEUE_AFTER", "DISPATCH_DELIVERY_TIMOUT"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("the start-up error does not name %s:\n%v", name, err)
		}
	}
	if n := strings.Count(err.Error(), "invalid configuration"); n != 1 {
		t.Errorf("the problems came in %d messages, want one:\n%v", n, err)
	}
	if strings.Contains(stdout.String(), "listening") {
		t.Error("it listened although the configuration is invalid")
	}
}

func TestFlagsOverrideTheEnvironment(t *testing.T) {
	got, err := settingFlags([]string{"--http-addr=127.0.0.1:9999", "--log-level", "debug", "--database-url=postgres://x/y"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"DISPATCH_HTTP_ADDR=127.0.0.1:9999", "DISPATCH_LOG_LEVEL=debug", "DATABASE_URL=postgres://x/y"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("settingFlags = %v, want %v", got, want)
	}
	for _, bad := range [][]string{{"--no-such-setting=1"}, {"--http-addr"}, {"stray"}} {
		if _, err := settingFlags(bad); err == nil {
			t.Errorf("settingFlags(%v) accepted it", bad)
		}
	}
	// Through Run: the flag's bad value wins over a good environment value.
	var stdout, stderr bytes.Buffer
	err = Run(context.Background(), []string{"api", "--retry-base", "soon"},
		[]string{"DISPATCH_INSECURE=true", "DISPATCH_RETRY_BASE=5s"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_RETRY_BASE") {
		t.Errorf("run with --retry-base soon: %v, want an error naming DISPATCH_RETRY_BASE", err)
	}
}

// A secret given as a flag would be in the process list and the shell's
// history: it is refused, naming the variable to set instead, and no error
// repeats a value given on the command line.
func TestSecretsAreNotTakenAsFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--admin-token=S3cretAdminToken99"},
		{"--api-tokens", "S3cretApiToken99"},
		{"--encryption-key=S3cretKey99"},
		{"--database-url=postgres://app:S3cret99@db/dispatch"},
		{"-admin-token=S3cretAdminToken99"},
	} {
		_, err := settingFlags(args)
		if err == nil {
			t.Errorf("settingFlags(%v) accepted it", args)
			continue
		}
		if strings.Contains(err.Error(), "S3cret") {
			t.Errorf("settingFlags(%v): %q repeats the secret", args, err)
		}
	}
	_, err := settingFlags([]string{"--internal-token=x"})
	if err == nil || !strings.Contains(err.Error(), "DISPATCH_INTERNAL_TOKEN") {
		t.Errorf("--internal-token: %v, want an error naming DISPATCH_INTERNAL_TOKEN", err)
	}
}

// listen refuses at start a status no HTTP client could read, rather than
// failing every request with it.
func TestListenRefusesAStatusOutsideHTTPs(t *testing.T) {
	for _, args := range [][]string{{"--status", "42"}, {"--status", "1000"}, {"--fail-status", "0"}} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), append([]string{"listen", "--addr", "127.0.0.1:0"}, args...), nil, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("listen %v: %v, want an error naming %s", args, err, args[0])
		}
		if strings.Contains(stdout.String(), "listening") {
			t.Errorf("listen %v listened", args)
		}
	}
}

// The services accept DISPATCH_LISTEN_SECRET in their environment (a shell
// that exported it for listen) but take no --listen-secret flag.
func TestServicesTakeNoListenSecretFlag(t *testing.T) {
	if _, err := settingFlags([]string{"--listen-secret=x"}); err == nil {
		t.Error("the services accept --listen-secret")
	}
}
