package router

import (
	"context"
	"log/slog"

	"github.com/dispatchhq/dispatch/router/queue"
)

// Deleter exposes the router's delete batching to its tests.
type Deleter struct{ d *deleter }

func NewDeleter(q *queue.Queue, log *slog.Logger) Deleter { return Deleter{newDeleter(q, log, nil)} }
func (d Deleter) Add(receipt string, grouped bool)        { d.d.add(receipt, grouped) }
func (d Deleter) Run(ctx context.Context)                 { d.d.run(ctx) }

// Holds is how many groups wait for a failed message to come back.
func (r *Router) Holds() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.holds)
}

// Workers is how many workers pool code has, removed and draining or not.
func (r *Router) Workers(code string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.order {
		if p.code == code {
			return p.workers
		}
	}
	return 0
}
