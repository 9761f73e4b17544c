// Package api is dispatch's HTTP API (gin): jobs, events and subscriptions, credentials, the internal
// processing endpoint, health and metrics. Handlers decode, call one method
// of the store or processor, and encode; errors are mapped to statuses and
// JSON in one place (writeError).
package api

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/net/netutil"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/tracing"
)

// Store is what the API needs from the job store.
type Store interface {
	CreateJob(ctx context.Context, j *dispatch.Job) (dispatch.Job, bool, error)
	CreateJobs(ctx context.Context, jobs []*dispatch.Job) ([]dispatch.Job, []bool, error)
	JobByKey(ctx context.Context, key string) (dispatch.Job, bool, error)
	GetJob(ctx context.Context, id int64) (dispatch.Job, error)
	SearchJobs(ctx context.Context, f dispatch.JobFilter, page, size int) ([]dispatch.Job, int, error)
	ListAttempts(ctx context.Context, jobID int64) ([]dispatch.Attempt, error)
	CancelJob(ctx context.Context, id int64) (dispatch.Job, error)
	ReplayJob(ctx context.Context, id int64) (dispatch.Job, error)
	ReplayJobs(ctx context.Context, f dispatch.JobFilter, limit int) (dispatch.ReplayResult, error)
	CreateCredentials(ctx context.Context, c *dispatch.Credentials) error
	GetCredentials(ctx context.Context, id int64) (dispatch.Credentials, error)
	GetCredentialsInfo(ctx context.Context, id int64) (dispatch.CredentialsInfo, error)
	DeleteCredentials(ctx context.Context, id int64) error
	RotateCredentials(ctx context.Context, id int64, secret string, grace time.Duration) (dispatch.Credentials, error)
	UpdateCredentials(ctx context.Context, id int64, name *string, targets *[]string) (dispatch.CredentialsInfo, error)
	CredentialsUsage(ctx context.Context, ids []int64) (map[int64]dispatch.CredentialsUsage, error)
	ListCredentials(ctx context.Context, page, size int) ([]dispatch.CredentialsInfo, int, error)
	CountReplayable(ctx context.Context, f dispatch.JobFilter) (int, error)
	Stats(ctx context.Context, to time.Time, window, bucket time.Duration) (dispatch.Stats, error)
	Backlog(ctx context.Context, now time.Time) (dispatch.Backlog, error)
	Storage(ctx context.Context) (dispatch.Storage, error)
	Routers(ctx context.Context) ([]dispatch.RouterReport, error)
	Ping(ctx context.Context) error
	CreateSubscription(ctx context.Context, sub *dispatch.Subscription) (dispatch.Subscription, error)
	GetSubscription(ctx context.Context, id int64) (dispatch.Subscription, error)
	SubscriptionHealth(ctx context.Context, ids []int64) (map[int64]dispatch.SubscriptionHealth, error)
	ListSubscriptions(ctx context.Context, f dispatch.SubscriptionFilter, page, size int) ([]dispatch.Subscription, int, error)
	UpdateSubscription(ctx context.Context, id int64, change func(*dispatch.Subscription) error) (dispatch.Subscription, error)
	SetSubscriptionStatus(ctx context.Context, id int64, status dispatch.SubscriptionStatus, reason string, from ...dispatch.SubscriptionStatus) (dispatch.Subscription, error)
	DeleteSubscription(ctx context.Context, id int64) error
	PublishEvent(ctx context.Context, e *dispatch.Event, data any) (dispatch.Event, bool, error)
	GetEvent(ctx context.Context, id int64) (dispatch.Event, error)
	SearchEvents(ctx context.Context, f dispatch.EventFilter, page, size int) ([]dispatch.Event, int, error)
	CreateAlertDestination(ctx context.Context, d *dispatch.AlertDestination) error
	ListAlertDestinations(ctx context.Context) ([]dispatch.AlertDestination, error)
	DeleteAlertDestination(ctx context.Context, id int64) error
	SessionStore
}

// Processor decides what happens to one message pointer.
type Processor interface {
	Process(ctx context.Context, ptr dispatch.Pointer) (dispatch.Decision, error)
}

// Config configures the API.
type Config struct {
	APITokens     []string
	AdminToken    string
	InternalToken string
	Insecure      bool
	MaxPayload    int64
	JobRules      dispatch.JobRules
	RotationGrace time.Duration
	Logger        *slog.Logger
	// QueuePing checks the queue for /health/ready (nil: not checked).
	QueuePing func(context.Context) error
	// Metrics serves /metrics (nil: not served).
	Metrics http.Handler
	// Verifier runs subscription handshakes (nil: /verify answers 503).
	Verifier Verifier
	// Breakers lists the circuit breakers open in this process (nil: none).
	Breakers func() []OpenBreaker
	// BreakerStates lists every target host's breaker in this process,
	// and ResetBreaker closes one (the router's monitoring; nil: none).
	BreakerStates func() []dispatch.BreakerState
	ResetBreaker  func(host string) bool
	// QueueDepth reads the message counts of the queue this API sends
	// pointers to (nil: not shown).
	QueueDepth func(context.Context) (QueueDepth, error)
	// ShutdownTimeout bounds how long in-flight requests may finish on stop.
	ShutdownTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included; a client
	// that stalls is cut off after it (0: DefaultReadTimeout).
	ReadTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long (0:
	// DefaultIdleTimeout).
	IdleTimeout time.Duration
	// MaxConns bounds the connections served at once; more wait to be
	// accepted (0: DefaultMaxConns).
	MaxConns int
	// PublicURL is the URL operators reach dispatch at; when it is https
	// the console's session cookie is Secure (behind a proxy that
	// terminates TLS, the request itself is plain http).
	PublicURL string
	// TrustedProxies are the proxies whose X-Forwarded-For (the client's
	// address) and X-Forwarded-Proto are believed; nil: none.
	TrustedProxies []netip.Prefix
	// Now is the clock (nil: time.Now); tests move it by hand.
	Now func() time.Time
	// Tracer records requests as server spans and the creates as the
	// spans whose trace their jobs' deliveries join (nil: tracing off).
	Tracer *tracing.Tracer
	// Offers hands new jobs' pointers to routers of other processes that
	// ask for them (nil: not offered; routers take them from the queue).
	Offers *handoff.Box
}

// Defaults of the connection limits.
const (
	DefaultReadTimeout = 30 * time.Second
	DefaultIdleTimeout = 60 * time.Second
	DefaultMaxConns    = 1024
)

// Server is the HTTP API.
type Server struct {
	cfg       Config
	store     Store
	processor Processor
	log       *slog.Logger
	engine    *gin.Engine
	metrics   *apiMetrics
	now       func() time.Time
	sessions  sessions
	// adminTokens is the admin token, hashed once (none: no admin token).
	adminTokens dispatch.Tokens
	console     *console
	signIns     *signInThrottle
	// publicHTTPS: DISPATCH_PUBLIC_URL is https.
	publicHTTPS bool
	publicHost  string // DISPATCH_PUBLIC_URL's host, for guardHost
}

// New returns a Server. processor may be nil (no processing endpoint).
// New jobs reach the outbox publisher through the store (its Handoff).
func New(store Store, processor Processor, cfg Config, reg metricsRegisterer) *Server {
	gin.SetMode(gin.ReleaseMode)
	if cfg.MaxPayload <= 0 {
		cfg.MaxPayload = 1 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, store: store, processor: processor,
		log: cfg.Logger.With("component", "api"), metrics: newAPIMetrics(reg), now: time.Now,
		sessions: sessions{db: store, token: []byte(cfg.AdminToken)}, adminTokens: dispatch.NewTokens(cfg.AdminToken), console: newConsole(), signIns: newSignInThrottle(), publicHTTPS: isHTTPS(cfg.PublicURL), publicHost: publicHost(cfg.PublicURL)}
	if cfg.Now != nil {
		s.now = cfg.Now
	}
	s.engine = s.routes()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// httpServer returns the server and listener Run serves with. Every
// connection is bounded: the whole request must arrive within ReadTimeout
// (a client announcing a body and stalling is cut off; it needs no token
// to try), an idle keep-alive connection closes after IdleTimeout, and at
// most MaxConns connections are served at once (more wait in the kernel's
// backlog until a slot frees).
func (s *Server) httpServer(ln net.Listener) (*http.Server, net.Listener) {
	read, idle, conns := s.cfg.ReadTimeout, s.cfg.IdleTimeout, s.cfg.MaxConns
	if read <= 0 {
		read = DefaultReadTimeout
	}
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	if conns <= 0 {
		conns = DefaultMaxConns
	}
	return &http.Server{
		Handler:           s.engine,
		ReadHeaderTimeout: min(10*time.Second, read),
		ReadTimeout:       read,
		IdleTimeout:       idle,
	}, netutil.LimitListener(ln, conns)
}

// Run serves on ln until ctx is cancelled, then lets in-flight requests
// finish for up to ShutdownTimeout.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	srv, ln := s.httpServer(ln)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	if s.cfg.Offers != nil {
		s.cfg.Offers.Close() // the routers' long polls answer now
	}
	timeout := s.cfg.ShutdownTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// The deadline passed: cut the stragglers off. Their jobs' claims
		// expire and are taken over, so stopping here loses nothing.
		s.log.Warn("shutdown deadline reached; closing remaining connections", "timeout", timeout.String())
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return nil
}

func (s *Server) routes() *gin.Engine {
	e := gin.New()
	s.trustProxies(e)
	e.HandleMethodNotAllowed = true
	// The logger and the request's span outside the recoverer, so that a
	// recovered panic is logged and traced with its 500 (and its span ends).
	e.Use(s.logRequests)
	if s.cfg.Tracer.Enabled() {
		e.Use(s.traceRequests)
	}
	e.Use(s.recoverer, s.checkQuery)
	if s.cfg.Insecure {
		e.Use(s.guardHost)
	}
	e.NoRoute(func(c *gin.Context) {
		s.writeError(c, dispatch.Errorf(dispatch.ENotFound, "no route %s %s", c.Request.Method, c.Request.URL.Path))
	})
	e.NoMethod(func(c *gin.Context) {
		s.writeErrorStatus(c, http.StatusMethodNotAllowed, dispatch.Errorf("method_not_allowed", "%s is not allowed here", c.Request.Method))
	})

	e.GET("/health/live", func(c *gin.Context) { writeJSON(c, http.StatusOK, gin.H{"status": "UP"}) })
	e.GET("/health/ready", s.ready)
	if s.cfg.Metrics != nil {
		e.GET("/metrics", gin.WrapH(s.cfg.Metrics))
	}

	e.GET("/api/openapi.json", s.openAPI)
	s.console.routes(e)
	e.GET("/api/console/session", s.currentSession)
	e.POST("/api/console/login", s.limitBody, s.login)
	e.POST("/api/console/logout", s.logout)

	jobs := e.Group("/api/dispatch", s.auth("api", dispatch.NewTokens(s.cfg.APITokens...)))
	jobs.GET("/stats", s.stats)
	jobs.GET("/monitoring", s.monitoring)
	jobs.GET("/storage", s.storage)
	jobs.GET("/backlog", s.backlog)
	jobs.POST("/jobs", s.limitBody, s.createJob)
	jobs.POST("/jobs/batch", s.limitBody, s.createJobs)
	jobs.GET("/jobs", s.searchJobs)
	jobs.POST("/jobs/replay", s.limitBody, s.replayJobs)
	jobs.GET("/jobs/:id", s.jobAction(http.StatusOK, Store.GetJob))
	jobs.GET("/jobs/:id/attempts", s.listAttempts)
	jobs.POST("/jobs/:id/cancel", s.jobAction(http.StatusOK, Store.CancelJob))
	jobs.POST("/jobs/:id/replay", s.jobAction(http.StatusCreated, Store.ReplayJob))

	jobs.POST("/subscriptions", s.limitBody, s.createSubscription)
	jobs.GET("/subscriptions", s.listSubscriptions)
	jobs.GET("/subscriptions/:id", s.getSubscription)
	jobs.PATCH("/subscriptions/:id", s.limitBody, s.subscriptionAction(s.patchSubscription))
	jobs.DELETE("/subscriptions/:id", s.deleteSubscription)
	jobs.POST("/subscriptions/:id/enable", s.limitBody, s.subscriptionAction(s.enableSubscription))
	jobs.POST("/subscriptions/:id/disable", s.limitBody, s.subscriptionAction(s.disableSubscription))
	jobs.POST("/subscriptions/:id/verify", s.limitBody, s.subscriptionAction(s.verifySubscription))
	jobs.POST("/events", s.limitBody, s.publishEvent)
	jobs.GET("/events", s.searchEvents)
	jobs.GET("/events/:id", s.getEvent)

	if s.processor != nil {
		internal := s.auth("internal", dispatch.NewTokens(s.cfg.InternalToken))
		e.POST("/api/dispatch/process", internal, s.limitBody, s.process)
		e.GET("/api/dispatch/process/circuit-breakers", internal, s.circuitBreakers)
		e.POST("/api/dispatch/process/circuit-breakers/:host/reset", internal, s.resetCircuitBreaker)
		if s.cfg.Offers != nil {
			e.POST("/api/dispatch/process/offers", internal, s.limitBody, s.offers)
			e.POST("/api/dispatch/process/offers/give-back", internal, s.limitBody, s.giveBack)
		}
	}

	admin := e.Group("/api/admin/dispatch", s.auth("admin", s.adminTokens))
	admin.POST("/credentials", s.limitBody, s.createCredentials)
	admin.GET("/credentials", s.listCredentials)
	admin.GET("/credentials/:id", s.getCredentials)
	admin.PATCH("/credentials/:id", s.limitBody, s.patchCredentials)
	admin.DELETE("/credentials/:id", s.deleteCredentials)
	admin.POST("/credentials/:id/rotate", s.limitBody, s.rotateCredentials)
	admin.POST("/alerts/destinations", s.limitBody, s.createAlertDestination)
	admin.GET("/alerts/destinations", s.listAlertDestinations)
	admin.DELETE("/alerts/destinations/:id", s.deleteAlertDestination)
	return e
}

func (s *Server) ready(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
	defer cancel()
	checks := gin.H{"database": "UP"}
	status := http.StatusOK
	if err := s.store.Ping(ctx); err != nil {
		checks["database"], status = "DOWN", http.StatusServiceUnavailable
	}
	if s.cfg.QueuePing != nil {
		checks["queue"] = "UP"
		if err := s.cfg.QueuePing(ctx); err != nil {
			checks["queue"], status = "DOWN", http.StatusServiceUnavailable
		}
	}
	checks["status"] = "UP"
	if status != http.StatusOK {
		checks["status"] = "DOWN"
	}
	writeJSON(c, status, checks)
}

// Route is one method and path the server serves, in OpenAPI's notation
// ({id}, not :id).
type Route struct{ Method, Path string }

// Routes lists the routes the server serves (the OpenAPI test compares them
// with the document).
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.engine.Routes() {
		parts := strings.Split(r.Path, "/")
		for i, p := range parts {
			if len(p) > 1 && (p[0] == ':' || p[0] == '*') {
				parts[i] = "{" + p[1:] + "}"
			}
		}
		out = append(out, Route{Method: r.Method, Path: strings.Join(parts, "/")})
	}
	return out
}
