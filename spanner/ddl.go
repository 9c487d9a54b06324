package spanner

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	"google.golang.org/api/option"
)

// Spanner's own rule for table names: a letter, then letters, digits and
// underscores, 128 characters at most.
var tableRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,127}$`)

// CheckTable reports whether table is a valid table name for a Store.
func CheckTable(table string) error {
	if !tableRE.MatchString(table) {
		return fmt.Errorf("spanner: invalid table name %q: want a letter, then up to 127 letters, digits or underscores", table)
	}
	return nil
}

// databaseRE is the form of a database path.
var databaseRE = regexp.MustCompile(`^projects/[^/]+/instances/[^/]+/databases/[^/]+$`)

func checkDatabase(db string) error {
	if !databaseRE.MatchString(db) {
		return fmt.Errorf("spanner: invalid database %q: want projects/P/instances/I/databases/D", db)
	}
	return nil
}

// DDL returns the statement that creates the lock table called table (see
// the package documentation). Run it with your own schema tooling (gcloud
// spanner databases ddl update, Terraform, Liquibase…), or let the store run
// it with Options.Create or [CreateTable].
func DDL(table string) (string, error) {
	if err := CheckTable(table); err != nil {
		return "", err
	}
	return ddl(table), nil
}

func ddl(table string) string {
	return "CREATE TABLE `" + table + "` (\n" +
		"  name       STRING(MAX) NOT NULL,\n" + // the lock name ("" for the clock row)
		"  version    INT64 NOT NULL,\n" + // 0: the name's anchor row; ≥ 1: its current state
		"  state      BYTES(MAX),\n" + // JSON: holders, queue, counters
		"  stamp      TIMESTAMP OPTIONS (allow_commit_timestamp = true),\n" + // commit timestamp of the write
		"  superseded INT64,\n" + // set by the write that replaces this version
		") PRIMARY KEY (name, version)"
}

// CreateTable creates the lock table called table in database
// (projects/P/instances/I/databases/D) with the statement from [DDL], using
// a database admin client made with opts (the same options as the data
// client: credentials, endpoint; SPANNER_EMULATOR_HOST is honoured). It
// does nothing if the table exists already. It needs the
// spanner.databases.updateDdl permission, and on real Spanner a schema
// change takes from seconds to minutes.
func CreateTable(ctx context.Context, db, table string, opts ...option.ClientOption) error {
	if err := CheckTable(table); err != nil {
		return err
	}
	if err := checkDatabase(db); err != nil {
		return err
	}
	admin, err := database.NewDatabaseAdminClient(ctx, opts...)
	if err != nil {
		return fmt.Errorf("spanner: admin client: %w", err)
	}
	defer admin.Close()
	cur, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
	if err != nil {
		return fmt.Errorf("spanner: reading the schema of %s: %w", db, err)
	}
	for _, st := range cur.Statements {
		if hasTable(st, table) {
			return nil
		}
	}
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{
		Database: db, Statements: []string{ddl(table)},
	})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("spanner: creating table %s in %s: %w", table, db, err)
	}
	return nil
}

// hasTable reports whether the DDL statement st creates table. Spanner
// names are case-insensitive.
func hasTable(st, table string) bool {
	f := strings.Fields(st)
	if len(f) < 3 || !strings.EqualFold(f[0], "CREATE") || !strings.EqualFold(f[1], "TABLE") {
		return false
	}
	name := strings.Trim(strings.TrimSuffix(f[2], "("), "`")
	return strings.EqualFold(name, table)
}
