// Package store keeps dispatch's jobs, attempts and credentials in
// PostgreSQL. It owns the schema (embedded, versioned migrations), turns pgx
// errors into dispatch errors, and holds the few transactions that make the
// delivery pipeline safe: create-with-idempotency, claim, finish, publish.
package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/snowflake"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"
	"github.com/patrickmn/go-cache"

	"github.com/dispatchhq/dispatch"
	"github.com/dispatchhq/dispatch/config"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configure a Store.
type Options struct {
	NodeID int64   // snowflake node, 0–1023
	Sealer *Sealer // seals credential secrets at rest
	// CredentialsTTL bounds how long a replica keeps credentials cached
	// (default a minute). A change drops the copies of the replica that
	// made it at once, and of the others as it commits (WatchCredentials).
	CredentialsTTL time.Duration
	// SendLease is how long a job may stay marked queued before its send is
	// confirmed; past it the sweep sends it again (the marking process died
	// between the mark and the send). 0 means DefaultSendLease.
	SendLease time.Duration
	// PartitionInterval is the width of the time partitions the store
	// creates when an insert finds none (0: DefaultPartitionInterval); the
	// service's upkeep (MaintainHistory) creates them ahead of time.
	PartitionInterval time.Duration
	// FinishLinger is how long the record of an ungrouped job's attempt
	// that finds no other record to share its transaction with waits for
	// one (0: not at all). Its delivery is done by then; only its
	// message's delete and its pool slot wait. Grouped jobs never wait.
	FinishLinger time.Duration
	// NewID, when set, replaces the snowflake node as the source of ids
	// (tests give two stores skewed clocks with it).
	NewID func() int64
	// MaxFanout caps the ACTIVE subscriptions one event may match (0:
	// DefaultMaxFanout), and MaxFanoutBytes the event's data times its
	// matches (0: DefaultMaxFanoutBytes). PublishEvent refuses an event
	// beyond either and stores nothing.
	MaxFanout      int
	MaxFanoutBytes int64
	// Retention is DISPATCH_RETENTION (0: keep everything): a redrive
	// leaves the jobs older than it alone.
	Retention time.Duration
}

// Default caps of one event's fan-out: every job holds a copy of the
// event's data, all written in one transaction.
const (
	DefaultMaxFanout      = 1000
	DefaultMaxFanoutBytes = 256 << 20
)

// DefaultSendLease bounds how long a job marked queued may wait for its
// send to be confirmed. It is longer than any one SQS call may take.
const DefaultSendLease = 30 * time.Second

// Store is the PostgreSQL repository.
type Store struct {
	pool   *pgxpool.Pool
	newID  func() int64
	sealer *Sealer
	creds  *cache.Cache
	// credsMu and credsGen keep a cache miss from storing what it read
	// once an invalidation has run since: a miss notes the generation
	// before it reads, and stores only if it has not moved.
	credsMu  sync.Mutex
	credsGen uint64
	// credsWatched: WatchCredentials runs, and the cache is used only
	// while credsLive, its connection listening.
	credsWatched, credsLive atomic.Bool

	// afterCredentialsRead runs between a cache miss's read and its cache
	// write (tests only: it lets a test put an invalidation in between).
	afterCredentialsRead func()
	// beforeKeyLookup runs before a create looks up the jobs holding the
	// idempotency keys it found taken; an error fails the look-up (tests
	// only: a failure after the insert committed).
	beforeKeyLookup func() error

	finishes groupCommit[finishReq, bool]      // FinishAttempt's group commit
	claims   groupCommit[claimReq, claimRes]   // ClaimJob's fast path, likewise
	creates  groupCommit[createReq, createRes] // CreateJob's insert, likewise

	fresh freshJobs  // jobs handed over a moment ago: their claims are deferred
	lost  lostClaims // claims committed whose answer was lost, not yet recognised

	handoff Handoff // nil: every new job goes through the outbox query

	idMu sync.Mutex // pairs a create statement's time with its ids

	sendLease         time.Duration
	partitionInterval time.Duration
	retention         time.Duration

	maxFanout      int   // ACTIVE subscriptions one event may match
	maxFanoutBytes int64 // the event's data times its matches
}

// Handoff takes the pointers of new jobs straight after their commit, so
// that they need no outbox query and no second write to be marked queued:
// such jobs are inserted already marked (queued_at = their creation time,
// under a send lease). Should a handed pointer not be sent, the taker clears
// the mark (Unmark) and the outbox sends it; should the process die first,
// the lease runs out and the sweep sends it. The router's Publisher is one.
type Handoff interface {
	// Reserve takes room for up to n pointers before the insert, and
	// reports whether there was any: the taker bounds what waits in it.
	Reserve(n int) bool
	// Hand takes committed jobs' pointers, in creation order, and gives
	// back the room reserved for them (all of it, also when jobs is
	// shorter or empty).
	Hand(jobs []dispatch.Unsent, reserved int)
	// Notify asks for an outbox pass: jobs were committed that no hand-off
	// took (scheduled, beyond the room, grouped, made by a replay or an
	// event's fan-out), or a group moved on, so that its next job is due.
	// The store calls it after each such commit; it is the publisher's one
	// way to learn of new work besides its timer.
	Notify()
}

// notify asks the Handoff, if any, for an outbox pass (Handoff.Notify).
func (s *Store) notify() {
	if s.handoff != nil {
		s.handoff.Notify()
	}
}

// HandOffTo makes h take the pointers of jobs created from now on. Call it
// before the store is used concurrently.
func (s *Store) HandOffTo(h Handoff) { s.handoff = h }

// New returns a Store over an open pool.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	node, err := snowflake.NewNode(opts.NodeID)
	if err != nil {
		return nil, fmt.Errorf("store: snowflake node %d: %w", opts.NodeID, err)
	}
	if opts.Sealer == nil {
		return nil, errors.New("store: a Sealer is required")
	}
	ttl := opts.CredentialsTTL
	if ttl == 0 {
		ttl = time.Minute
	}
	// No janitor goroutine (cleanup interval 0): it would outlive the
	// Store with no owner. Expired entries are never served, and there are
	// only as many as there are credentials.
	s := &Store{pool: pool, newID: func() int64 { return node.Generate().Int64() }, sealer: opts.Sealer,
		creds: cache.New(ttl, 0), sendLease: cmp.Or(opts.SendLease, DefaultSendLease),
		partitionInterval: cmp.Or(opts.PartitionInterval, DefaultPartitionInterval), retention: opts.Retention,
		maxFanout: cmp.Or(opts.MaxFanout, DefaultMaxFanout), maxFanoutBytes: cmp.Or(opts.MaxFanoutBytes, DefaultMaxFanoutBytes)}
	if opts.NewID != nil {
		s.newID = opts.NewID
	}
	// Past its send lease a handed job may be sent again by the sweep, and
	// that copy claimed elsewhere: the deferred claim ends before it.
	s.fresh.ttl = min(freshTTL, s.sendLease)
	s.finishes = groupCommit[finishReq, bool]{max: 64, exec: s.finishBatch,
		linger: opts.FinishLinger, mayWait: func(r finishReq) bool { return !r.o.Grouped }, wake: make(chan struct{}, 1)}
	s.claims = groupCommit[claimReq, claimRes]{max: 64, exec: s.claimBatch}
	s.creates = groupCommit[createReq, createRes]{max: 100, exec: s.createBatch}
	return s, nil
}

// Connect opens a pgx pool. Unless DATABASE_URL sets pool_max_conns, the
// pool holds up to minConns connections: pgx's default (4 on two cores)
// would make a pool of 20 deliveries queue for connections. Each connection
// plans as deliveryPlans says.
func Connect(ctx context.Context, url string, minConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("store: parse DATABASE_URL: %w", parseError(url, err))
	}
	if !strings.Contains(url, "pool_max_conns") && cfg.MaxConns < minConns {
		cfg.MaxConns = minConns
	}
	set := deliveryPlans(cfg.ConnConfig)
	if _, named := cfg.ConnConfig.RuntimeParams["statement_timeout"]; !named {
		// No statement of the service runs for long; one that does (a lock
		// wait, a plan gone wrong) fails instead of holding a connection.
		set = strings.TrimPrefix(set+"; SET statement_timeout = "+strconv.Itoa(int(StatementTimeout.Milliseconds())), "; ")
	}
	if _, named := cfg.ConnConfig.RuntimeParams["jit"]; !named {
		// No statement of the service reads enough rows for compiled
		// expressions to pay back their compilation, and with sequential
		// scans off (deliveryPlans) every plan that scans a small table
		// (a router's report every 5 s, the partition list, the alert
		// windows) is costed past jit_above_cost: PostgreSQL compiled each
		// one, 80-770 ms of CPU for a statement over a few rows, most of
		// the server's CPU at 200 deliveries a second.
		set = strings.TrimPrefix(set+"; SET jit = off", "; ")
	}
	if set != "" {
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, set)
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", redactErr(err))
	}
	return pool, nil
}

// StatementTimeout bounds every statement on the service's connections
// unless DATABASE_URL sets statement_timeout.
const StatementTimeout = 30 * time.Second

// deliveryPlans returns the SET statements that make a connection plan each
// statement once, for the delivery path:
//
//	plan_cache_mode = force_generic_plan
//	enable_seqscan = off
//
// Every statement the pipeline runs (create, publish, claim, finish, fan
// out, and the lookups by key around them) finds its rows through an index.
// pgx prepares each once per connection; with these settings PostgreSQL
// plans it once too, and reuses the plan on every run.
//
// Both are needed. A generic plan is costed against the table as it is when
// it is made and kept until the next ANALYZE. Made while dispatch_job was
// small (a new deployment, autovacuum's first minute), the finish's generic
// plan joined each batch to a sequential scan of the whole table, and kept
// doing so as the table grew: 1,612 scans reading 24.5M rows in one
// 50,000-job bench run (TestHotStatementsKeepPrimaryKeyPlansAsTheTableGrows).
// With sequential scans off, a plan made on an empty table reads by key.
// So they go together: when DATABASE_URL names either, neither is set, and
// the URL's settings (with PostgreSQL's defaults for the rest) apply.
//
// They are set only in pgx's default mode, which prepares each statement
// once per connection (default_query_exec_mode=cache_statement). In the
// other modes statements are unnamed or their values inlined, so each run
// is planned for its arguments anyway, and a forced generic plan would only
// plan worse.
//
// Planning every statement for its arguments instead (force_custom_plan)
// is as safe but costs a planning pass per statement: under full load it
// was 23 % of PostgreSQL's CPU on a 2-core machine, 0.04-0.05 ms per
// delivery.
//
// The console's searches, counts and statistics filter on whatever an
// operator asks for, where a sequential scan or a plan for the arguments
// can be the right one: they run through browse, which restores
// PostgreSQL's own planning for their transaction.
func deliveryPlans(cfg *pgx.ConnConfig) string {
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return ""
	}
	for _, name := range []string{"plan_cache_mode", "enable_seqscan"} {
		if _, named := cfg.RuntimeParams[name]; named {
			return ""
		}
	}
	return "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off"
}

// SchemaVersion identifies the embedded migrations: a short hash of their
// names and contents. Test harnesses key cached template databases by it, so
// a checkout with other migrations never reuses a template made by another.
func SchemaVersion() string {
	h := sha256.New()
	_ = fs.WalkDir(migrations, "migrations", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := migrations.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Migrate applies the embedded migrations under tern's advisory lock, so
// several processes starting at once migrate exactly once: the others wait
// for the lock, then find nothing left to do. A binary older than the
// database's schema gets a *SchemaError.
//
// They run on a connection of their own, closed afterwards, not one of the
// pool's: tern ends each migration with RESET ALL, which sent that pool
// connection back without its deliveryPlans. It was the one that went on
// to finish jobs through a generic plan scanning dispatch_job whole.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := ApplyMigrations(ctx, pool)
	return err
}

// Migrated is what ApplyMigrations did: how many migrations it applied,
// and the schema version the database is at.
type Migrated struct {
	Applied int
	Version int32
}

// ApplyMigrations is Migrate, and says what it did.
func ApplyMigrations(ctx context.Context, pool *pgxpool.Pool) (Migrated, error) {
	var done Migrated
	cfg := pool.Config().ConnConfig.Copy()
	// A migration's DDL takes strong locks, and one waiting behind a long
	// transaction (a report, a pg_dump) would hold every create and
	// delivery queued behind it for as long. Each lock is waited for at
	// most migrationLockWait (a startup parameter: tern's RESET ALL after
	// each migration keeps it), and a migration that gave up is tried
	// again: each runs in its own transaction, so a try that failed left
	// nothing behind.
	if _, named := cfg.RuntimeParams["lock_timeout"]; !named {
		cfg.RuntimeParams["lock_timeout"] = strconv.Itoa(int(migrationLockWait.Milliseconds()))
	}
	for try := 1; ; try++ {
		applied, version, err := migrateOnce(ctx, cfg)
		done.Applied += applied // a try that gave up may have applied some first
		done.Version = max(done.Version, version)
		if pgCode(err) != "55P03" { // lock_not_available
			return done, err
		}
		if try == migrationTries {
			return done, fmt.Errorf("store: migrate: a migration waited %s for a table's lock %d times and gave up: "+
				"a long transaction holds a table it changes (see pg_stat_activity); creates and deliveries went on meanwhile. "+
				"Start again once it has ended: %w", migrationLockWait, try, err)
		}
		select {
		case <-ctx.Done():
			return done, ctx.Err()
		case <-time.After(time.Duration(try) * time.Second):
		}
	}
}

// loadMigrations gives m the migrations in sub (the embedded ones), in their numbered
// order, each split into its up and down SQL as tern splits them. They are
// plain SQL: tern's LoadMigrations would run each through text/template,
// whose look-up of methods by name makes the linker keep every exported
// method of every type in the binary (a third of it, never run, and
// pages that count in every process's resident memory).
func loadMigrations(m *migrate.Migrator, sub fs.FS) error {
	paths, err := migrate.FindMigrations(sub)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return migrate.NoMigrationsFoundError{}
	}
	for _, p := range paths {
		body, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		up, down, _ := strings.Cut(string(body), "---- create above / drop below ----")
		up = strings.TrimSpace(up)
		if !holdsSQL(up) {
			// Only comments above the marker: tern refuses it too, or the
			// version would rise past SQL that never ran.
			return fmt.Errorf("%s: %w", path.Base(p), migrate.ErrNoFwMigration)
		}
		m.AppendMigration(path.Base(p), up, strings.TrimSpace(down))
	}
	return nil
}

// holdsSQL reports whether sql has a line that is neither blank nor a
// "--" comment, as tern's loader checks a migration's up section.
func holdsSQL(sql string) bool {
	for line := range strings.Lines(sql) {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			return true
		}
	}
	return false
}

// ternLock is the advisory lock tern migrates under (its lockNum).
const ternLock = int64(9628173550095224)

// migrationLockWait is the longest a migration waits for a lock (the
// creates queued behind it wait as long), and migrationTries how often it
// tries: about two minutes in all.
const (
	migrationLockWait = 5 * time.Second
	migrationTries    = 12
)

// migrateOnce applies the migrations not applied yet, on a connection of
// its own, and returns how many it applied and the version the schema is
// at (also when it failed part way: each migration commits on its own).
func migrateOnce(ctx context.Context, cfg *pgx.ConnConfig) (applied int, version int32, err error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("store: migrate: %w", redactErr(err))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// Another process migrating holds tern's lock for as long as its
	// migrations take: wait for it without the lock timeout, which is for
	// the tables' locks. tern takes the lock again, on this session, and
	// has it at once; closing the connection lets go of both.
	if _, err := conn.Exec(ctx, `SET lock_timeout = 0`); err != nil {
		return 0, 0, fmt.Errorf("store: migrate: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, ternLock); err != nil {
		return 0, 0, fmt.Errorf("store: migrate: wait for another process's migrations: %w", err)
	}
	if _, err := conn.Exec(ctx, `RESET lock_timeout`); err != nil { // the startup parameter's again
		return 0, 0, fmt.Errorf("store: migrate: %w", err)
	}
	m, err := migrate.NewMigrator(ctx, conn, "dispatch_schema_version")
	if err != nil {
		return 0, 0, fmt.Errorf("store: migrate: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, 0, err
	}
	if err := loadMigrations(m, sub); err != nil {
		return 0, 0, fmt.Errorf("store: load migrations: %w", err)
	}
	// The advisory lock is held: no other process moves the version
	// between these reads and the migrations.
	from, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("store: migrate: read the schema version: %w", err)
	}
	err = m.Migrate(ctx)
	if to, verr := m.GetCurrentVersion(ctx); verr == nil && to >= from {
		applied, version = int(to-from), to
	}
	if err != nil {
		var bad migrate.BadVersionError
		if errors.As(err, &bad) { // a newer dispatch has migrated the database
			if serr := CheckSchema(ctx, conn); serr != nil {
				return applied, version, serr
			}
		}
		return applied, version, fmt.Errorf("store: migrate: %w", err)
	}
	return applied, version, nil
}

// Ping checks the database.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// NewID returns a new time-sorted id.
func (s *Store) NewID() int64 { return s.newID() }

func notFound(what string, id int64) error {
	return dispatch.Errorf(dispatch.ENotFound, "%s %d not found", what, id)
}

// interpret turns pgx errors into dispatch errors; others pass through.
func interpret(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return dispatch.Errorf(dispatch.EConflict, "a record with that key already exists")
	}
	return err
}

// redactErr keeps a connection string's password out of error text.
// parseError is why pgx cannot parse the connection string raw, without
// the string and its password: pgx's error quotes the string, masking the
// password only where Go's URL parser finds it, and a URL error inside it
// quotes the string whole.
func parseError(raw string, err error) error {
	reason := err.Error()
	var ue *neturl.Error
	if errors.As(err, &ue) {
		reason = strings.Replace(reason, ue.Error(), ue.Err.Error(), 1)
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if i := strings.LastIndex(reason, "`: "); i >= 0 { // cannot parse `<the string>`: <why>
			reason = reason[i+3:]
		}
	}
	for _, p := range config.Passwords(raw) {
		reason = strings.ReplaceAll(reason, p, "****")
	}
	return errors.New("invalid database URL: " + reason)
}

func redactErr(err error) error {
	var pgErr *pgconn.ConnectError
	if errors.As(err, &pgErr) {
		return Explain(err) // the cause, without the password
	}
	return errors.New("invalid database URL")
}

// withTx runs fn in a transaction.
func (s *Store) withTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, s.pool, fn)
}
