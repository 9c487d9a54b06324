package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
)

// Dialect is the SQL database a [Table] lives in.
type Dialect int

const (
	Postgres Dialect = iota + 1 // PostgreSQL 9.5 or later
	MySQL                       // MySQL 5.7 or later, MariaDB 10.2 or later
	SQLite                      // SQLite 3.35 or later
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is the name of a Table whose Name is empty.
const DefaultTable = "baton_fences"

// MaxNameLen is the longest name a Table fences, in bytes: baton's longest
// lock name.
const MaxNameLen = 255

// Table is a fence table: one row per name, holding the largest token
// admitted for it. Create it once with [Table.CreateSQL].
type Table struct {
	Dialect Dialect
	Name    string // DefaultTable if empty; letters, digits and _, optionally schema.table
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// quoted returns the table's name quoted for its dialect.
func (t Table) quoted() (string, error) {
	name := t.Name
	if name == "" {
		name = DefaultTable
	}
	if !ident.MatchString(name) {
		return "", fmt.Errorf("fence: table name %.70q: want letters, digits and _, optionally schema.table", name)
	}
	q := `"`
	switch t.Dialect {
	case Postgres, SQLite:
	case MySQL:
		q = "`"
	default:
		return "", fmt.Errorf("fence: table %s: unknown dialect %v", name, t.Dialect)
	}
	return q + strings.ReplaceAll(name, ".", q+"."+q) + q, nil
}

// CreateSQL returns the statement that creates the table if it does not
// exist.
func (t Table) CreateSQL() (string, error) {
	q, err := t.quoted()
	if err != nil {
		return "", err
	}
	switch t.Dialect {
	case Postgres:
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (name text COLLATE "C" PRIMARY KEY, token bigint NOT NULL)`, nil
	case MySQL:
		return "CREATE TABLE IF NOT EXISTS " + q + " (name VARBINARY(255) NOT NULL PRIMARY KEY, token BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB", nil
	default:
		return `CREATE TABLE IF NOT EXISTS ` + q + ` (name TEXT NOT NULL PRIMARY KEY, token INTEGER NOT NULL) WITHOUT ROWID`, nil
	}
}

// Row is a query's result row: *sql.Row, or pgx.Row.
type Row interface {
	Scan(dest ...any) error
}

// Admit admits token for name in table t, in the transaction that query
// runs its statements in, or returns a [*StaleError] if a larger token was
// admitted before. Call it in the transaction that writes to the fenced
// resource, before its writes, and commit only if it returns nil: the row
// it locks keeps other admissions of name waiting until the transaction
// ends, so that no stale holder writes between the admission and the
// commit. A transaction that rolls back admits nothing.
//
// query runs one statement and returns its row: the QueryRowContext method
// of a *sql.Tx, or the QueryRow method of a pgx.Tx. On SQLite, call Admit
// first in the transaction, which then writes from its start. Tokens above
// math.MaxInt64 (which baton's stores do not issue) are refused, as SQL
// integers cannot hold them.
func Admit[R Row](ctx context.Context, query func(context.Context, string, ...any) R, t Table, name string, token uint64) error {
	q, err := t.quoted()
	if err != nil {
		return err
	}
	switch {
	case name == "":
		return errors.New("fence: name is empty")
	case len(name) > MaxNameLen:
		return fmt.Errorf("fence: name %.40q… is %d bytes, longer than %d", name, len(name), MaxNameLen)
	case token > math.MaxInt64:
		return fmt.Errorf("fence: token %d is larger than a SQL bigint holds", token)
	}
	var highest int64
	switch t.Dialect {
	case Postgres:
		err = query(ctx, `INSERT INTO `+q+` AS f (name, token) VALUES ($1, $2)
			ON CONFLICT (name) DO UPDATE SET token = greatest(f.token, excluded.token) RETURNING f.token`,
			name, int64(token)).Scan(&highest)
	case SQLite:
		err = query(ctx, `INSERT INTO `+q+` (name, token) VALUES (?, ?)
			ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token) RETURNING token`,
			name, int64(token)).Scan(&highest)
	case MySQL:
		// No RETURNING: the upsert locks the row, and a locking read (not
		// the transaction's snapshot, which may predate a newer token's
		// commit) reads what it holds.
		err = query(ctx, "INSERT INTO "+q+" (name, token) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = GREATEST(token, ?)",
			name, int64(token), int64(token)).Scan()
		if err == nil || errors.Is(err, sql.ErrNoRows) { // no rows: the upsert ran
			err = query(ctx, "SELECT token FROM "+q+" WHERE name = ? FOR UPDATE", name).Scan(&highest)
		}
	}
	if err != nil {
		return fmt.Errorf("fence: admitting token %d for %q: %w", token, name, err)
	}
	if uint64(highest) > token {
		return &StaleError{Name: name, Token: token, Highest: uint64(highest)}
	}
	return nil
}
