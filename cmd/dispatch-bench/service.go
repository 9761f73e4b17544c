package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The service under test runs from the dispatch binary, as it is deployed:
// `dispatch all` as one child process, or with -split `dispatch api` and
// `dispatch router` as two, the router mediating over HTTP to the API's
// processing endpoint.

// benchSystem is the service under test.
type benchSystem struct {
	apiURL   string
	children []*benchChild // the order they were started in; stopped in reverse
	once     sync.Once
	err      error
}

type benchChildProc struct {
	name string
	pid  int
}

// dispatchBinary finds the dispatch binary: the -dispatch flag, else
// `dispatch` beside this executable (make build puts both in bin/), else
// `dispatch` on PATH.
func dispatchBinary(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "dispatch")
		if info, err := os.Stat(beside); err == nil && !info.IsDir() {
			return beside, nil
		}
	}
	path, err := exec.LookPath("dispatch")
	if err != nil {
		return "", errors.New("bench: no dispatch binary beside this one or on PATH; build it (make build) or name it with -dispatch")
	}
	return path, nil
}

// startBenchSystem starts the service from exe. With cpuProfile set, each
// child writes a CPU profile of its run to cpuProfile.<command>.
func startBenchSystem(ctx context.Context, exe string, o benchOptions, env []string, stderr io.Writer) (*benchSystem, error) {
	// The SDK of a child reads its credentials from its own environment.
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
		env = append(env, k+"="+os.Getenv(k))
	}
	profiled := func(env []string, child string) []string {
		if o.cpuProfile == "" {
			return env
		}
		return append(slices.Clone(env), "DISPATCH_CPU_PROFILE="+o.cpuProfile+"."+child)
	}
	s := &benchSystem{}
	if o.floor {
		floor, addrs, err := startBenchChild(ctx, exe, floorCommand, env, stderr, "api")
		if err != nil {
			return nil, err
		}
		floor.name = "floor service"
		s.children, s.apiURL = []*benchChild{floor}, "http://"+addrs["api"]
		return s, s.waitReady(ctx, s.apiURL)
	}
	if !o.split {
		all, addrs, err := startBenchChild(ctx, exe, "all", profiled(env, "all"), stderr, "api", "router")
		if err != nil {
			return nil, err
		}
		s.children, s.apiURL = []*benchChild{all}, "http://"+addrs["api"]
		return s, s.waitReady(ctx, s.apiURL)
	}
	api, addrs, err := startBenchChild(ctx, exe, "api", profiled(env, "api"), stderr, "api")
	if err != nil {
		return nil, err
	}
	s.children, s.apiURL = []*benchChild{api}, "http://"+addrs["api"]
	routerEnv := append(profiled(env, "router"), "DISPATCH_PROCESS_URL="+s.apiURL+"/api/dispatch/process")
	router, routerAddrs, err := startBenchChild(ctx, exe, "router", routerEnv, stderr, "router")
	if err != nil {
		_ = api.stop()
		return nil, err
	}
	s.children = append(s.children, router)
	return s, s.waitReady(ctx, s.apiURL, "http://"+routerAddrs["router"])
}

// waitReady waits until each base URL's /health/ready answers 200: a
// process listens while it still waits for its database and migrations,
// and answers 503 until then. On failure it stops the children.
func (s *benchSystem) waitReady(ctx context.Context, baseURLs ...string) error {
	ctx, cancel := context.WithTimeout(ctx, benchStartTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for _, base := range baseURLs {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health/ready", nil)
			if err != nil {
				_ = s.stop()
				return err
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				_ = s.stop()
				return fmt.Errorf("bench: %s/health/ready did not answer 200 within %s", base, benchStartTimeout)
			case <-tick.C:
			}
		}
	}
	return nil
}

func (s *benchSystem) url() string { return s.apiURL }

func (s *benchSystem) processes() []benchChildProc {
	out := make([]benchChildProc, len(s.children))
	for i, c := range s.children {
		out[i] = benchChildProc{c.name, c.cmd.Process.Pid}
	}
	return out
}

// stop stops the children in the reverse order of their start (split: the
// router first, since its in-flight mediations still need the API), each
// with SIGTERM. It is safe to call more than once.
func (s *benchSystem) stop() error {
	s.once.Do(func() {
		var errs []error
		for _, c := range slices.Backward(s.children) {
			if err := c.stop(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
			}
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

// benchChild is one `dispatch <command>` child process (or, with -floor,
// this binary's floor command).
type benchChild struct {
	command  string
	name     string // in the report: "dispatch <command>", "floor service"
	cmd      *exec.Cmd
	cancel   context.CancelFunc // sends SIGTERM
	done     chan error
	scanning sync.WaitGroup
}

// startBenchChild starts `exe command` and waits until it has printed
// "<listener> listening on ADDR" for each of listeners; it returns each
// listener's ADDR, made dialable.
func startBenchChild(ctx context.Context, exe, command string, env []string, stderr io.Writer, listeners ...string) (*benchChild, map[string]string, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(ctx, exe, command)
	cmd.Env = env
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = benchStopTimeout // then SIGKILL
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("bench: start %s %s: %w", exe, command, err)
	}
	c := &benchChild{command: command, name: "dispatch " + command, cmd: cmd, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan map[string]string, 1)
	c.scanning.Go(func() {
		addrs := map[string]string{}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			for _, l := range listeners {
				if addr, ok := strings.CutPrefix(sc.Text(), l+" listening on "); ok {
					addrs[l] = loopbackHostPort(addr)
					if len(addrs) == len(listeners) {
						ready <- addrs
					}
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	})
	go func() {
		c.scanning.Wait() // Wait closes the pipe: read it to the end first
		c.done <- cmd.Wait()
	}()
	select {
	case addrs := <-ready:
		return c, addrs, nil
	case err := <-c.done:
		c.done <- err
		_ = c.stop()
		return nil, nil, fmt.Errorf("bench: %s %s exited before listening: %v", exe, command, err)
	case <-time.After(benchStartTimeout):
		_ = c.stop()
		return nil, nil, fmt.Errorf("bench: %s %s did not start within %s", exe, command, benchStartTimeout)
	}
}

// stop sends SIGTERM and waits for the exit; a clean exit is no error.
func (c *benchChild) stop() error {
	c.cancel()
	err := <-c.done
	c.done <- err // for a second stop
	if c.cmd.ProcessState != nil && c.cmd.ProcessState.Success() {
		return nil // Wait reports the cancellation that asked for the exit
	}
	return err
}

// loopbackHostPort turns a wildcard listen address ("[::]:8080") into one
// to dial.
func loopbackHostPort(addr string) string {
	if port, ok := strings.CutPrefix(addr, "[::]:"); ok {
		return "127.0.0.1:" + port
	}
	if port, ok := strings.CutPrefix(addr, "0.0.0.0:"); ok {
		return "127.0.0.1:" + port
	}
	return addr
}

// benchEnv is the environment of the service: the caller's, minus the
// settings that would point it at other data or change the shape of the
// run, plus set.
func benchEnv(environ []string, set map[string]string) []string {
	drop := map[string]bool{
		"DISPATCH_QUEUE_NAME": true, "DISPATCH_QUEUE_CREATE": true, "DISPATCH_PROCESS_URL": true,
		"DISPATCH_ROUTER_CONFIG": true, "DISPATCH_API_TOKENS": true, "DISPATCH_ADMIN_TOKEN": true,
		"DISPATCH_INTERNAL_TOKEN": true, "DISPATCH_ENCRYPTION_KEY_PREVIOUS": true,
		"DISPATCH_ALLOWED_TARGET_CIDRS": true, "DISPATCH_CPU_PROFILE": true,
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
