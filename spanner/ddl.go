package spanner

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"

	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"
	instance "cloud.google.com/go/spanner/admin/instance/apiv1"
	"cloud.google.com/go/spanner/admin/instance/apiv1/instancepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Spanner's own rule for table names: a letter, then letters, digits and
// underscores, 128 characters at most.
var tableRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,127}$`)

// checkTable reports whether table is a valid table name for a Store.
func checkTable(table string) error {
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

// DDL returns the statement that creates the lock table a Store with opts
// uses (Options.Table, DefaultTable if empty; see the package
// documentation). Run it with your own schema tooling (gcloud spanner
// databases ddl update, Terraform, Liquibase…), or let the store run it
// with Options.Create or [CreateTable].
func DDL(opts *Options) (string, error) {
	o, err := checkOptions(opts)
	if err != nil {
		return "", err
	}
	return ddl(o.Table), nil
}

func ddl(table string) string {
	return "CREATE TABLE `" + table + "` (\n" +
		"  name  STRING(MAX) NOT NULL,\n" + // the lock name ("" for the clock row)
		"  state BYTES(MAX),\n" + // JSON: holders, queue, counters
		"  stamp TIMESTAMP OPTIONS (allow_commit_timestamp = true),\n" + // commit timestamp of the last write
		") PRIMARY KEY (name)"
}

// CreateTable creates the lock table a Store with opts uses in the
// database of rawURL (as [Open] takes it) with the statement from [DDL],
// using a database admin client made with opts.ClientOptions (the same
// options as the data client: credentials, endpoint). It does nothing if
// the table exists already. It needs the spanner.databases.updateDdl
// permission, and on real Spanner a schema change takes from seconds to
// minutes. On the emulator (SPANNER_EMULATOR_HOST set) it first creates
// the instance and the database if they are missing: the emulator keeps
// nothing across restarts.
func CreateTable(ctx context.Context, rawURL string, opts *Options) error {
	db, o, err := resolveURL(rawURL, opts)
	if err != nil {
		return err
	}
	return createTable(ctx, db, o)
}

func createTable(ctx context.Context, db string, o Options) error {
	if os.Getenv("SPANNER_EMULATOR_HOST") != "" {
		if err := createEmulatorDatabase(ctx, db); err != nil {
			return err
		}
	}
	admin, err := database.NewDatabaseAdminClient(ctx, o.ClientOptions...)
	if err != nil {
		return fmt.Errorf("spanner: admin client: %w", err)
	}
	defer admin.Close()
	cur, err := admin.GetDatabaseDdl(ctx, &databasepb.GetDatabaseDdlRequest{Database: db})
	if err != nil {
		return fmt.Errorf("spanner: reading the schema of %s: %w", db, err)
	}
	for _, st := range cur.Statements {
		if hasTable(st, o.Table) {
			return nil
		}
	}
	op, err := admin.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{
		Database: db, Statements: []string{ddl(o.Table)},
	})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		return fmt.Errorf("spanner: creating table %s in %s: %w", o.Table, db, err)
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

// createEmulatorDatabase creates the instance and the database of db
// (projects/P/instances/I/databases/D) on the Cloud Spanner emulator if
// they are missing. Only called with SPANNER_EMULATOR_HOST set, so that it
// never creates an instance of real Spanner.
func createEmulatorDatabase(ctx context.Context, db string) error {
	parts := strings.Split(db, "/") // projects/P/instances/I/databases/D
	ia, err := instance.NewInstanceAdminClient(ctx)
	if err != nil {
		return fmt.Errorf("spanner: instance admin client: %w", err)
	}
	defer ia.Close()
	op, err := ia.CreateInstance(ctx, &instancepb.CreateInstanceRequest{
		Parent: "projects/" + parts[1], InstanceId: parts[3],
		Instance: &instancepb.Instance{Config: "emulator-config", DisplayName: parts[3], NodeCount: 1},
	})
	if err == nil {
		_, err = op.Wait(ctx)
	}
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("spanner: creating instance %s: %w", parts[3], err)
	}
	da, err := database.NewDatabaseAdminClient(ctx)
	if err != nil {
		return fmt.Errorf("spanner: admin client: %w", err)
	}
	defer da.Close()
	dop, err := da.CreateDatabase(ctx, &databasepb.CreateDatabaseRequest{
		Parent: strings.Join(parts[:4], "/"), CreateStatement: "CREATE DATABASE `" + parts[5] + "`",
	})
	if err == nil {
		_, err = dop.Wait(ctx)
	}
	if err != nil && status.Code(err) != codes.AlreadyExists {
		return fmt.Errorf("spanner: creating database %s: %w", db, err)
	}
	return nil
}
