package postgres

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaVersion is stored as the comment of the counters table. Open
// compares it to decide whether the functions must be (re)created. It ends
// with a hash of schema.sql, so that any change of the SQL replaces the
// functions of an older version of this package.
var schemaVersion = "baton postgres store, schema 6 " + hashOf(schemaSQL)[:12]

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

var (
	tableRE  = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)
	schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
)

func checkTable(table string) error {
	if !tableRE.MatchString(table) {
		return fmt.Errorf("postgres: invalid table name %q: want a lower-case letter or underscore, then up to 40 lower-case letters, digits or underscores", table)
	}
	return nil
}

func checkSchema(schema string) error {
	if schema != "" && !schemaRE.MatchString(schema) {
		return fmt.Errorf("postgres: invalid schema name %q: want a lower-case letter or underscore, then up to 62 lower-case letters, digits or underscores", schema)
	}
	return nil
}

// objects are the names of the database objects of one lock table, quoted
// and, when a schema is known, qualified with it.
type objects struct {
	table       string // bare table name, also the NOTIFY channel
	schema      string // "" when the objects are left to the search_path
	counter     string // the counters table (named Options.Table)
	holds       string // holders and queue entries
	epochs      string // the epoch and the longest non-durable TTL
	incarnation string // the unlogged marker of the server's incarnation
	sessions    string // the unlogged table of the clients' sessions
	ownerIx     string // index on holds (owner), unqualified (indexes live with their table)

	// the entry points, and the functions they call
	acquire, join, renew, release, releaseOne, list, purge, bind, reclaim, session string
	wake, newEpoch, raise, begin, take, settle, next, alive                        string
}

func newObjects(schema, table string) objects {
	q := func(suffix string) string {
		if schema == "" {
			return pgx.Identifier{table + suffix}.Sanitize()
		}
		return pgx.Identifier{schema, table + suffix}.Sanitize()
	}
	return objects{
		table:       table,
		schema:      schema,
		counter:     q(""),
		holds:       q("_holds"),
		epochs:      q("_epochs"),
		incarnation: q("_incarnation"),
		sessions:    q("_sessions"),
		ownerIx:     pgx.Identifier{table + "_holds_owner"}.Sanitize(),
		acquire:     q("_acquire"),
		join:        q("_join"),
		renew:       q("_renew"),
		release:     q("_release"),
		releaseOne:  q("_release_one"),
		list:        q("_list"),
		purge:       q("_purge"),
		bind:        q("_bind"),
		reclaim:     q("_reclaim"),
		session:     q("_session"),
		alive:       q("_alive"),
		wake:        q("_wake"),
		newEpoch:    q("_new_epoch"),
		raise:       q("_raise"),
		begin:       q("_begin"),
		take:        q("_take"),
		settle:      q("_settle"),
		next:        q("_next"),
	}
}

// DDL returns the SQL script that creates the lock table a Store with opts
// uses (Options.Table in Options.Schema, or in the first schema of the
// search_path if Schema is empty), the other tables and the functions every call of a Store goes through
// (see the package documentation). It is idempotent (CREATE … IF NOT
// EXISTS, CREATE OR REPLACE), and upgrades a lock table of an earlier
// version in place. Run it yourself, as a role allowed to create objects,
// when the store's own role may not (Options.NoCreate); the store's role
// then needs SELECT, INSERT, UPDATE and DELETE on the tables and EXECUTE
// on the functions (the default for functions).
func DDL(opts *Options) (string, error) {
	o, err := checkOptions(opts)
	if err != nil {
		return "", err
	}
	return newObjects(o.Schema, o.Table).ddl(), nil
}

func (o objects) ddl() string {
	return strings.NewReplacer(
		"{COUNTERS}", o.counter,
		"{HOLDS}", o.holds,
		"{EPOCHS}", o.epochs,
		"{INCARNATION}", o.incarnation,
		"{SESSIONS}", o.sessions,
		"{OWNER_IX}", o.ownerIx,
		"{ACQUIRE}", o.acquire,
		"{JOIN}", o.join,
		"{RENEW}", o.renew,
		"{RELEASE1}", o.releaseOne,
		"{RELEASE}", o.release,
		"{LIST}", o.list,
		"{PURGE}", o.purge,
		"{BIND}", o.bind,
		"{RECLAIM}", o.reclaim,
		"{SESSION}", o.session,
		"{ALIVE}", o.alive,
		"{WAKE}", o.wake,
		"{NEWEPOCH}", o.newEpoch,
		"{RAISE}", o.raise,
		"{BEGIN}", o.begin,
		"{TAKE}", o.take,
		"{SETTLE}", o.settle,
		"{NEXT}", o.next,
		"{CHANNEL}", "'"+o.table+"'", // validated: [a-z0-9_] only
		"{KEY}", "'baton "+o.schema+"."+o.table+"'", // the advisory lock's; validated too
		"{VERSION}", "'"+schemaVersion+"'",
	).Replace(schemaSQL)
}

// schemaSQL is the script of one lock table, with {NAMES} to replace.
//
//go:embed schema.sql
var schemaSQL string
