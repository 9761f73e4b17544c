package router

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Reporter stores what a router reports about itself (the store, wired in
// cmd/dispatch): the console reads every router's pools from there.
type Reporter interface {
	ReportRouter(ctx context.Context, r dispatch.RouterReport) error
}

// NewReportID returns an id for this router process: its host, its pid
// and a random part, so two routers in one process differ too.
func NewReportID(host string) string {
	return fmt.Sprintf("%s:%d:%s", host, os.Getpid(), rand.Text()[:6])
}

// RunReports reports the router's pools to rep at once and then every
// dispatch.RouterReportEvery until ctx ends, then once more saying it
// stopped. A report that fails is logged (the first of a run of failures
// as a warning) and tried again at the next tick; delivery does not depend
// on it.
func (r *Router) RunReports(ctx context.Context, rep Reporter, id, host, version string) error {
	started := time.Now().UTC()
	failing := false
	report := func(ctx context.Context, stopped bool) {
		pools, err := json.Marshal(r.Stats())
		if err != nil {
			return
		}
		rr := dispatch.RouterReport{ID: id, Host: host, Version: version, Pools: pools, StartedAt: started}
		if stopped {
			now := time.Now().UTC()
			rr.StoppedAt = &now
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		switch err := rep.ReportRouter(ctx, rr); {
		case err != nil && !failing:
			failing = true
			r.log.Warn("cannot report this router's pools to the database; the console will show it as gone until a report succeeds", "router_id", id, "err", err)
		case err != nil:
			r.log.Debug("router report failed", "router_id", id, "err", err)
		case failing:
			failing = false
			r.log.Info("router reports reach the database again", "router_id", id)
		}
	}
	tick := time.NewTicker(dispatch.RouterReportEvery)
	defer tick.Stop()
	for {
		report(ctx, false)
		select {
		case <-ctx.Done():
			report(context.WithoutCancel(ctx), true)
			return nil
		case <-tick.C:
		}
	}
}
