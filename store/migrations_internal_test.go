package store

import (
	"io/fs"
	"testing"

	"github.com/jackc/tern/v2/migrate"
)

// The migrations run as tern's own loader would give them: same names, in
// the same order, with the same up and down SQL. loadMigrations leaves out
// only tern's templates, which no migration uses.
func TestMigrationsLoadAsTernLoadsThem(t *testing.T) {
	var ours, terns migrate.Migrator
	if err := loadMigrations(&ours); err != nil {
		t.Fatal(err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
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
