// Package storetest gives each test its own PostgreSQL database, cloned
// from a migrated template, so tests run in parallel against a real server.
// It fails (never skips) when PostgreSQL does not answer: run `make up`.
package storetest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch/store"
)

// templateDB holds the migrated schema. Its name carries the hash of the
// embedded migrations, so checkouts with different migrations (branches,
// worktrees, an edited migration) never share a template.
var templateDB = "dispatch_test_tpl_" + store.SchemaVersion()

var templateOnce sync.Once
var templateErr error

// AdminURL is the server's maintenance database URL, from
// DISPATCH_TEST_DATABASE_URL or DATABASE_URL (any database on the server).
func AdminURL() string {
	for _, k := range []string{"DISPATCH_TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(k); v != "" {
			return withDatabase(v, "postgres")
		}
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func withDatabase(raw, db string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	u.Path = "/" + db
	return u.String()
}

// NewDatabase creates a fresh migrated database for t, dropped at cleanup,
// and returns its URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	templateOnce.Do(func() { templateErr = prepareTemplate(ctx) })
	if templateErr != nil {
		t.Fatalf("storetest: PostgreSQL at %s is not usable (run `make up`): %v", redact(AdminURL()), templateErr)
	}
	return newDatabase(ctx, t, templateDB)
}

// NewEmptyDatabase creates a fresh database without dispatch's schema,
// dropped at cleanup, and returns its URL.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return newDatabase(ctx, t, "template0")
}

func newDatabase(ctx context.Context, t testing.TB, template string) string {
	t.Helper()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	defer admin.Close(ctx)
	name := "dispatch_test_" + randomHex(6)
	if err := createDatabase(ctx, admin, name, template); err != nil {
		t.Fatalf("storetest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name))
	})
	return withDatabase(AdminURL(), name)
}

// createDatabase creates database name as a copy of template, waiting a
// moment for the template's last connections to leave: a closed
// connection's backend exits shortly after the client hangs up.
func createDatabase(ctx context.Context, admin *pgx.Conn, name, template string) error {
	var err error
	for try := 0; ; try++ {
		_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`,
			pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize()))
		if err == nil || try > 20 || !strings.Contains(err.Error(), "being accessed by other users") {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CopyDatabase copies the database at dbURL to a new database name on the
// same server, which outlives t (nothing drops it). Close every connection
// to dbURL first: PostgreSQL copies only a database nobody is connected to.
func CopyDatabase(t testing.TB, dbURL, name string) {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("storetest: copy database: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // a copy is a file copy of the whole database
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if err := createDatabase(ctx, admin, name, strings.TrimPrefix(u.Path, "/")); err != nil {
		t.Fatalf("storetest: copy database to %s: %v", name, err)
	}
}

// prepareTemplate creates and migrates the template database once per
// server; a PostgreSQL advisory lock keeps parallel test binaries apart.
func prepareTemplate(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(727274)`); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), `SELECT pg_advisory_unlock(727274)`) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, templateDB).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := admin.Exec(ctx, `CREATE DATABASE `+templateDB); err != nil {
			return err
		}
	}
	pool, err := pgxpool.New(ctx, withDatabase(AdminURL(), templateDB))
	if err != nil {
		return err
	}
	defer pool.Close()
	return store.Migrate(ctx, pool)
}

// New returns a Store over a fresh database, its pool, and the database URL.
func New(t testing.TB, opts store.Options) (*store.Store, *pgxpool.Pool, string) {
	t.Helper()
	dbURL := NewDatabase(t)
	st, pool := Open(t, dbURL, opts)
	return st, pool, dbURL
}

// Open returns a Store over the migrated database at dbURL and its pool,
// closed at cleanup.
func Open(t testing.TB, dbURL string, opts store.Options) (*store.Store, *pgxpool.Pool) {
	t.Helper()
	pool, err := store.Connect(context.Background(), dbURL, 0) // the service's own connection settings
	if err != nil {
		t.Fatalf("storetest: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	if opts.Sealer == nil {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		opts.Sealer, _ = store.NewSealer(key, nil)
	}
	st, err := store.New(pool, opts)
	if err != nil {
		t.Fatalf("storetest: store: %v", err)
	}
	// The partitions of now and ahead, as the service makes them before it
	// serves: a test's first create does not pay for them (nor see its
	// clock move while they are made).
	if _, err := st.MaintainHistory(context.Background(), time.Now(),
		store.History{Interval: cmp.Or(opts.PartitionInterval, store.DefaultPartitionInterval)}); err != nil {
		t.Fatalf("storetest: partitions: %v", err)
	}
	return st, pool
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
