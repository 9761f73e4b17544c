package app

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/router/queue"
)

// backlogCollector says whether delivery is falling behind, read at each
// scrape: the live jobs by state, the outbox, the longest wait (one indexed
// statement, store.Backlog) and the queue's depth (one GetQueueAttributes
// call). Either read may be nil (the router has no database). A read that
// fails drops its metrics from that scrape and sets its
// dispatch_backlog_up to 0; the rest of /metrics still answers.
type backlogCollector struct {
	backlog func(context.Context, time.Time) (dispatch.Backlog, error)
	depth   func(context.Context) (queue.Depth, error)
	now     func() time.Time
	// timeout bounds each read on its own: a slow database does not leave
	// the queue's read without time, nor the reverse.
	timeout time.Duration

	jobs, unsent, oldest, queue, up *prometheus.Desc
}

func newBacklogCollector(backlog func(context.Context, time.Time) (dispatch.Backlog, error), depth func(context.Context) (queue.Depth, error)) *backlogCollector {
	return &backlogCollector{
		backlog: backlog, depth: depth, now: time.Now, timeout: scrapeReadTimeout,
		jobs: prometheus.NewDesc("dispatch_live_jobs",
			"Jobs not finished, by status: PENDING (never attempted, scheduled ones included), IN_PROGRESS, FAILED (waiting for a retry).",
			[]string{"status"}, nil),
		unsent: prometheus.NewDesc("dispatch_unsent_jobs",
			"Due live jobs whose pointer is not on the queue and that the publisher will send (one waiting for an earlier job of its group is not counted).", nil, nil),
		oldest: prometheus.NewDesc("dispatch_oldest_pending_job_age_seconds",
			"How long the longest-waiting due job that could be delivered now (PENDING, or FAILED and due for its retry, with no earlier job of its group live) has waited since it became due; 0 when none waits.",
			nil, nil),
		queue: prometheus.NewDesc("dispatch_queue_messages",
			"Messages on the SQS queue, as SQS approximates them: visible (waiting), in_flight (received, not deleted), delayed.",
			[]string{"state"}, nil),
		up: prometheus.NewDesc("dispatch_backlog_up",
			"Whether this scrape could read the backlog from its source (database, queue): 1 yes, 0 no.",
			[]string{"source"}, nil),
	}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.unsent, c.oldest, c.queue, c.up} {
		ch <- d
	}
}

// scrapeReadTimeout bounds each read a scrape makes.
const scrapeReadTimeout = 3 * time.Second

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	up := func(source string, err error) {
		v := 1.0
		if err != nil {
			v = 0
		}
		gauge(c.up, v, source)
	}
	if c.backlog != nil {
		now := c.now()
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		b, err := c.backlog(ctx, now)
		cancel()
		up("database", err)
		if err == nil {
			gauge(c.jobs, float64(b.Pending), string(dispatch.StatusPending))
			gauge(c.jobs, float64(b.InProgress), string(dispatch.StatusInProgress))
			gauge(c.jobs, float64(b.Failed), string(dispatch.StatusFailed))
			gauge(c.unsent, float64(b.Unsent))
			age := 0.0
			if b.OldestDue != nil {
				age = max(now.Sub(*b.OldestDue).Seconds(), 0)
			}
			gauge(c.oldest, age)
		}
	}
	if c.depth != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		d, err := c.depth(ctx)
		cancel()
		up("queue", err)
		if err == nil {
			gauge(c.queue, float64(d.Visible), "visible")
			gauge(c.queue, float64(d.InFlight), "in_flight")
			gauge(c.queue, float64(d.Delayed), "delayed")
		}
	}
}

// openBreakersGauge counts the target hosts whose circuit breaker is open in
// this process: a target failing so steadily that deliveries to it wait.
func openBreakersGauge(b *mediator.Breakers) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dispatch_breakers_open",
		Help: "Target hosts whose circuit breaker is open in this process (deliveries to them wait; GET /api/dispatch/monitoring names them).",
	}, func() float64 { return float64(len(b.Open())) })
}

// registerOffers registers what the API hands to routers of other
// processes (handoff): the pointers offered, and the routers' requests
// waiting for one (0 in split mode means no router is asking, and every
// new job goes through the queue).
func registerOffers(reg prometheus.Registerer, b *handoff.Box) error {
	return errors.Join(
		reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "dispatch_api_jobs_offered_total",
			Help: "Pointers of new jobs this API handed straight to a router of another process that asked for them, instead of the queue (split mode).",
		}, func() float64 { return float64(b.Offered()) })),
		reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dispatch_api_offer_requests_waiting",
			Help: "Routers' requests for new jobs waiting in this API (split mode; up to four per router with idle workers).",
		}, func() float64 { return float64(b.Waiting()) })),
	)
}

// metricsHandler serves reg's metrics. A collector that fails loses its
// own series, not the scrape: the others, and the alerts on them, still
// answer.
func metricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
