package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// SchemaError says that the database's schema is not the one this binary
// was built for: Database is the version recorded in dispatch_schema_version,
// Binary the version this binary's embedded migrations reach.
type SchemaError struct {
	Database, Binary int32
}

func (e *SchemaError) Error() string {
	if e.Database > e.Binary {
		return fmt.Sprintf("the database schema is at version %d, newer than this binary's %d: a newer dispatch has migrated it. "+
			"Refusing to start: this binary does not know the newer tables and would misread or damage them. "+
			"Run the newer version (downgrading the schema is not supported; restore a backup taken before the upgrade to go back)",
			e.Database, e.Binary)
	}
	return fmt.Sprintf("the database schema is at version %d, this binary needs version %d: run `dispatch migrate` "+
		"(or start with DISPATCH_AUTO_MIGRATE=true)", e.Database, e.Binary)
}

// migrationName is tern's pattern for a migration file.
var migrationName = regexp.MustCompile(`\A(\d+)_.+\.sql\z`)

// MigrationsVersion is the schema version the embedded migrations reach:
// the highest migration number.
func MigrationsVersion() int32 {
	var top int32
	entries, _ := fs.ReadDir(migrations, "migrations")
	for _, e := range entries {
		if m := migrationName.FindStringSubmatch(e.Name()); m != nil {
			n, err := strconv.ParseInt(m[1], 10, 32)
			if err == nil && int32(n) > top {
				top = int32(n)
			}
		}
	}
	return top
}

// queryRower is a pool or a connection.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckSchema returns a *SchemaError unless the database's schema is at
// the version this binary's migrations reach (MigrationsVersion): a
// database migrated by a newer dispatch, or one not migrated yet.
func CheckSchema(ctx context.Context, db queryRower) error {
	var version int32
	err := db.QueryRow(ctx, `SELECT version FROM dispatch_schema_version`).Scan(&version)
	switch {
	case pgCode(err) == undefinedTable, errors.Is(err, pgx.ErrNoRows): // never migrated
		version = 0
	case err != nil:
		return fmt.Errorf("store: read the schema version: %w", Explain(err))
	}
	if want := MigrationsVersion(); version != want {
		return &SchemaError{Database: version, Binary: want}
	}
	return nil
}
