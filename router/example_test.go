package router_test

import (
	"context"
	"log"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/queue"
)

// A router that feeds one pool of 20 from a FIFO queue and hands each
// pointer to the processing endpoint over HTTP. Run blocks until the
// context is cancelled, then stops in two phases (release what has not
// started, let in-flight work finish until ShutdownTimeout).
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	q, err := queue.Open(ctx, queue.Config{Name: "dispatch.fifo"})
	if err != nil {
		log.Fatal(err)
	}
	med := mediator.NewHTTP("http://127.0.0.1:8080/api/dispatch/process", "internal-token-0123456789", time.Minute)
	r, err := router.New(q, med, router.Config{
		Pools:            []router.PoolConfig{{Code: dispatch.DefaultPool, Concurrency: 20}},
		ReceiveWait:      20 * time.Second,
		MediationTimeout: time.Minute,
		ShutdownTimeout:  30 * time.Second,
		Logger:           slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
