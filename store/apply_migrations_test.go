package store_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dispatchhq/dispatch/store"
	"github.com/dispatchhq/dispatch/store/storetest"
)

// ApplyMigrations says how many migrations it applied and the version the
// schema is at: those not applied yet, then none.
func TestApplyMigrationsSaysWhatItApplied(t *testing.T) {
	t.Parallel()
	ctx, top := t.Context(), store.MigrationsVersion()
	url := storetest.NewEmptyDatabase(t)
	if err := store.MigrateTo(ctx, url, 20); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, want := range []store.Migrated{{Applied: int(top) - 20, Version: top}, {Applied: 0, Version: top}} {
		got, err := store.ApplyMigrations(ctx, pool)
		if err != nil || got != want {
			t.Errorf("ApplyMigrations = %+v, %v; want %+v", got, err, want)
		}
	}
}
