package router

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/dispatchhq/dispatch"
)

// Outbox is what the publisher needs from the job store.
type Outbox interface {
	PublishDue(ctx context.Context, now time.Time, limit int, send func([]dispatch.Unsent) ([]int64, error)) (int, error)
	Sweep(ctx context.Context, now time.Time, requeueAfter time.Duration) (expired, requeued int64, err error)
}

// FailingSubscriptions disables subscriptions that have failed every
// delivery for a while (SPEC §10); the publisher's sweep runs it.
type FailingSubscriptions interface {
	DisableFailingSubscriptions(ctx context.Context, now time.Time, after time.Duration) (int64, error)
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	PoolCode   string
	ProcessURL string // informational mediationTarget in pointers
	// RequeueAfter is how long past due a live job may go without news
	// before its pointer is sent again (lost message, dead processor).
	RequeueAfter time.Duration
	BatchSize    int
	Logger       *slog.Logger
	// Subscriptions, when set with DisableAfter > 0, has each sweep disable
	// subscriptions whose jobs have all ended ERROR for DisableAfter.
	Subscriptions FailingSubscriptions
	DisableAfter  time.Duration
}

// Publisher is the outbox loop (SPEC §4.2): it sends the pointers of due,
// unsent jobs, right after they commit (Notify) and on a timer (scheduled
// jobs, jobs created while the queue was down, jobs the sweep requeued).
// It is safe to run in every API replica.
type Publisher struct {
	q      *Queue
	outbox Outbox
	cfg    PublisherConfig
	log    *slog.Logger
	kick   chan struct{}
}

// NewPublisher returns a Publisher.
func NewPublisher(q *Queue, outbox Outbox, cfg PublisherConfig) *Publisher {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.PoolCode == "" {
		cfg.PoolCode = dispatch.DefaultPool
	}
	return &Publisher{q: q, outbox: outbox, cfg: cfg, log: cfg.Logger.With("component", "publisher"), kick: make(chan struct{}, 1)}
}

// Notify wakes the publisher: new jobs were committed.
func (p *Publisher) Notify() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is cancelled.
func (p *Publisher) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sweepEvery := min(max(p.cfg.RequeueAfter/4, time.Second), time.Minute)
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-tick.C:
		case <-sweep.C:
			expired, requeued, err := p.outbox.Sweep(ctx, time.Now(), p.cfg.RequeueAfter)
			if err != nil {
				p.log.Warn("sweep failed", "err", err)
			} else if expired+requeued > 0 {
				p.log.Info("sweep", "expired", expired, "requeued", requeued)
			}
			p.disableFailing(ctx)
		}
		if backoff > 0 {
			sleepCtx(ctx, backoff)
		}
		if err := p.publishAll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, 200*time.Millisecond), 5*time.Second)
			p.log.Warn("publishing failed; jobs stay unsent and are retried", "err", err, "backoff", backoff.String())
			continue
		}
		backoff = 0
	}
}

func (p *Publisher) disableFailing(ctx context.Context) {
	if p.cfg.Subscriptions == nil || p.cfg.DisableAfter <= 0 {
		return
	}
	n, err := p.cfg.Subscriptions.DisableFailingSubscriptions(ctx, time.Now(), p.cfg.DisableAfter)
	if err != nil {
		p.log.Warn("automatic subscription disable failed", "err", err)
	} else if n > 0 {
		p.log.Warn("subscriptions disabled: every delivery failed", "count", n, "after", p.cfg.DisableAfter.String())
	}
}

// publishAll sends due pointers until none are left.
func (p *Publisher) publishAll(ctx context.Context) error {
	for {
		n, err := p.outbox.PublishDue(ctx, time.Now(), p.cfg.BatchSize, func(due []dispatch.Unsent) ([]int64, error) {
			return p.send(ctx, due)
		})
		if err != nil || n < p.cfg.BatchSize {
			return err
		}
	}
}

func (p *Publisher) send(ctx context.Context, due []dispatch.Unsent) ([]int64, error) {
	sent := make([]int64, 0, len(due))
	for len(due) > 0 {
		batch := due[:min(10, len(due))]
		due = due[len(batch):]
		entries := make([]Entry, len(batch))
		for i, u := range batch {
			id := dispatch.FormatID(u.ID)
			body, _ := json.Marshal(dispatch.Pointer{
				ID: id, PoolCode: p.cfg.PoolCode, MediationType: "HTTP",
				MediationTarget: p.cfg.ProcessURL, MessageGroupID: u.MessageGroupID(),
			})
			entries[i] = Entry{Body: string(body), GroupID: u.MessageGroupID(), DeduplicationID: u.DeduplicationID()}
		}
		ok, err := p.q.SendBatch(ctx, entries)
		for _, i := range ok {
			sent = append(sent, batch[i].ID)
		}
		if err != nil {
			// Stop at the first failure so later pointers do not overtake.
			return sent, err
		}
	}
	return sent, nil
}
