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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		// The first signal starts a graceful stop; a second one ends the
		// process at once, as Go does by default.
		<-ctx.Done()
		stop()
	}()
	go procs.Adapt(ctx, os.Getenv)
	if err := app.Run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "dispatch:", err)
		os.Exit(1)
	}
}
