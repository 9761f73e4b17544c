package router

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
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

// maxReportedWarnings is how many of its latest warnings a router reports.
const maxReportedWarnings = 20

// reportDepthTimeout bounds the depth readings of one report: a queue that
// does not answer delays the report by this much at most.
const reportDepthTimeout = 3 * time.Second

// RunReports reports the router's pools, queues, in-flight messages and
// latest warnings to rep at once and then every
// dispatch.RouterReportEvery until ctx ends, then once more saying it
// stopped. A report reads each queue's depth at most once (one
// GetQueueAttributes call), and not at all when /monitoring/queues read it
// in the last half interval; the last report reads none. A report that
// fails is logged (the first of a run of failures as a warning) and tried
// again at the next tick; delivery does not depend on it.
func (r *Router) RunReports(ctx context.Context, rep Reporter, id, host, version string) error {
	started := time.Now().UTC()
	failing := false
	report := func(ctx context.Context, stopped bool) {
		rr, err := r.report(ctx, stopped)
		if err != nil {
			r.log.Error("cannot encode this router's report", "router_id", id, "err", err)
			return
		}
		rr.ID, rr.Host, rr.Version, rr.StartedAt = id, host, version, started
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

// report is what the router reports about itself, but who it is.
func (r *Router) report(ctx context.Context, stopped bool) (dispatch.RouterReport, error) {
	var queues []QueueStats
	if stopped {
		queues = r.queues(ctx, 0, false)
	} else {
		ctx, cancel := context.WithTimeout(ctx, reportDepthTimeout)
		queues = r.queues(ctx, dispatch.RouterReportEvery/2, true)
		cancel()
	}
	warnings := r.Warnings()
	warnings = warnings[:min(len(warnings), maxReportedWarnings)]
	var rr dispatch.RouterReport
	var errs [4]error
	rr.Pools, errs[0] = json.Marshal(r.Stats())
	rr.Queues, errs[1] = json.Marshal(queues)
	rr.InFlight, errs[2] = json.Marshal(summarize(r.InFlight()))
	rr.Warnings, errs[3] = json.Marshal(warnings)
	return rr, errors.Join(errs[:]...)
}
