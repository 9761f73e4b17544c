package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// benchSystem is the service under test: `dispatch all` in this process, or
// `dispatch api` and `dispatch router` as two child processes (-split).
type benchSystem interface {
	url() string                // the API's base URL
	children() []benchChildProc // empty in process
	stop() error                // safe to call more than once
}

type benchChildProc struct {
	name string
	pid  int
}

func (s *benchService) url() string                { return s.apiURL }
func (s *benchService) children() []benchChildProc { return nil }

// benchSplit is `dispatch api` and `dispatch router` run from this
// binary, the router mediating over HTTP to the API's processing endpoint,
// as in a split deployment.
type benchSplit struct {
	apiURL      string
	api, router *benchChild
	once        sync.Once
	err         error
}

// With cpuProfile set, each child writes a CPU profile of its run to
// cpuProfile.api and cpuProfile.router.
func startBenchSplit(ctx context.Context, env []string, cpuProfile string, stderr io.Writer) (*benchSplit, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: -split: %w", err)
	}
	// The SDK of a child reads its credentials from its own environment.
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} {
		env = append(env, k+"="+os.Getenv(k))
	}
	s := &benchSplit{}
	var addr string
	profiled := func(env []string, child string) []string {
		if cpuProfile == "" {
			return env
		}
		return append(slices.Clone(env), "DISPATCH_CPU_PROFILE="+cpuProfile+"."+child)
	}
	s.api, addr, err = startBenchChild(ctx, exe, "api", profiled(env, "api"), stderr)
	if err != nil {
		return nil, err
	}
	s.apiURL = "http://" + addr
	routerEnv := append(profiled(env, "router"), "DISPATCH_PROCESS_URL="+s.apiURL+"/api/dispatch/process")
	if s.router, _, err = startBenchChild(ctx, exe, "router", routerEnv, stderr); err != nil {
		_ = s.api.stop()
		return nil, err
	}
	return s, nil
}

func (s *benchSplit) url() string { return s.apiURL }

func (s *benchSplit) children() []benchChildProc {
	return []benchChildProc{{"api", s.api.cmd.Process.Pid}, {"router", s.router.cmd.Process.Pid}}
}

// stop stops the router first (its in-flight mediations still need the
// API), then the API, each with SIGTERM.
func (s *benchSplit) stop() error {
	s.once.Do(func() {
		var errs []error
		if err := s.router.stop(); err != nil {
			errs = append(errs, fmt.Errorf("dispatch router: %w", err))
		}
		if err := s.api.stop(); err != nil {
			errs = append(errs, fmt.Errorf("dispatch api: %w", err))
		}
		s.err = errors.Join(errs...)
	})
	return s.err
}

// benchChild is one `dispatch <command>` child process.
type benchChild struct {
	cmd      *exec.Cmd
	cancel   context.CancelFunc // sends SIGTERM
	done     chan error
	scanning sync.WaitGroup
}

// startBenchChild starts `exe command` and waits until it prints
// "<command> listening on ADDR"; it returns ADDR.
func startBenchChild(ctx context.Context, exe, command string, env []string, stderr io.Writer) (*benchChild, string, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := exec.CommandContext(ctx, exe, command)
	cmd.Env = env
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = benchStopTimeout // then SIGKILL
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, "", fmt.Errorf("bench: start dispatch %s: %w", command, err)
	}
	c := &benchChild{cmd: cmd, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan string, 1)
	c.scanning.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), command+" listening on "); ok {
				ready <- addr
			}
		}
		_, _ = io.Copy(io.Discard, out)
	})
	go func() {
		c.scanning.Wait() // Wait closes the pipe: read it to the end first
		c.done <- cmd.Wait()
	}()
	select {
	case addr := <-ready:
		return c, loopbackHostPort(addr), nil
	case err := <-c.done:
		c.done <- err
		_ = c.stop()
		return nil, "", fmt.Errorf("bench: dispatch %s exited before listening: %v", command, err)
	case <-time.After(benchStartTimeout):
		_ = c.stop()
		return nil, "", fmt.Errorf("bench: dispatch %s did not start within %s", command, benchStartTimeout)
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
