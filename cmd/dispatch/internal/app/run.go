// Package app is the dispatch program: the commands (api, router, all,
// migrate, rekey, config, listen, version) and their wiring of config,
// store, mediator, router and API. cmd/dispatch's main only adds signals and
// the exit code, so the end-to-end suites in cmd/dispatch/e2e run the whole
// program in-process with Run.
package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/net/netutil"
	"golang.org/x/sync/errgroup"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/alert"
	"github.com/dispatchhq/dispatch/api"
	"github.com/dispatchhq/dispatch/config"
	"github.com/dispatchhq/dispatch/handoff"
	"github.com/dispatchhq/dispatch/mediator"
	"github.com/dispatchhq/dispatch/router"
	"github.com/dispatchhq/dispatch/router/outbox"
	"github.com/dispatchhq/dispatch/router/queue"
	"github.com/dispatchhq/dispatch/store"
)

// finishLinger lets the records of ungrouped deliveries arriving a few
// milliseconds apart share a transaction (store.Options.FinishLinger): at
// 200 a second, two or three per commit instead of one. Their webhooks are
// delivered by then; only their messages' deletes wait.
const finishLinger = 10 * time.Millisecond

// version is set at build time with -ldflags
// "-X github.com/dispatchhq/dispatch/cmd/dispatch/internal/app.version=...".
var version = "dev"

// Run is the whole program: args are the command line without the program
// name, environ the environment as os.Environ gives it. main only adds
// signals and the exit code.
func Run(ctx context.Context, args []string, environ []string, stdout, stderr io.Writer) error {
	getenv := envLookup(environ)
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage())
		return errors.New("no command given")
	}
	cmd, args := args[0], args[1:]
	switch {
	case cmd == "help" && len(args) > 0 && !wantsHelp(args):
		return printHelp(stdout, args[0])
	case cmd == "help" || cmd == "--help" || cmd == "-h":
		fmt.Fprintln(stdout, usage())
		return nil
	case wantsHelp(args):
		if err := printHelp(stdout, cmd); err != nil {
			fmt.Fprintln(stderr, usage())
			return err
		}
		return nil
	}
	switch cmd {
	case "version", "--version", "-v":
		printVersion(stdout)
		return nil
	case "config":
		return runConfig(args, environ, stdout)
	case "listen":
		return runListen(ctx, args, getenv, stdout, stderr)
	case "api", "router", "all", "migrate", "rekey":
	default:
		fmt.Fprintln(stderr, usage())
		return fmt.Errorf("unknown command %q", cmd)
	}
	overrides, err := settingFlags(args)
	if err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	environ = append(environ, overrides...) // flags override the environment
	getenv = envLookup(environ)
	cfg, err := config.LoadFor(cmd, getenv)
	if unknown := config.CheckUnknown(environ); unknown != nil {
		if err == nil {
			err = fmt.Errorf("invalid configuration:\n%w", unknown)
		} else {
			err = fmt.Errorf("%w\n%w", err, unknown) // one message, every problem
		}
	}
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	switch {
	case !config.Reads(cmd, "DISPATCH_NODE_ID"): // ids are made by the API alone
	case cfg.NodeIDDerived && !cfg.Insecure:
		log.Warn("DISPATCH_NODE_ID is not set; derived from host and pid. Set a distinct id (0-1023) per replica so ids never collide",
			"node_id", cfg.NodeID)
	default:
		log.Info("snowflake node", "node_id", cfg.NodeID)
	}
	if cfg.Insecure {
		log.Warn("DISPATCH_INSECURE=true: routes without configured tokens are open and secrets may be stored unencrypted; never use this in production")
	}
	// The SDK reads AWS_ENDPOINT_URL_SQS from the process environment; pass
	// it explicitly too, so Run honours the environment it is given.
	a := &app{cfg: cfg, log: log, stdout: stdout, reg: prometheus.NewRegistry(), sqsEndpoint: getenv("AWS_ENDPOINT_URL_SQS"), getenv: getenv}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	switch cmd {
	case "migrate":
		return a.migrate(ctx)
	case "rekey":
		return a.rekey(ctx)
	case "api":
		return a.run(ctx, true, false)
	case "router":
		return a.run(ctx, false, true)
	default:
		return a.run(ctx, true, true)
	}
}

// settingFlags turns --name=value (or --name value) into NAME=value
// environment entries: --http-addr :9090 is DISPATCH_HTTP_ADDR=:9090 and
// --database-url is DATABASE_URL. Every setting is a flag; no other is. A
// secret is refused as a flag (ps and shell history would show it), and so
// is a database URL with a password; an error never repeats a value.
func settingFlags(args []string) ([]string, error) {
	var out []string
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--")
		if !ok || name == "" {
			shown := args[i]
			if before, _, valued := strings.Cut(shown, "="); valued {
				shown = before + "=…"
			}
			return nil, fmt.Errorf("unexpected argument %q (settings are --name=value flags or DISPATCH_* variables)", shown)
		}
		name, value, hasValue := strings.Cut(name, "=")
		if !hasValue {
			if i+1 >= len(args) {
				return nil, fmt.Errorf("--%s needs a value", name)
			}
			i++
			value = args[i]
		}
		env := "DISPATCH_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if name == "database-url" {
			env = "DATABASE_URL"
		}
		if !config.IsSetting(env) {
			return nil, fmt.Errorf("unknown flag --%s (each DISPATCH_* setting is a flag: DISPATCH_HTTP_ADDR is --http-addr)", name)
		}
		if config.IsSecret(env) && (env != "DATABASE_URL" || config.MaskDatabaseURL(value) != value) {
			return nil, fmt.Errorf("--%s would put a secret where ps and shell history show it: set %s in the environment (or your orchestrator's secret store)", name, env)
		}
		out = append(out, env+"="+value)
	}
	return out, nil
}

func envLookup(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) string { return m[k] }
}

func newLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

type app struct {
	cfg    config.Config
	log    *slog.Logger
	stdout io.Writer
	reg    *prometheus.Registry
	// sqsEndpoint overrides the SDK's endpoint chain when set.
	sqsEndpoint string
	// getenv reads the run's environment (the OTEL_* variables).
	getenv func(string) string
}

func (a *app) openStore(ctx context.Context) (*pgxpool.Pool, *store.Store, error) {
	conns := int32(10)
	for _, p := range a.cfg.Pools {
		conns += int32(p.Concurrency)
	}
	pool, err := store.Connect(ctx, a.cfg.DatabaseURL, min(conns, 64))
	if err != nil {
		return nil, nil, err
	}
	sealer, err := store.NewSealer(a.cfg.EncryptionKey, a.cfg.PreviousEncryptionKey)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	st, err := store.New(pool, store.Options{NodeID: a.cfg.NodeID, Sealer: sealer,
		MaxFanout: a.cfg.MaxFanout, MaxFanoutBytes: a.cfg.MaxFanoutBytes, PartitionInterval: a.cfg.PartitionInterval,
		FinishLinger: finishLinger, Retention: a.cfg.Retention})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, st, nil
}

// waitForDatabase retries until PostgreSQL answers, so a process started
// before its database (compose, a reboot) comes up by itself. Each retry
// logs why it failed (connection refused, authentication failed, no such
// database and the command that creates it), and /health/ready says it.
func (a *app) waitForDatabase(ctx context.Context, pool *pgxpool.Pool, st *startup) error {
	backoff := 500 * time.Millisecond
	for {
		err := store.Explain(pool.Ping(ctx))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		reason := reasonOf(err)
		st.set("database", reason, err.Error())
		a.log.Warn("database not available yet ("+reason+"); retrying", "reason", reason, "err", err.Error(), "backoff", backoff.String())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

func (a *app) migrate(ctx context.Context) error {
	pool, _, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	done, err := store.ApplyMigrations(ctx, pool)
	if err != nil {
		return err
	}
	switch done.Applied {
	case 0:
		fmt.Fprintf(a.stdout, "schema is up to date (version %d)\n", done.Version)
	case 1:
		fmt.Fprintf(a.stdout, "applied 1 migration; schema at version %d\n", done.Version)
	default:
		fmt.Fprintf(a.stdout, "applied %d migrations; schema at version %d\n", done.Applied, done.Version)
	}
	return nil
}

func (a *app) rekey(ctx context.Context) error {
	if a.cfg.EncryptionKey == nil {
		return errors.New("rekey needs DISPATCH_ENCRYPTION_KEY, the new key (generate one with: openssl rand -base64 32), " +
			"and the old one, if any, as DISPATCH_ENCRYPTION_KEY_PREVIOUS")
	}
	pool, st, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	n, err := st.Reseal(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(a.stdout, "re-encrypted 0 secret values: every one is under DISPATCH_ENCRYPTION_KEY already "+
			"(to change the key, set the new one as DISPATCH_ENCRYPTION_KEY and the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS)")
	} else {
		fmt.Fprintf(a.stdout, "re-encrypted %d secret values under the current key\n", n)
	}
	// A replica still running with the old key as DISPATCH_ENCRYPTION_KEY
	// seals what it writes under it, during the run or after it: what is
	// left is counted now, and the operator runs rekey again before dropping
	// the old key.
	left, err := st.NeedingReseal(ctx)
	if err != nil {
		return err
	}
	if left > 0 {
		return fmt.Errorf("rekey: %d secret values were written under another key while it ran (a replica still running with the old key "+
			"as DISPATCH_ENCRYPTION_KEY?): keep DISPATCH_ENCRYPTION_KEY_PREVIOUS, restart every replica with the new key as "+
			"DISPATCH_ENCRYPTION_KEY and the old one as DISPATCH_ENCRYPTION_KEY_PREVIOUS, then run `dispatch rekey` again", left)
	}
	if a.cfg.PreviousEncryptionKey != nil {
		fmt.Fprintln(a.stdout, "0 left that need DISPATCH_ENCRYPTION_KEY_PREVIOUS: once every replica runs with "+
			"this DISPATCH_ENCRYPTION_KEY, it can be dropped")
	}
	return nil
}

// notePreviousKey says, when DISPATCH_ENCRYPTION_KEY_PREVIOUS is set, how
// many stored secret values still need it, so an operator knows whether
// dropping it is safe (0) or `dispatch rekey` is still to run.
func (a *app) notePreviousKey(ctx context.Context, st *store.Store) error {
	if a.cfg.PreviousEncryptionKey == nil {
		return nil
	}
	n, err := st.NeedingReseal(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		a.log.Warn("secret values are still sealed under DISPATCH_ENCRYPTION_KEY_PREVIOUS: once every replica runs with "+
			"this DISPATCH_ENCRYPTION_KEY, run `dispatch rekey`, and drop the previous key only once it reports 0 left",
			"sealed_under_previous", n)
		return nil
	}
	a.log.Info("no secret value needs DISPATCH_ENCRYPTION_KEY_PREVIOUS any more: once every replica runs with "+
		"this DISPATCH_ENCRYPTION_KEY, drop the previous key", "sealed_under_previous", 0)
	return nil
}

// run starts the API side, the router side, or both, and stops them in
// order on cancellation: the router first (its in-flight mediations still
// need the processing endpoint), then the API.
func (a *app) run(ctx context.Context, withAPI, withRouter bool) error {
	if a.cfg.CPUProfile != "" {
		stop, err := startCPUProfile(a.cfg.CPUProfile)
		if err != nil {
			return fmt.Errorf("DISPATCH_CPU_PROFILE: %w", err)
		}
		defer stop() //nolint:errcheck // the profile is all there is to lose
		a.log.Info("writing a CPU profile until the process stops", "file", a.cfg.CPUProfile)
	}
	// The ports are bound first: until the API and the router serve them,
	// the startup handler answers probes there (alive; not ready, and why).
	starting := &startup{}
	tracer, stopTracing, err := newTracer(ctx, a.getenv, version)
	if err != nil {
		return err
	}
	defer func() { // the last spans are sent before the process ends
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			a.log.Warn("could not send the last trace spans", "err", err)
		}
	}()
	if tracer.Enabled() {
		a.log.Info("tracing: OTLP/HTTP spans, configured by the OTEL_* variables")
	}
	// SIGHUP reloads the router configuration (onHangup); taken from here
	// on, before any port is announced.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var apiSock, routerSock *listenerHandoff
	if withAPI {
		ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("api listen %s: %w", a.cfg.HTTPAddr, err)
		}
		apiSock = newHandoff(ln)
		defer apiSock.Close()
	}
	if withRouter {
		ln, err := net.Listen("tcp", a.cfg.RouterAddr)
		if err != nil {
			return fmt.Errorf("router listen %s: %w", a.cfg.RouterAddr, err)
		}
		routerSock = newHandoff(ln)
		defer routerSock.Close()
	}
	var early []net.Listener
	for _, h := range []*listenerHandoff{apiSock, routerSock} {
		if h != nil {
			early = append(early, h.phase(false))
		}
	}
	stopStartup := starting.serve(early...)
	defer stopStartup()

	var st *store.Store
	if withAPI { // the router alone only reports to the database (routerReporter)
		pool, s, err := a.openStore(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		st = s
		if err := a.waitForDatabase(ctx, pool, starting); err != nil {
			return nil
		}
		if a.cfg.AutoMigrate {
			// With several replicas starting at once, one migrates and the
			// others wait here for its advisory lock.
			starting.set("migrations", "applying the schema (or waiting for another replica's migration lock)", "")
			a.log.Info("migrating the schema", "schema_version", store.MigrationsVersion())
			if err := store.Migrate(ctx, pool); err != nil {
				return err
			}
		}
		if err := store.CheckSchema(ctx, pool); err != nil {
			return err
		}
		if err := st.CheckKey(ctx); err != nil {
			return err
		}
		if err := a.notePreviousKey(ctx, st); err != nil {
			return err
		}
		// The partitions of now and ahead exist before the first create.
		// The rest of the upkeep (drops, index builds) runs beside the
		// service (RunHistory): its failure is logged and shown, and stops
		// no start.
		if _, err := st.EnsurePartitions(ctx, time.Now(), a.history().Interval); err != nil {
			return err
		}
	}
	queues, err := a.openQueues(ctx)
	if err != nil {
		return err
	}
	q := queues[0] // the default queue: jobs that name none go there
	stopStartup()  // from here on, the API and the router answer on their ports
	metrics := metricsHandler(a.reg)
	// Whether delivery falls behind: the backlog from the database (the
	// router alone has none) and the queue's depth, read at each scrape.
	// Scrapes close together share one read of each (sharedRead).
	var backlog func(context.Context, time.Time) (dispatch.Backlog, error)
	if st != nil {
		shared := sharedRead(scrapeShare, time.Now, func(ctx context.Context) (dispatch.Backlog, error) { return st.Backlog(ctx, time.Now()) })
		backlog = func(ctx context.Context, _ time.Time) (dispatch.Backlog, error) { return shared(ctx) }
	}
	if err := a.reg.Register(newBacklogCollector(backlog, sharedRead(scrapeShare, time.Now, totalDepth(queues)))); err != nil {
		return err
	}

	// With a router, the API outlives it (its in-flight mediations still
	// need the processing endpoint) and stops when it has stopped.
	apiParent := ctx
	if withRouter {
		apiParent = context.WithoutCancel(ctx)
	}
	apiCtx, stopAPI := context.WithCancel(apiParent)
	defer stopAPI()
	g, gctx := errgroup.WithContext(apiCtx)
	processURL := a.cfg.ProcessURL
	// In `all`, the router hands pointers to the processor in process unless
	// DISPATCH_PROCESS_URL names an endpoint explicitly.
	var local *mediator.Local
	// What jobs may name; a reload of the router configuration changes
	// its pools, and so does a change of the router's in `all`.
	routing := a.routing()
	var reloadRouter func() error       // the router's reload (nil: no router here)
	var procBreakers *mediator.Breakers // this process's deliveries' (nil: no API here)
	var publisher *outbox.Publisher     // nil: no API here
	if withAPI {
		ln := apiSock.phase(true)
		fmt.Fprintf(a.stdout, "api listening on %s\n", ln.Addr())
		if withRouter && !a.cfg.ProcessURLSet {
			processURL = "http://" + loopbackAddr(ln.Addr()) + "/api/dispatch/process"
		}
		dests := make([]outbox.Destination, len(queues))
		for i, rq := range queues {
			dests[i] = outbox.Destination{Key: a.cfg.Queues[i].Key(), Queue: rq}
		}
		publisher = outbox.New(q, st, outbox.Config{Destinations: dests,
			PoolCode: dispatch.DefaultPool, ProcessURL: processURL, RequeueAfter: a.cfg.RequeueAfter, Logger: a.log,
			Subscriptions: st, DisableAfter: a.cfg.SubscriptionDisableAfter,
		})
		st.HandOffTo(publisher) // new jobs' pointers go out with no outbox query
		// Routers of other processes may ask for new jobs' pointers
		// (handoff); a job one cannot finish comes back to the publisher.
		offers := handoff.NewBox(q.Name(), publisher.Requeue)
		publisher.OfferTo(offers)
		if err := registerOffers(a.reg, offers); err != nil {
			return err
		}
		sender := mediator.NewSender(mediator.SenderConfig{
			Timeout: a.cfg.DeliveryTimeout, UserAgent: "dispatch/" + version,
			Guard:  mediator.Guard{AllowPrivate: a.cfg.AllowPrivateTargets, Allowed: a.cfg.AllowedTargetCIDRs},
			Tracer: tracer,
		})
		breakers := mediator.NewBreakers(a.cfg.BreakerFailures, a.cfg.BreakerOpen)
		// Operational alerts: what this process sees (breakers, exhausted
		// retries, the backlog) is recorded in the database, and due alert
		// jobs are made there, once across replicas.
		alerts := alert.New(st, alert.Config{Window: a.cfg.AlertWindow, ExhaustedThreshold: a.cfg.AlertExhaustedThreshold,
			ExhaustedWindow: a.cfg.AlertExhaustedWindow, BacklogAge: a.cfg.AlertBacklogAge, Logger: a.log})
		breakers.OnChange(alerts.BreakerChanged)
		procBreakers = breakers
		if err := a.reg.Register(openBreakersGauge(breakers)); err != nil {
			return err
		}
		processor := mediator.NewProcessor(st, mediator.ProcessorConfig{
			Sender: sender, Breakers: breakers,
			Backoff:         dispatch.Backoff{Base: a.cfg.RetryBase, Max: a.cfg.RetryMax},
			DeliveryTimeout: a.cfg.DeliveryTimeout, Logger: a.log, Metrics: mediator.NewMetrics(a.reg),
			Tracer: tracer, TraceContext: st.TraceContext,
			Exhausted: alerts.Exhausted,
		})
		if withRouter && !a.cfg.ProcessURLSet {
			local = mediator.NewLocal(processor)
		}
		server := api.New(st, processor, api.Config{
			APITokens: a.cfg.APITokens, AdminToken: a.cfg.AdminToken, InternalToken: a.cfg.InternalToken,
			Insecure: a.cfg.Insecure, MaxPayload: a.cfg.MaxPayload, RotationGrace: a.cfg.RotationGrace,
			JobRules: dispatch.JobRules{AllowHTTP: a.cfg.AllowHTTPTargets || a.cfg.AllowPrivateTargets, Routing: routing},
			Logger:   a.log, QueuePing: q.Ping, Metrics: metrics, ShutdownTimeout: a.cfg.ShutdownTimeout,
			ReadTimeout: a.cfg.HTTPReadTimeout, IdleTimeout: a.cfg.HTTPIdleTimeout, MaxConns: a.cfg.HTTPMaxConns,
			Verifier:      mediator.NewVerifier(st, sender, a.log),
			Breakers:      openBreakers(breakers),
			BreakerStates: breakers.States, ResetBreaker: breakers.Reset,
			QueueDepth: queueDepth(q),
			PublicURL:  a.cfg.PublicURL, TrustedProxies: a.cfg.TrustedProxies,
			Tracer: tracer, Offers: offers,
		}, a.reg)
		g.Go(func() error { return server.Run(gctx, ln) })
		g.Go(func() error { return publisher.Run(gctx) })
		g.Go(func() error { return alerts.Run(gctx) })
		g.Go(func() error { return st.RunHistory(gctx, a.history(), a.log) })
		g.Go(func() error { st.WatchCredentials(gctx, a.log); return nil })
		if err := a.reg.Register(newStorageCollector(sharedRead(scrapeShare, time.Now, st.Storage))); err != nil {
			return err
		}
	}
	if withRouter {
		mediationTimeout := a.cfg.DeliveryTimeout + 30*time.Second
		pools := make([]router.PoolConfig, len(a.cfg.Pools))
		for i, p := range a.cfg.Pools {
			pools[i] = router.PoolConfig{Code: p.Code, Concurrency: p.Concurrency, RatePerMinute: p.RateLimitPerMinute}
		}
		remote := mediator.NewHTTP(processURL, a.cfg.InternalToken, mediationTimeout)
		remote.Tracer = tracer
		var med router.Mediator = remote
		if local != nil {
			med = local
		}
		sources := make([]router.Source, len(queues))
		for i, rq := range queues {
			sources[i] = router.Source{Queue: rq, Connections: a.cfg.Queues[i].Connections, VisibilityTimeout: a.cfg.Queues[i].VisibilityTimeout}
		}
		var offers router.Offers // split: new jobs straight from the API, beside the queue
		if local == nil && a.cfg.LocalDelivery {
			offers = remote
		}
		rt, err := router.New(nil, med, router.Config{
			Sources: sources, Pools: pools, DefaultPool: dispatch.DefaultPool, ReceiveWait: a.cfg.ReceiveWait,
			MediationTimeout: mediationTimeout, ShutdownTimeout: a.cfg.ShutdownTimeout,
			Logger: a.log, Registerer: a.reg, Tracer: tracer,
			AdminToken: a.cfg.AdminToken, Reload: a.reloadPools, Breakers: routerBreakers(local != nil, procBreakers, processURL, a.cfg.InternalToken),
			Offers: offers,
			PoolsChanged: func(pcs []router.PoolConfig) {
				codes := make([]string, len(pcs))
				for i, pc := range pcs {
					codes[i] = pc.Code
				}
				routing.SetPools(codes)
			},
		})
		if err != nil {
			return err
		}
		reloadRouter = rt.Reload
		if local != nil && a.cfg.LocalDelivery {
			// New jobs go to a pool here, when it has room, before the queue.
			publisher.DeliverLocally(rt)
		}
		// The router reports its pools to the database every few seconds,
		// where the API reads every router's (the console's Overview); its
		// last report, once it has stopped, says so.
		reporter, closeReporter, err := a.routerReporter(ctx, st)
		if err != nil {
			return err
		}
		defer closeReporter()
		reportsCtx, stopReports := context.WithCancel(context.WithoutCancel(ctx))
		defer stopReports()
		host, _ := os.Hostname()
		g.Go(func() error { return rt.RunReports(reportsCtx, reporter, router.NewReportID(host), host, version) })
		routerHTTP := routerSock.phase(true)
		fmt.Fprintf(a.stdout, "router listening on %s\n", routerHTTP.Addr())
		// The router stops on the signal, or when anything else in the
		// process has failed (gctx), and then lets the API stop.
		routerCtx, stopRouter := context.WithCancel(ctx)
		defer stopRouter()
		context.AfterFunc(gctx, stopRouter)
		routerDone := make(chan struct{})
		g.Go(func() error {
			defer close(routerDone)
			defer stopAPI()
			defer stopReports()
			return rt.Run(routerCtx)
		})
		// Bounded like the API's listener: slow or idle clients are cut
		// off and connections are limited.
		// In `all` the one registry is served once, on the API's
		// listener: served on both, a scrape of both would count every
		// series twice. The router alone serves its own.
		routerMetrics := metrics
		if withAPI {
			routerMetrics = nil
		}
		srv := &http.Server{Handler: rt.Handler(routerMetrics), ReadHeaderTimeout: min(10*time.Second, a.cfg.HTTPReadTimeout),
			ReadTimeout: a.cfg.HTTPReadTimeout, IdleTimeout: a.cfg.HTTPIdleTimeout}
		routerHTTP = netutil.LimitListener(routerHTTP, a.cfg.HTTPMaxConns)
		g.Go(func() error {
			go func() {
				<-routerDone
				_ = srv.Shutdown(context.Background())
			}()
			if err := srv.Serve(routerHTTP); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	// SIGHUP reads the router configuration file again.
	g.Go(func() error { a.onHangup(gctx, hup, reloadRouter, routing); return nil })
	g.Go(func() error {
		select {
		case <-ctx.Done():
			a.log.Info("stopping: finishing the work in progress; a second signal ends the process at once",
				"timeout", a.cfg.ShutdownTimeout.String())
		case <-gctx.Done():
		}
		return nil
	})
	err = g.Wait()
	a.log.Info("stopped")
	return err
}

// openQueues opens the configured queues, the default first, each through
// its own endpoint when the configuration names one. None is contacted
// yet: a queue that is missing or failing is retried by whatever uses it,
// without holding up the others.
func (a *app) openQueues(ctx context.Context) ([]*queue.Queue, error) {
	out := make([]*queue.Queue, len(a.cfg.Queues))
	for i, cq := range a.cfg.Queues {
		vis := cq.VisibilityTimeout
		if vis == 0 {
			vis = a.cfg.DeliveryTimeout + 30*time.Second // a queue it creates outlasts a mediation
		}
		name := cq.Name
		if cq.URL != "" {
			name = "" // used as is
		}
		q, err := queue.Open(ctx, queue.Config{URL: cq.URL, Name: name,
			Create: a.cfg.QueueCreate, Endpoint: cmp.Or(cq.Endpoint, a.sqsEndpoint), CallTimeout: a.cfg.SQSTimeout, VisibilityTimeout: vis})
		if err != nil {
			return nil, err
		}
		out[i] = q
	}
	return out, nil
}

// routing is what jobs may name: the configured queues and pools.
func (a *app) routing() *dispatch.Routing {
	queues := make([]dispatch.RouteQueue, len(a.cfg.Queues))
	for i, q := range a.cfg.Queues {
		queues[i] = dispatch.RouteQueue{Key: q.Key(), Name: q.Name, ByName: q.URL == ""}
	}
	pools := make([]string, len(a.cfg.Pools))
	for i, p := range a.cfg.Pools {
		pools[i] = p.Code
	}
	return dispatch.NewRouting(queues, pools)
}

// routerBreakers are the circuit breakers the router's listener shows:
// this process's when it delivers in process, else the API's that the
// processing URL reaches.
func routerBreakers(inProcess bool, b *mediator.Breakers, processURL, token string) router.Breakers {
	if inProcess {
		return localBreakers{b}
	}
	return newRemoteBreakers(processURL, token)
}

// reloadPools reads the pools of the router configuration file again (the
// router's Reload). Queues changed in the file are only reported: they take
// effect at the next start.
func (a *app) reloadPools() ([]router.PoolConfig, error) {
	path := a.getenv("DISPATCH_ROUTER_CONFIG")
	if path == "" {
		return nil, errors.New("nothing to reload: the pools come from DISPATCH_POOLS, not from a DISPATCH_ROUTER_CONFIG file")
	}
	pools, queues, err := config.ReadRouterFile(path)
	if err != nil {
		return nil, err
	}
	if queues != nil && !slices.Equal(queues, a.cfg.Queues) {
		a.log.Warn("the file's queues differ from those in use; queue changes take effect at the next start", "file", path)
	}
	out := make([]router.PoolConfig, len(pools))
	for i, p := range pools {
		out[i] = router.PoolConfig{Code: p.Code, Concurrency: p.Concurrency, RatePerMinute: p.RateLimitPerMinute}
	}
	return out, nil
}

// onHangup reloads the router configuration's pools on each SIGHUP until
// ctx ends: the router's change in place (reloadRouter, which also tells
// routing), or, in an API alone, the pools jobs may name.
// hup is subscribed before the process announces its ports, so that a
// SIGHUP sent once it is up never meets the default action (exit).
func (a *app) onHangup(ctx context.Context, hup <-chan os.Signal, reloadRouter func() error, routing *dispatch.Routing) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		a.log.Info("SIGHUP: reading the router configuration's pools again")
		err := error(nil)
		if reloadRouter != nil {
			err = reloadRouter()
		} else {
			var pcs []router.PoolConfig
			if pcs, err = a.reloadPools(); err == nil {
				codes := make([]string, len(pcs))
				for i, pc := range pcs {
					codes[i] = pc.Code
				}
				routing.SetPools(codes)
				a.log.Info("the pools jobs may name changed", "pools", strings.Join(codes, ","))
			}
		}
		if err != nil {
			a.log.Error("reload failed; the pools are as they were", "err", err)
		}
	}
}

// totalDepth reads every queue's depth and adds them up: the queue gauges
// count what waits on all of them (/monitoring/queues has each).
func totalDepth(queues []*queue.Queue) func(context.Context) (queue.Depth, error) {
	return func(ctx context.Context) (queue.Depth, error) {
		var sum queue.Depth
		for _, q := range queues {
			d, err := q.Depth(ctx)
			if err != nil {
				return queue.Depth{}, fmt.Errorf("%s: %w", q.Name(), err)
			}
			sum.Visible, sum.InFlight, sum.Delayed = sum.Visible+d.Visible, sum.InFlight+d.InFlight, sum.Delayed+d.Delayed
		}
		return sum, nil
	}
}

// loopbackAddr turns a wildcard listener address into one to dial.
func loopbackAddr(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		if ok {
			return fmt.Sprintf("127.0.0.1:%d", tcp.Port)
		}
	}
	return addr.String()
}

// routerReporter is where the router reports its pools: the API's store
// in `all`; for the router alone, a store of its own on DATABASE_URL (a
// small pool, never migrated nor waited for: the router delivers without
// the database, and a report that fails is tried again at the next tick).
func (a *app) routerReporter(ctx context.Context, st *store.Store) (router.Reporter, func(), error) {
	if st != nil {
		return st, func() {}, nil
	}
	pool, err := store.Connect(ctx, a.cfg.DatabaseURL, 2)
	if err != nil {
		return nil, nil, err
	}
	sealer, err := store.NewSealer(nil, nil) // reports hold no secret
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	reports, err := store.New(pool, store.Options{NodeID: a.cfg.NodeID, Sealer: sealer})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return reports, pool.Close, nil
}

// queueDepth reads q's message counts for the console's backlog.
func queueDepth(q *queue.Queue) func(context.Context) (api.QueueDepth, error) {
	return func(ctx context.Context) (api.QueueDepth, error) {
		d, err := q.Depth(ctx)
		if err != nil {
			return api.QueueDepth{}, err
		}
		return api.QueueDepth{Name: q.Name(), Visible: d.Visible, InFlight: d.InFlight, Delayed: d.Delayed}, nil
	}
}

func openBreakers(b *mediator.Breakers) func() []api.OpenBreaker {
	return func() []api.OpenBreaker {
		open := b.Open()
		out := make([]api.OpenBreaker, len(open))
		for i, h := range open {
			out[i] = api.OpenBreaker{Host: h.Host, OpenUntil: h.Until}
		}
		return out
	}
}

// history is the partition upkeep's configuration.
func (a *app) history() store.History {
	return store.History{Interval: a.cfg.PartitionInterval, Retention: a.cfg.Retention}
}
