// Command dispatch runs the dispatch webhook delivery service: the API, the
// message router, both at once, migrations, and a local webhook receiver.
// See `dispatch help`. The program is cmd/dispatch/internal/app; its
// end-to-end suites are cmd/dispatch/e2e. The pipeline benchmark is
// cmd/dispatch-bench.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/app"
	"github.com/dispatchhq/dispatch/cmd/dispatch/internal/procs"
)

func main() {
	// The first SIGINT or SIGTERM starts a graceful stop; a second one ends
	// the process at once. Both are taken by one handler, registered before
	// anything runs, so that no second signal can fall between the two.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		<-signals
		stop()
		<-signals
		fmt.Fprintln(os.Stderr, "dispatch: a second signal: stopping at once")
		os.Exit(1)
	}()
	go procs.Adapt(ctx, os.Getenv)
	if err := app.Run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch:", err)
		os.Exit(1)
	}
}
