package store

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// MigrateTo applies the embedded migrations up to version (tests of a
// migration over a database holding data written before it).
func MigrateTo(ctx context.Context, url string, version int32) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := migrate.NewMigrator(ctx, conn, "dispatch_schema_version")
	if err != nil {
		return err
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	if err := m.LoadMigrations(sub); err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	return m.MigrateTo(ctx, version)
}
