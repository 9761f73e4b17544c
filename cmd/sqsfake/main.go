// Command sqsfake serves the in-memory SQS stand-in (package
// localstack/sqsfake) for local development: `make up` starts it on
// 127.0.0.1:9324. Point the AWS SDK at it with AWS_ENDPOINT_URL_SQS.
// Everything is in memory: stopping it loses every queue and message.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/dispatchhq/dispatch/localstack/sqsfake"
)

func main() {
	// One P unless the environment says otherwise. The stand-in is light,
	// and on a small box it shares with PostgreSQL and dispatch a second
	// P buys only scheduler work: less CPU per delivery with one, and no
	// less throughput (docs/benchmarks.md).
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "sqsfake:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("sqsfake", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9324", "listen address")
	debug := fs.Bool("debug", false, "log every failed request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           sqsfake.New(sqsfake.Options{Logger: log}).Handler(),
		ConnContext:       sqsfake.ConnContext, // a long poll sees its client leave at once
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("sqsfake: serving the SQS JSON protocol (in memory)", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// Long polls end with the server: give them a moment, then close.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = srv.Close()
	return nil
}
