// Package alert raises operational alerts: a subscription disabled or
// enabled again (recorded by the database as it changes), a target's
// circuit breaker opening or closing, jobs of a source and type exhausting
// their retries above a threshold, the oldest pending job older than a
// threshold. Each becomes an event in the database; the Notifier turns the
// events into alert jobs, at most one per destination and kind per window,
// delivered through dispatch's own pipeline like any job.
package alert

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Store is what the Notifier needs from the database.
type Store interface {
	FlushAlerts(ctx context.Context, now time.Time, window time.Duration) (int, error)
	SetAlertState(ctx context.Context, key string, active bool, e dispatch.AlertEvent) (bool, error)
	CountExhausted(ctx context.Context, source, typ string, windowStart time.Time, n, threshold int, e dispatch.AlertEvent) (bool, error)
	PruneAlerts(ctx context.Context, before time.Time) error
	Backlog(ctx context.Context, now time.Time) (dispatch.Backlog, error)
}

// Config configures a Notifier.
type Config struct {
	// Window is the least time between two alert jobs of one kind to one
	// destination; what happens meanwhile goes into the next as a summary.
	Window time.Duration
	// ExhaustedThreshold jobs of one source and type exhausting their
	// retries within ExhaustedWindow raise jobs.exhausted (0: never).
	ExhaustedThreshold int
	ExhaustedWindow    time.Duration
	// BacklogAge: the oldest due job waiting longer raises backlog.old
	// (0: never).
	BacklogAge time.Duration
	// Tick is how often due alerts are looked for (default 1s).
	Tick   time.Duration
	Logger *slog.Logger
}

// Notifier records the conditions this process sees and makes the due
// alert jobs. It is safe to run in every API replica.
type Notifier struct {
	st  Store
	cfg Config
	log *slog.Logger
	// breakers holds breaker changes for Run; full, further ones are
	// dropped (and logged).
	breakers chan breakerChange

	mu        sync.Mutex
	exhausted map[[2]string]int // by source and type, not yet counted in the database
}

type breakerChange struct {
	host string
	open bool
}

// New returns a Notifier.
func New(st Store, cfg Config) *Notifier {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.ExhaustedWindow <= 0 {
		cfg.ExhaustedWindow = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Notifier{st: st, cfg: cfg, log: cfg.Logger.With("component", "alerts"),
		breakers: make(chan breakerChange, 256), exhausted: map[[2]string]int{}}
}

// BreakerChanged is told that host's circuit breaker opened or closed in
// this process. It never blocks.
func (n *Notifier) BreakerChanged(host string, open bool) {
	select {
	case n.breakers <- breakerChange{host, open}:
	default:
		n.log.Warn("alert: breaker change dropped (too many at once)", "host", host, "open", open)
	}
}

// Exhausted is told that a job of source and type exhausted its retries.
// Alert jobs themselves are not counted (an unreachable destination would
// alert about itself).
func (n *Notifier) Exhausted(source, typ string) {
	if n.cfg.ExhaustedThreshold <= 0 || source == dispatch.AlertSource {
		return
	}
	n.mu.Lock()
	n.exhausted[[2]string{source, typ}]++
	n.mu.Unlock()
}

// Run makes the due alert jobs until ctx is cancelled.
func (n *Notifier) Run(ctx context.Context) error {
	tick := time.NewTicker(n.cfg.Tick)
	defer tick.Stop()
	var lastBacklog, lastPrune time.Time
	// The first pass runs at once: a restarted process sees an old backlog
	// without waiting a tick, and PostgreSQL plans these statements while
	// the process starts, not under the first second of its load.
	start := make(chan struct{}, 1)
	start <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case c := <-n.breakers:
			n.breaker(ctx, c)
			continue
		case <-start:
		case <-tick.C:
		}
		now := time.Now()
		n.countExhausted(ctx, now)
		if n.cfg.BacklogAge > 0 && now.Sub(lastBacklog) >= 10*n.cfg.Tick {
			lastBacklog = now
			n.backlog(ctx, now)
		}
		if made, err := n.st.FlushAlerts(ctx, now, n.cfg.Window); err != nil {
			n.warn(ctx, "alert jobs not made yet; retried", err)
		} else if made > 0 {
			n.log.Info("alert jobs made", "jobs", made)
		}
		if now.Sub(lastPrune) >= time.Hour {
			lastPrune = now
			if err := n.st.PruneAlerts(ctx, now.Add(-24*time.Hour)); err != nil {
				n.warn(ctx, "old alert events not pruned", err)
			}
		}
	}
}

func (n *Notifier) warn(ctx context.Context, msg string, err error) {
	if ctx.Err() == nil {
		n.log.Warn(msg, "err", err)
	}
}

func (n *Notifier) breaker(ctx context.Context, c breakerChange) {
	e := dispatch.AlertEvent{Kind: dispatch.AlertBreakerClosed, Subject: c.host, Detail: "deliveries to it go on"}
	if c.open {
		e = dispatch.AlertEvent{Kind: dispatch.AlertBreakerOpened, Subject: c.host,
			Detail: "consecutive delivery failures; deliveries to it wait"}
	}
	if _, err := n.st.SetAlertState(ctx, "breaker:"+c.host, c.open, e); err != nil {
		n.warn(ctx, "breaker change not recorded for alerts", err)
	}
}

func (n *Notifier) countExhausted(ctx context.Context, now time.Time) {
	n.mu.Lock()
	counts := n.exhausted
	if len(counts) == 0 {
		n.mu.Unlock()
		return
	}
	n.exhausted = map[[2]string]int{}
	n.mu.Unlock()
	start := now.Truncate(n.cfg.ExhaustedWindow)
	for k, c := range counts {
		e := dispatch.AlertEvent{Kind: dispatch.AlertJobsExhausted, Subject: k[0] + " / " + k[1],
			Detail: fmt.Sprintf("at least %d jobs exhausted their retries since %s", n.cfg.ExhaustedThreshold, start.UTC().Format(time.RFC3339))}
		if _, err := n.st.CountExhausted(ctx, k[0], k[1], start, c, n.cfg.ExhaustedThreshold, e); err != nil {
			n.warn(ctx, "exhausted jobs not counted for alerts", err)
		}
	}
}

func (n *Notifier) backlog(ctx context.Context, now time.Time) {
	b, err := n.st.Backlog(ctx, now)
	if err != nil {
		n.warn(ctx, "backlog not read for alerts", err)
		return
	}
	old := b.OldestDue != nil && now.Sub(*b.OldestDue) > n.cfg.BacklogAge
	e := dispatch.AlertEvent{}
	if old {
		e = dispatch.AlertEvent{Kind: dispatch.AlertBacklogOld, Subject: "oldest pending job due since " + b.OldestDue.UTC().Format(time.RFC3339),
			Detail: fmt.Sprintf("older than %s; %d pending, %d failed waiting for a retry", n.cfg.BacklogAge, b.Pending, b.Failed)}
	}
	if _, err := n.st.SetAlertState(ctx, "backlog", old, e); err != nil {
		n.warn(ctx, "backlog state not recorded for alerts", err)
	}
}
