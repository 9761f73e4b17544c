package mediator

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the delivery metrics.
type Metrics struct {
	attempts        *prometheus.CounterVec
	duration        prometheus.Histogram
	breakerRejected prometheus.Counter
	rateLimited     prometheus.Counter
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
	}
}

func (m *Metrics) observe(d Delivery) {
	m.attempts.WithLabelValues(string(d.Status)).Inc()
	m.duration.Observe(d.CompletedAt.Sub(d.StartedAt).Seconds())
}
