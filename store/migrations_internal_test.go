package store

import (
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/jackc/tern/v2/migrate"
)

// The migrations run as tern's own loader would give them: same names, in
// the same order, with the same up and down SQL. loadMigrations leaves out
// only tern's templates, which no migration uses.
func TestMigrationsLoadAsTernLoadsThem(t *testing.T) {
	var ours, terns migrate.Migrator
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if err := loadMigrations(&ours, sub); err != nil {
		t.Fatal(err)
	}
	if err := terns.LoadMigrations(sub); err != nil {
		t.Fatal(err)
	}
	if len(ours.Migrations) != len(terns.Migrations) || len(ours.Migrations) < 26 {
		t.Fatalf("%d migrations loaded, tern loads %d", len(ours.Migrations), len(terns.Migrations))
	}
	for i, m := range ours.Migrations {
		want := terns.Migrations[i]
		if m.Sequence != want.Sequence || m.Name != want.Name || m.UpSQL != want.UpSQL || m.DownSQL != want.DownSQL {
			t.Errorf("migration %d: loaded as %d %s (%d bytes up, %d down), tern loads %d %s (%d up, %d down)",
				i, m.Sequence, m.Name, len(m.UpSQL), len(m.DownSQL), want.Sequence, want.Name, len(want.UpSQL), len(want.DownSQL))
		}
	}
}

// A migration whose up section holds only comments is refused, as tern
// refuses it: run, it would raise the version past SQL that never ran. So
// is a folder with no migrations.
func TestAMigrationWithoutSQLIsRefused(t *testing.T) {
	for name, up := range map[string]string{"empty": "", "comments only": "-- adds an index\n\n  -- on jobs\n"} {
		files := fstest.MapFS{
			"001_a.sql": {Data: []byte("CREATE TABLE a (i int);")},
			"002_b.sql": {Data: []byte(up + "---- create above / drop below ----\nDROP INDEX i;")},
		}
		if err := loadMigrations(&migrate.Migrator{}, files); !errors.Is(err, migrate.ErrNoFwMigration) {
			t.Errorf("%s: loaded with %v, want ErrNoFwMigration", name, err)
		}
	}
	files := fstest.MapFS{"001_a.sql": {Data: []byte("-- adds an index\nCREATE INDEX i ON t (c);")}}
	if err := loadMigrations(&migrate.Migrator{}, files); err != nil {
		t.Errorf("a migration with SQL under a comment was refused: %v", err)
	}
	var none migrate.NoMigrationsFoundError
	if err := loadMigrations(&migrate.Migrator{}, fstest.MapFS{}); !errors.As(err, &none) {
		t.Errorf("no migrations loaded with %v, want NoMigrationsFoundError", err)
	}
}
