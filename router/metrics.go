package router

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	received   prometheus.Counter
	duplicates prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, r *Router) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	f := promauto.With(reg)
	m := &metrics{
		received: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_router_messages_received_total", Help: "Messages received from the queue.",
		}),
		duplicates: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_router_duplicates_total", Help: "Redelivered copies of messages already in flight, not mediated again.",
		}),
	}
	for _, p := range r.order {
		labels := prometheus.Labels{"pool": p.code}
		f.NewCounterFunc(prometheus.CounterOpts{Name: "dispatch_router_mediations_succeeded_total", Help: "Mediations answered done.", ConstLabels: labels},
			func() float64 { return float64(p.succeeded.Load()) })
		f.NewCounterFunc(prometheus.CounterOpts{Name: "dispatch_router_mediations_retried_total", Help: "Mediations answered retry-after.", ConstLabels: labels},
			func() float64 { return float64(p.retried.Load()) })
		f.NewCounterFunc(prometheus.CounterOpts{Name: "dispatch_router_mediations_failed_total", Help: "Mediations that got no usable answer.", ConstLabels: labels},
			func() float64 { return float64(p.failed.Load()) })
		f.NewGaugeFunc(prometheus.GaugeOpts{Name: "dispatch_router_in_flight", Help: "Mediations in flight.", ConstLabels: labels},
			func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return float64(p.inFlight) })
		f.NewGaugeFunc(prometheus.GaugeOpts{Name: "dispatch_router_buffered", Help: "Messages received and waiting for a slot.", ConstLabels: labels},
			func() float64 { r.mu.Lock(); defer r.mu.Unlock(); return float64(p.buffered) })
		f.NewGaugeFunc(prometheus.GaugeOpts{Name: "dispatch_router_concurrency", Help: "Mediations the pool may run at once (in flight / concurrency is its saturation).", ConstLabels: labels},
			func() float64 { return float64(p.concurrency) })
	}
	return m
}

// Handler serves the router's own listener: /health/live, /health/ready,
// /monitoring/pools, /monitoring/queues; metrics is mounted at /metrics
// when not nil.
func (r *Router) Handler(metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "UP"})
	})
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, _ *http.Request) {
		// Ready when every queue answers; the queues say which do not.
		ready, queues := r.Readiness()
		status, code := "UP", http.StatusOK
		if !ready {
			status, code = "DOWN", http.StatusServiceUnavailable
		}
		writeJSON(w, code, map[string]any{"status": status, "queues": queues})
	})
	mux.HandleFunc("GET /monitoring/pools", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.Stats())
	})
	mux.HandleFunc("GET /monitoring/queues", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		writeJSON(w, http.StatusOK, r.Queues(ctx))
	})
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
