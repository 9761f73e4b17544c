// Package alert raises operational alerts: a subscription disabled or
// enabled again (recorded by the database as it changes), a target's
// circuit breaker opening or closing (the first process to open it, the
// last to close it), jobs of a source and type exhausting
// their retries above a threshold, the oldest pending job older than a
// threshold. Each becomes an event in the database; the Notifier turns the
// events into alert jobs, at most one per destination and kind per window,
// delivered through dispatch's own pipeline like any job.
package alert

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Store is what the Notifier needs from the database.
type Store interface {
	FlushAlerts(ctx context.Context, now time.Time, window time.Duration) (int, error)
	SetAlertState(ctx context.Context, key string, active bool, e dispatch.AlertEvent) (bool, error)
	HoldAlert(ctx context.Context, key, holder string, lease time.Duration, e dispatch.AlertEvent) (bool, error)
	ReleaseAlert(ctx context.Context, key, holder string, e dispatch.AlertEvent) (bool, error)
	RenewAlertHolds(ctx context.Context, holder string, keys []string, lease time.Duration) ([]string, error)
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
	// BreakerLease is how long this process's hold of an open breaker's
	// alert lasts unless renewed (default DefaultBreakerLease). It renews
	// its holds every quarter of it; a process that stops without closing
	// its breakers leaves holds that run out, and the host's next opening
	// alerts again.
	BreakerLease time.Duration
	// Tick is how often due alerts are looked for (default 1s).
	Tick   time.Duration
	Logger *slog.Logger
}

// DefaultBreakerLease is Config.BreakerLease's default.
const DefaultBreakerLease = 2 * time.Minute

// Notifier records the conditions this process sees and makes the due
// alert jobs. It is safe to run in every API replica.
type Notifier struct {
	st  Store
	cfg Config
	log *slog.Logger
	// holder names this process in the breakers' holds.
	holder string
	// wake tells Run that breakers has changes.
	wake chan struct{}
	// held lists the hosts whose breakers are open here, whose holds Run
	// renews. Run's own.
	held map[string]bool

	mu        sync.Mutex
	exhausted map[[2]string]int // by source and type, not yet counted in the database
	// breakers holds each host's latest breaker change not recorded yet
	// (open or not): one value per host, so none is dropped, however many
	// come at once or however long the database takes.
	breakers map[string]bool
}

// New returns a Notifier.
func New(st Store, cfg Config) *Notifier {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.ExhaustedWindow <= 0 {
		cfg.ExhaustedWindow = 5 * time.Minute
	}
	if cfg.BreakerLease <= 0 {
		cfg.BreakerLease = DefaultBreakerLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Notifier{st: st, cfg: cfg, log: cfg.Logger.With("component", "alerts"), holder: holderName(),
		wake: make(chan struct{}, 1), held: map[string]bool{}, exhausted: map[[2]string]int{}, breakers: map[string]bool{}}
}

// holderName names this process: its host name and pid, for the people
// who read dispatch_alert_hold, and a random part, so that a restarted
// process with the same pid is another holder.
func holderName() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}

// BreakerChanged is told that host's circuit breaker opened or closed in
// this process (closed too when the process forgets an open one). It
// never blocks, and the latest change of each host is recorded, retried
// until the database takes it.
func (n *Notifier) BreakerChanged(host string, open bool) {
	n.mu.Lock()
	n.breakers[host] = open
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default: // Run is told already
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
	var lastBacklog, lastPrune, lastRenew time.Time
	// The first pass runs at once: a restarted process sees an old backlog
	// without waiting a tick, and PostgreSQL plans these statements while
	// the process starts, not under the first second of its load.
	start := make(chan struct{}, 1)
	start <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.wake:
			n.recordBreakers(ctx)
			continue
		case <-start:
		case <-tick.C:
		}
		now := time.Now()
		n.recordBreakers(ctx) // those that failed are tried again
		if now.Sub(lastRenew) >= n.cfg.BreakerLease/4 {
			lastRenew = now
			n.renewBreakers(ctx)
		}
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

const breakerKey = "breaker:"

// recordBreakers records the breaker changes told since the last time: a
// host's breaker open here is held in the database (breaker.opened when no
// other process held it), a closed one released (breaker.closed when no
// other process holds it still). Once the database refuses one, the rest
// wait with it for the next tick, each unless a newer change of its host
// came meanwhile.
func (n *Notifier) recordBreakers(ctx context.Context) {
	n.mu.Lock()
	changes := n.breakers
	if len(changes) == 0 {
		n.mu.Unlock()
		return
	}
	n.breakers = map[string]bool{}
	n.mu.Unlock()
	var failed error
	var again []string
	for host, open := range changes {
		if open {
			n.held[host] = true
		} else {
			delete(n.held, host)
		}
		if failed == nil {
			failed = n.recordBreaker(ctx, host, open)
		}
		if failed != nil {
			again = append(again, host)
		}
	}
	if failed == nil {
		return
	}
	n.warn(ctx, "breaker changes not recorded for alerts yet; retried", failed)
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, host := range again {
		if _, newer := n.breakers[host]; !newer {
			n.breakers[host] = changes[host]
		}
	}
}

func (n *Notifier) recordBreaker(ctx context.Context, host string, open bool) error {
	var err error
	if open {
		_, err = n.st.HoldAlert(ctx, breakerKey+host, n.holder, n.cfg.BreakerLease, breakerOpened(host))
	} else {
		_, err = n.st.ReleaseAlert(ctx, breakerKey+host, n.holder, dispatch.AlertEvent{
			Kind: dispatch.AlertBreakerClosed, Subject: host, Detail: "deliveries to it go on"})
	}
	return err
}

// renewBreakers renews the holds of the breakers open here. A hold that
// ran out meanwhile (the database was out of reach for a lease) is made
// again, alerting the opening again if no other process held it.
func (n *Notifier) renewBreakers(ctx context.Context) {
	if len(n.held) == 0 {
		return
	}
	keys := make([]string, 0, len(n.held))
	for host := range n.held {
		keys = append(keys, breakerKey+host)
	}
	lapsed, err := n.st.RenewAlertHolds(ctx, n.holder, keys, n.cfg.BreakerLease)
	if err != nil {
		n.warn(ctx, "breaker alert holds not renewed", err)
		return
	}
	for _, key := range lapsed {
		host := strings.TrimPrefix(key, breakerKey)
		if _, err := n.st.HoldAlert(ctx, key, n.holder, n.cfg.BreakerLease, breakerOpened(host)); err != nil {
			n.warn(ctx, "breaker alert hold not renewed", err)
		}
	}
}

func breakerOpened(host string) dispatch.AlertEvent {
	return dispatch.AlertEvent{Kind: dispatch.AlertBreakerOpened, Subject: host,
		Detail: "consecutive delivery failures; deliveries to it wait"}
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
			n.warn(ctx, "exhausted jobs not counted for alerts yet; counted on a later tick", err)
			n.mu.Lock()
			n.exhausted[k] += c // kept for the next tick, with any counted meanwhile
			n.mu.Unlock()
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
