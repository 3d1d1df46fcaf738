// Package schemadiff writes hookledger's migration files: River's own
// migrations copied from the River release in go.mod, and the difference
// between the ent schema and what the migration folder builds.
package schemadiff

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	"ariga.io/atlas/sql/sqltool"
	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/dialect/sql/schema"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"github.com/riverqueue/river/rivermigrate"

	entmigrate "github.com/hookledger/hookledger/ent/migrate"
)

var riverFile = regexp.MustCompile(`^\d{14}_river_(\d{3})_.*\.up\.sql$`)

// WriteRiver writes a migration pair for every River migration (version 2
// on: version 1 is River's own bookkeeping table, which golang-migrate
// replaces) that dir does not hold yet. Existing files are left alone, so
// running it again writes nothing; a River upgrade adds only its new
// versions, numbered after everything already there.
func WriteRiver(dir string) (int, error) {
	have := map[string]bool{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var last string
	for _, e := range entries {
		if m := riverFile.FindStringSubmatch(e.Name()); m != nil {
			have[m[1]] = true
		}
		if strings.HasSuffix(e.Name(), ".up.sql") && e.Name()[:14] > last {
			last = e.Name()[:14]
		}
	}
	next, err := time.Parse("20060102150405", max(last, time.Now().UTC().Add(-time.Minute).Format("20060102150405")))
	if err != nil {
		return 0, fmt.Errorf("migration version %q: %w", last, err)
	}
	migrator, err := rivermigrate.New(riverdatabasesql.New(nil), nil)
	if err != nil {
		return 0, fmt.Errorf("river migrator: %w", err)
	}
	written := 0
	for _, m := range migrator.AllVersions() {
		v := fmt.Sprintf("%03d", m.Version)
		if m.Version == 1 || have[v] {
			continue
		}
		next = next.Add(time.Second)
		base := fmt.Sprintf("%s_river_%s_%s", next.Format("20060102150405"), v, strings.ReplaceAll(m.Name, " ", "_"))
		for suffix, body := range map[string]string{".up.sql": m.SQLUp, ".down.sql": m.SQLDown} {
			body = strings.ReplaceAll(body, "/* TEMPLATE: schema */", "")
			if err := os.WriteFile(filepath.Join(dir, base+suffix), []byte(body), 0o644); err != nil {
				return written, err
			}
		}
		written++
	}
	return written, nil
}

// Dir opens path as a golang-migrate folder and rewrites its atlas.sum, so
// that hand-written or River files pass atlas' integrity check.
func Dir(path string) (*sqltool.GolangMigrateDir, error) {
	dir, err := sqltool.NewGolangMigrateDir(path)
	if err != nil {
		return nil, err
	}
	sum, err := dir.Checksum()
	if err != nil {
		return nil, err
	}
	if err := atlasmigrate.WriteSumFile(dir, sum); err != nil {
		return nil, err
	}
	return dir, nil
}

// Diff replays dir on db, which must be an empty database, and writes a
// migration named name for whatever the ent schema has that dir lacks.
// With errNoPlan it returns atlasmigrate.ErrNoPlan when nothing differs.
func Diff(ctx context.Context, db *sql.DB, dir atlasmigrate.Dir, name string, errNoPlan bool) error {
	s := entmigrate.NewSchema(entsql.OpenDB(dialect.Postgres, db))
	return s.NamedDiff(ctx, name,
		schema.WithDir(dir),
		schema.WithMigrationMode(schema.ModeReplay),
		schema.WithFormatter(sqltool.GolangMigrateFormatter),
		schema.WithDialect(dialect.Postgres),
		schema.WithErrNoPlan(errNoPlan),
	)
}
