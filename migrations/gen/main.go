// Command gen writes hookledger's migration files: River's migrations that
// the folder lacks, then an ent schema diff when the schema changed.
//
//	go run ./migrations/gen [-name add_payment]
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"

	atlasmigrate "ariga.io/atlas/sql/migrate"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hookledger/hookledger/migrations/schemadiff"
	"github.com/hookledger/hookledger/modules/testsupport/devdb"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	name := flag.String("name", "schema", "name of the new ent migration")
	dirPath := flag.String("dir", "migrations", "migration folder")
	flag.Parse()
	ctx := context.Background()

	n, err := schemadiff.WriteRiver(*dirPath)
	if err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	if n > 0 {
		fmt.Printf("wrote %d River migration(s)\n", n)
	}
	dir, err := schemadiff.Dir(*dirPath)
	if err != nil {
		return err
	}

	admin, err := devdb.Server(ctx, os.Getenv("TEST_DATABASE_URL"), log.Printf)
	if err != nil {
		return err
	}
	scratch := fmt.Sprintf("hookledger_gen_%d", os.Getpid())
	url, err := devdb.EnsureDatabase(ctx, admin, scratch)
	if err != nil {
		return err
	}
	defer devdb.DropDatabase(context.Background(), admin, scratch)
	db, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer db.Close()
	err = schemadiff.Diff(ctx, db, dir, *name, true)
	switch {
	case errors.Is(err, atlasmigrate.ErrNoPlan):
		fmt.Println("ent schema and migrations agree")
	case err != nil:
		return fmt.Errorf("ent diff: %w", err)
	default:
		if _, err := schemadiff.Dir(*dirPath); err != nil {
			return err
		}
		fmt.Println("wrote a new ent migration")
	}
	return nil
}
