package mediator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/dispatchhq/dispatch"
)

// Metrics are the delivery metrics.
type Metrics struct {
	attempts        *prometheus.CounterVec
	duration        prometheus.Histogram
	breakerRejected prometheus.Counter
	rateLimited     prometheus.Counter
	latency         prometheus.Histogram
	finished        *prometheus.CounterVec
	exhausted       prometheus.Counter
}

// NewMetrics registers the delivery metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	return &Metrics{
		attempts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_delivery_attempts_total", Help: "Delivery attempts by outcome.",
		}, []string{"status"}),
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Name: "dispatch_delivery_duration_seconds", Help: "Webhook request duration.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		breakerRejected: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_breaker_rejected_total", Help: "Deliveries deferred because the target's circuit breaker was open.",
		}),
		rateLimited: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_subscription_rate_limited_total", Help: "Deliveries deferred by a subscription's rateLimitPerSecond.",
		}),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "dispatch_job_delivery_latency_seconds",
			Help: "From a job's creation to its successful delivery (completedAt - createdAt), observed as it completes: queueing, retries and backoff included.",
			// 10 ms to about 23 hours.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 24),
		}),
		finished: f.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_jobs_finished_total", Help: "Jobs that reached COMPLETED or ERROR through a delivery attempt, by that status.",
		}, []string{"status"}),
		exhausted: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_jobs_retries_exhausted_total", Help: "Jobs that ended ERROR because their last retry failed too (a subset of dispatch_jobs_finished_total{status=\"ERROR\"}).",
		}),
	}
}

func (m *Metrics) observe(d Delivery) {
	m.attempts.WithLabelValues(string(d.Status)).Inc()
	m.duration.Observe(d.CompletedAt.Sub(d.StartedAt).Seconds())
}

// finish counts a job that an attempt finished (status is the state the
// attempt led it to), and times its delivery when it completed.
func (m *Metrics) finish(j dispatch.Job, d Delivery, status dispatch.Status, exhausted bool) {
	switch status {
	case dispatch.StatusCompleted:
		m.latency.Observe(d.CompletedAt.Sub(j.CreatedAt).Seconds())
	case dispatch.StatusError:
		if exhausted {
			m.exhausted.Inc()
		}
	default:
		return
	}
	m.finished.WithLabelValues(string(status)).Inc()
}
