package router

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/dispatchhq/dispatch"
)

type metrics struct {
	received   prometheus.Counter
	duplicates prometheus.Counter
	local      prometheus.Counter
	// localRequeued: pointers taken in process that went onto the queue
	// after all, by reason (retry, stop, backstop, no_room).
	localRequeued *prometheus.CounterVec
	// deleteFailures: finished messages whose delete failed.
	deleteFailures prometheus.Counter
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
		local: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_router_messages_local_total",
			Help: "Pointers of new jobs taken straight into a pool, without the queue: from this process (dispatch all) or offered by the API (split mode).",
		}),
		localRequeued: f.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatch_router_local_requeued_total",
			Help: "Jobs taken in process whose pointers went onto the queue after all: retry (sent when due), stop (the router stopped), backstop (waited 500 ms for a worker), no_room (offered by the API after the room had gone).",
		}, []string{"reason"}),
		deleteFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_router_delete_failures_total",
			Help: "Finished messages whose delete failed (after its retries): each comes back when its visibility ends, holding its group until then, and is acknowledged again.",
		}),
		duplicates: f.NewCounter(prometheus.CounterOpts{
			Name: "dispatch_router_duplicates_total", Help: "Redelivered copies of messages already in flight, not mediated again.",
		}),
	}
	reg.MustRegister(poolCollector{r})
	return m
}

// poolCollector reports every pool's counters and gauges at each scrape,
// the pools as they are then (they change without a restart).
type poolCollector struct{ r *Router }

var (
	poolSucceeded = prometheus.NewDesc("dispatch_router_mediations_succeeded_total", "Mediations answered done.", []string{"pool"}, nil)
	poolRetried   = prometheus.NewDesc("dispatch_router_mediations_retried_total", "Mediations answered retry-after.", []string{"pool"}, nil)
	poolFailed    = prometheus.NewDesc("dispatch_router_mediations_failed_total", "Mediations that got no usable answer.", []string{"pool"}, nil)
	poolInFlight  = prometheus.NewDesc("dispatch_router_in_flight", "Mediations in flight.", []string{"pool"}, nil)
	poolBuffered  = prometheus.NewDesc("dispatch_router_buffered", "Messages received and waiting for a slot.", []string{"pool"}, nil)
	poolConc      = prometheus.NewDesc("dispatch_router_concurrency", "Mediations the pool may run at once (in flight / concurrency is its saturation).", []string{"pool"}, nil)
)

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolSucceeded, poolRetried, poolFailed, poolInFlight, poolBuffered, poolConc} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.r.Stats() {
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{poolSucceeded, prometheus.CounterValue, float64(s.Succeeded)},
			{poolRetried, prometheus.CounterValue, float64(s.Retried)},
			{poolFailed, prometheus.CounterValue, float64(s.Failed)},
			{poolInFlight, prometheus.GaugeValue, float64(s.InFlight)},
			{poolBuffered, prometheus.GaugeValue, float64(s.Buffered)},
			{poolConc, prometheus.GaugeValue, float64(s.Concurrency)},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, s.Code)
		}
	}
}

// Handler serves the router's own listener: /health/live, /health/ready,
// /monitoring/pools, /monitoring/queues, /monitoring/in-flight,
// /monitoring/warnings, /monitoring/circuit-breakers, and, with the admin
// token, PUT /monitoring/pools/{code}, POST /monitoring/reload and POST
// /monitoring/circuit-breakers/{host}/reset; metrics is mounted at
// /metrics when not nil.
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
	mux.HandleFunc("GET /monitoring/in-flight", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.InFlight())
	})
	mux.HandleFunc("GET /monitoring/warnings", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.Warnings())
	})
	mux.HandleFunc("GET /monitoring/circuit-breakers", func(w http.ResponseWriter, req *http.Request) {
		if r.cfg.Breakers == nil {
			writeError(w, http.StatusServiceUnavailable, dispatch.EUnavailable, "no circuit breakers are known to this router")
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		states, err := r.cfg.Breakers.States(ctx)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, dispatch.EUnavailable, "the circuit breakers cannot be read: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, breakerStats(states))
	})
	mux.HandleFunc("POST /monitoring/circuit-breakers/{host}/reset", r.admin(func(w http.ResponseWriter, req *http.Request) {
		if r.cfg.Breakers == nil {
			writeError(w, http.StatusServiceUnavailable, dispatch.EUnavailable, "no circuit breakers are known to this router")
			return
		}
		host := req.PathValue("host")
		ctx, cancel := context.WithTimeout(req.Context(), 3*time.Second)
		defer cancel()
		ok, err := r.cfg.Breakers.Reset(ctx, host)
		switch {
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, dispatch.EUnavailable, "the circuit breaker cannot be reset: "+err.Error())
		case !ok:
			writeError(w, http.StatusNotFound, dispatch.ENotFound, "no circuit breaker for "+host)
		default:
			r.log.Info("circuit breaker reset", "host", host)
			writeJSON(w, http.StatusOK, map[string]any{"host": host, "state": dispatch.BreakerClosed})
		}
	}))
	mux.HandleFunc("PUT /monitoring/pools/{code}", r.admin(r.putPool))
	mux.HandleFunc("POST /monitoring/reload", r.admin(func(w http.ResponseWriter, _ *http.Request) {
		if err := r.Reload(); err != nil {
			writeError(w, http.StatusBadRequest, dispatch.EInvalid, "the pools were not changed: "+err.Error())
			return
		}
		writeJSON(w, http.StatusOK, r.Stats())
	}))
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	return mux
}

// admin lets a request through when it carries the admin token (any
// request when none is configured: local use without tokens).
func (r *Router) admin(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if len(r.adminToken) > 0 {
			// As the API checks it (dispatch.Tokens).
			token, ok := dispatch.BearerToken(req.Header.Get("Authorization"))
			if !ok || !r.adminToken.Match(token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="dispatch router"`)
				writeError(w, http.StatusUnauthorized, dispatch.EUnauthorized, "the admin token (DISPATCH_ADMIN_TOKEN) is required")
				return
			}
		}
		next(w, req)
	}
}

// putPool sets a pool's concurrency and rate limit, or adds the pool:
// {"concurrency": n, "rateLimitPerMinute": m}. An existing pool keeps what
// the body leaves out; a new one needs its concurrency.
func (r *Router) putPool(w http.ResponseWriter, req *http.Request) {
	code := req.PathValue("code")
	var body struct {
		Concurrency   *int `json:"concurrency"`
		RatePerMinute *int `json:"rateLimitPerMinute"`
	}
	dec := json.NewDecoder(io.LimitReader(req.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, dispatch.EInvalid, "the body must be {\"concurrency\": n, \"rateLimitPerMinute\": m}: "+err.Error())
		return
	}
	pc := PoolConfig{Code: code}
	for _, cur := range r.PoolConfigs() {
		if cur.Code == code {
			pc = cur
		}
	}
	if body.Concurrency != nil {
		pc.Concurrency = *body.Concurrency
	}
	if body.RatePerMinute != nil {
		pc.RatePerMinute = *body.RatePerMinute
	}
	st, err := r.SetPool(pc)
	if err != nil {
		writeError(w, http.StatusBadRequest, dispatch.EInvalid, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// writeError answers with the API's error shape.
func writeError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
