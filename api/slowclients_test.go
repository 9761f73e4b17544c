package api_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// Unauthenticated clients that send headers announcing a body and then
// stall are cut off within the read timeout, at most MaxConns of them are
// served at once, and every goroutine they cost returns. Not parallel: it
// counts the process's goroutines.
func TestStalledClientsAreCutOff(t *testing.T) {
	const (
		clients     = 150
		maxConns    = 40
		readTimeout = time.Second
	)
	st, _, _ := storetest.New(t, store.Options{NodeID: 1})
	srv := api.New(st, &fakeProcessor{}, api.Config{
		APITokens: []string{apiToken}, AdminToken: adminToken, InternalToken: internalToken,
		Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: time.Second,
		ReadTimeout: readTimeout, IdleTimeout: readTimeout, MaxConns: maxConns,
		JobRules: dispatch.JobRules{AllowHTTP: true},
	}, prometheus.NewRegistry())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base := runtime.NumGoroutine()

	start := time.Now()
	conns := make([]net.Conn, 0, clients)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range clients {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "POST /api/dispatch/jobs HTTP/1.1\r\nHost: dispatch\r\n"+
			"Content-Type: application/json\r\nContent-Length: 200000\r\n\r\n{\"source\":"); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	// Each stalled connection must be closed by the server; the ones
	// waiting beyond MaxConns are accepted, and cut off, as slots free up.
	bound := time.Duration(clients/maxConns+2)*readTimeout + 3*time.Second
	deadline := start.Add(bound)
	peak := 0
	buf := make([]byte, 4096)
	for i, c := range conns {
		peak = max(peak, runtime.NumGoroutine()-base)
		_ = c.SetReadDeadline(deadline)
		for {
			_, err := c.Read(buf) // a 400/408 answer may come first; then the close
			if err == nil {
				continue
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("client %d: still connected %v after it stalled (bound %v)", i, time.Since(start).Round(time.Millisecond), bound)
			}
			break // EOF or reset: the server closed it
		}
	}
	took := time.Since(start)
	t.Logf("%d stalled clients all cut off after %v; peak extra goroutines %d (max conns %d)", clients, took.Round(time.Millisecond), peak, maxConns)
	if peak > maxConns+20 {
		t.Errorf("peak %d extra goroutines with %d stalled clients, want about MaxConns (%d) at most", peak, clients, maxConns)
	}
	// Their goroutines return.
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline = time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d at the start: the stalled clients' goroutines did not return", runtime.NumGoroutine(), base)
		}
		<-tick.C
	}
	// The server still serves.
	resp, err := http.Get("http://" + ln.Addr().String() + "/health/live")
	if err != nil {
		t.Fatalf("after the stall: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after the stall: /health/live = %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
}
