package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README's walk-throughs work pasted whole, each block straight after
// the one before, as a reader in a hurry pastes them: against `dispatch
// all` in local mode (what `make run` starts), with the listener, the API
// and /tmp moved to the test's own ports and directory. Only the "##
// Walk-through…" sections run; the others (Docker Compose) are not.
func TestREADMEWalkThroughsRunPastedWhole(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	for _, section := range regexp.MustCompile(`(?m)^## `).Split(string(readme), -1) {
		if !strings.HasPrefix(section, "Walk-through") {
			continue
		}
		for _, b := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
			script.WriteString(b[1])
		}
	}
	if script.Len() == 0 {
		t.Fatal("no walk-through found in README.md")
	}
	// The compose section needs Docker: it is not a walk-through, and
	// TestREADMEComposeSectionMatchesComposeFile checks it instead.
	if strings.Contains(script.String(), "docker compose") {
		t.Fatal(`a "## Walk-through" section runs docker compose, which this test cannot: keep it in its own section`)
	}
	in := start(t, "all", map[string]string{
		"DISPATCH_INSECURE": "true", "DISPATCH_API_TOKENS": "", "DISPATCH_ADMIN_TOKEN": "", "DISPATCH_INTERNAL_TOKEN": "",
		"DISPATCH_ENCRYPTION_KEY": "",
	})
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	text := strings.NewReplacer(
		"localhost:8080", strings.TrimPrefix(in.apiURL, "http://"),
		"127.0.0.1:9000", listen,
		"127.0.0.1/9000", strings.Replace(listen, ":", "/", 1), // bash's /dev/tcp/host/port
		"./bin/dispatch", dispatchBinary(t),
		"/tmp/", dir+"/",
	).Replace(script.String())
	cmd := exec.Command("bash", "-c", text)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the listener it leaves running goes with it
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	eventually(t, 60*time.Second, func() bool {
		return strings.Count(out.String(), "answered: 200") >= 5 // the job, two handshakes, two event deliveries
	}, func() string { return "the walk-throughs did not deliver everything:\n" + out.String() })
	eventually(t, 30*time.Second, func() bool { _, err := os.Stat(dir + "/event.json"); return err == nil },
		func() string { return "the event walk-through did not publish:\n" + out.String() })
	log := out.String()
	if strings.Contains(log, "INVALID") || strings.Contains(log, "address already in use") {
		t.Errorf("the walk-throughs went wrong:\n%s", log)
	}
	for _, want := range []string{`"status": "ACTIVE"`} {
		if n := strings.Count(log, want); n != 2 {
			t.Errorf("%d subscriptions %s, want both:\n%s", n, want, log)
		}
	}
	var event struct {
		Jobs []struct{ ID string }
	}
	b, err := os.ReadFile(dir + "/event.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &event); err != nil || len(event.Jobs) != 2 {
		t.Errorf("the event made %d jobs, want 2 (%v):\n%s", len(event.Jobs), err, b)
	}
	for _, j := range event.Jobs {
		in.waitStatus(j.ID, 30*time.Second, "COMPLETED")
	}
	// The retry example makes a new job (not the first one again, by its
	// idempotencyKey), which completes after its retries.
	var retried, first struct{ ID string }
	for name, v := range map[string]any{"retried.json": &retried, "job.json": &first} {
		if b, err := os.ReadFile(dir + "/" + name); err != nil || json.Unmarshal(b, v) != nil {
			t.Fatalf("%s: %v\n%s", name, err, b)
		}
	}
	if retried.ID == "" || retried.ID == first.ID {
		t.Fatalf("the retry example's job is %q, the first job %q: want a new job", retried.ID, first.ID)
	}
	in.waitStatus(retried.ID, 60*time.Second, "COMPLETED")
}

// The walk-through's wait for the receiver gives up, saying so, when
// nothing listens (a receiver that failed to start), instead of waiting
// forever in silence.
func TestREADMEReceiverWaitGivesUp(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	fn := regexp.MustCompile(`(?s)\nlistening\(\) \{\n.*?\n\}\n`).Find(readme)
	if fn == nil {
		t.Fatal("README.md defines no listening() wait")
	}
	port := freePort(t) // nothing listens there
	script := strings.ReplaceAll(string(fn), "9000", strconv.Itoa(port)) + "listening; echo exit=$?\n"
	start := time.Now()
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the wait took %s", took)
	}
	if !strings.Contains(string(out), "nothing listens on 127.0.0.1:"+strconv.Itoa(port)) || !strings.Contains(string(out), "exit=1") {
		t.Errorf("the wait for a receiver that never listens printed:\n%s\nwant it to say so and fail", out)
	}
}
