package mysql

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// schemaVersion is recorded as the comment of every procedure. A store compares it with what the database has to decide
// whether the procedures must be (re)created. It ends with a hash of
// ddlTemplate, so that any change of the SQL replaces the procedures of an
// older version of this package.
var schemaVersion = "baton mysql store 3 " + hash(ddlTemplate)[:12]

// version is the comment of the procedures of a table in the given mode.
func version(durable bool) string {
	if durable {
		return schemaVersion + " durable"
	}
	return schemaVersion + " fast"
}

var tableRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

func checkTable(table string) error {
	if !tableRE.MatchString(table) {
		return fmt.Errorf("mysql: invalid table name %q: want a lower-case letter or underscore, then up to 40 lower-case letters, digits or underscores", table)
	}
	return nil
}

// objects are the names of the database objects of one lock table. They
// are made of the validated table name only, so they need no quoting; they
// are the only identifiers ever written into SQL text.
type objects struct {
	counters, holds, state, epochs, long, meta, stripes, sessions                                                string
	acquire, grant, take, renew, release, release1, purge, bind, txrow, reclaim, keep, incarnate, raise, session string
}

func newObjects(table string) objects {
	return objects{
		counters:  table,
		holds:     table + "_holds",
		state:     table + "_state",
		epochs:    table + "_epochs",
		long:      table + "_long",
		meta:      table + "_meta",
		stripes:   table + "_stripes",
		sessions:  table + "_sessions",
		session:   table + "_session",
		grant:     table + "_grant",
		take:      table + "_take",
		keep:      table + "_keep",
		incarnate: table + "_incarnate",
		raise:     table + "_raise",
		acquire:   table + "_acquire",
		renew:     table + "_renew",
		release:   table + "_release",
		release1:  table + "_release_one",
		purge:     table + "_purge",
		bind:      table + "_bind",
		txrow:     table + "_txrow",
		reclaim:   table + "_reclaim",
	}
}

func (o objects) procedures() []string {
	return []string{o.acquire, o.grant, o.take, o.renew, o.release, o.release1, o.purge, o.bind, o.txrow, o.reclaim, o.keep, o.incarnate, o.raise, o.session}
}

func (o objects) tables() []string {
	return []string{o.counters, o.holds, o.state, o.epochs, o.long, o.meta, o.stripes, o.sessions}
}

// The fast mode's MEMORY rows have a fixed width: a host is cut to
// maxHost bytes, and metadata longer than maxMeta bytes is kept in the
// InnoDB table T_meta (a flush per grant). heapSize is the size limit of
// each MEMORY table (about 1.4 KB per hold or queue entry).
const (
	maxHost  = 255
	maxMeta  = 255
	heapSize = 512 << 20
)

// statements returns the DDL of a table in the given mode, one statement
// per element, in order.
func (o objects) statements(durable bool) []string {
	mode := map[bool][]string{
		false: {
			"{FAST}", "1",
			"{ENGINE}", "MEMORY",
			"{SEQS}", o.state,
			"{HOSTTYPE}", "VARBINARY(" + strconv.Itoa(maxHost) + ")",
			"{METATYPE}", "VARBINARY(" + strconv.Itoa(maxMeta) + ")",
			"{METAMAX}", strconv.Itoa(maxMeta),
			"{METACOL}", "COALESCE(h.meta, m.meta)",
			"{METAJOIN}", "LEFT JOIN " + o.meta + " m ON h.flags & 2 AND m.name = h.name AND m.owner = h.owner AND m.token = h.token",
		},
		true: {
			"{FAST}", "0",
			"{ENGINE}", "InnoDB",
			"{SEQS}", o.counters,
			"{HOSTTYPE}", "BLOB",
			"{METATYPE}", "BLOB",
			"{METAMAX}", "4294967295",
			"{METACOL}", "h.meta",
			"{METAJOIN}", "",
		},
	}[durable]
	script := strings.NewReplacer(append(mode,
		"{COUNTERS}", o.counters,
		"{HOLDS}", o.holds,
		"{STATE}", o.state,
		"{EPOCHS}", o.epochs,
		"{LONG}", o.long,
		"{META}", o.meta,
		"{STRIPES}", o.stripes,
		"{SESSIONS}", o.sessions,
		"{SESSION}", o.session,
		"{GRANT}", o.grant,
		"{TAKE}", o.take,
		// The expiry of a session (given as the rest of the expression
		// and a closing parenthesis), NULL if it is gone.
		"{SESSIONEXP}", "(SELECT s.expires FROM "+o.sessions+" s WHERE s.id = ",
		"{HEX}", "(SELECT 0 n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12 UNION ALL SELECT 13 UNION ALL SELECT 14 UNION ALL SELECT 15)",
		"{KEEP}", o.keep,
		"{INCARNATE}", o.incarnate,
		"{RAISE}", o.raise,
		"{HEAPSIZE}", strconv.Itoa(heapSize),
		// The server an incarnation is on: a replica has another
		// server_id than its primary.
		"{SERVERID}", "UNHEX(SHA1(CONCAT(@@server_id, '/', @@hostname, ':', @@port)))",
		// GET_LOCK names are server-wide and at most 64 characters.
		"{INCLOCK}", "CONCAT('baton-inc:', LEFT(SHA2(CONCAT(DATABASE(), '.', '"+o.counters+"'), 256), 48))",
		"{ACQUIRE}", o.acquire,
		"{RENEW}", o.renew,
		"{RELEASE}", o.release,
		"{RELEASE1}", o.release1,
		"{PURGE}", o.purge,
		"{BIND}", o.bind,
		"{TXROW}", o.txrow,
		"{RECLAIM}", o.reclaim,
		"{VERSION}", version(durable),
		"{US}", "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', ",
		// Lock waits end after a second (the least MySQL allows), and the
		// session's own setting is put back before the procedure returns.
		"{LOCKWAIT}", "SET v_lwt = @@SESSION.innodb_lock_wait_timeout;\n\tSET SESSION innodb_lock_wait_timeout = 1;",
	)...).Replace(ddlTemplate)
	var out []string
	if !durable {
		// MEMORY tables keep the size limit of the session that creates
		// them.
		out = append(out, "SET SESSION max_heap_table_size = CAST(GREATEST(@@SESSION.max_heap_table_size, "+strconv.Itoa(heapSize)+") AS UNSIGNED)")
	}
	for _, s := range strings.Split(script, "\n-- ;;\n") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// DDL returns the SQL script that creates the lock table a Store with opts
// uses (Options.Table, DefaultTable if empty) in the current database: eight
// tables and fourteen stored procedures, for a fast table or, with
// opts.Durable, a durable one (use Durable on MySQL with
// enforce_gtid_consistency). It is written for the mysql and mariadb
// command-line clients (it uses their DELIMITER command), e.g.
//
//	mariadb -u admin -p app < baton.sql
//
// Run it yourself, as a user allowed to create tables and routines, when
// the store's own user may not (Options.NoCreate). The store's user then
// needs SELECT, INSERT, UPDATE and DELETE on the tables, DROP on T_holds,
// T_state and T_sessions, EXECUTE on the procedures and CREATE TEMPORARY TABLES on the
// database (for reclaim's scratch tables). The script drops and re-creates
// the procedures, so it can be run again to upgrade them; the tables are
// only created if missing, so run it in the mode the table has (a Store
// refuses procedures made for the other mode).
func DDL(opts *Options) (string, error) {
	o, err := checkOptions(opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("-- " + schemaVersion + "\nDELIMITER //\n")
	for _, s := range newObjects(o.Table).statements(o.Durable) {
		b.WriteString(s)
		b.WriteString("\n//\n")
	}
	b.WriteString("DELIMITER ;\n")
	return b.String(), nil
}

// The SQL of the store.
//
// Every entry point is one CALL, hence one round trip. Acquire, Renew and
// Release run one transaction (at READ COMMITTED, set by the procedure for
// that transaction only, so that InnoDB takes no gap locks); inside it,
// every change to a name happens while the transaction holds the name's
// serializer FOR UPDATE, so that row lock serializes everything done to one
// name across all clients. A durable table's serializer is the name's
// counters row, created on first use with INSERT … ON DUPLICATE KEY UPDATE,
// which takes an exclusive lock even when it finds the row inserted by a
// concurrent transaction (a plain INSERT would take a shared lock there, and
// two such transactions would deadlock upgrading it). A fast table's is the
// name's stripe, a row of T_stripes made with the table, so a new name's
// first grant inserts no row (whose commit would wait for a flush); it
// takes the name's counters row too where there is one, which only
// InLockedTx makes (see TXROW). Renew and Release lock the stripes and
// names of a batch in the order of stripe, then name (Renew all of them in
// one statement), and Purge takes one name per transaction, so that no two
// transactions can wait for each other's rows in a cycle. Reclaim deletes
// the counters of idle names, and a name used again starts above the
// floor, the largest token of every deleted counter: fencing tokens grow
// for the life of the table.
//
// Lock waits are bounded: each procedure sets innodb_lock_wait_timeout to
// one second for its own statements (and puts the session's value back).
// Only a transaction of Store.InLockedTx holds a name's row for longer; an
// acquire that meets one answers "not granted", naming the transaction's
// hold as the entry to wait for, instead of blocking in the server (on a
// fast table, after waiting up to that second without the stripe, and
// deciding again if the transaction ended), and a purge skips that name.
// This also bounds how long a CALL runs after its client gave up on it
// (the server finishes a statement whose connection was closed), see
// callCtx.
//
// The clock is UTC_TIMESTAMP(6), read by a statement of its own right after
// the name's serializer is locked. In a stored procedure each statement
// reads the clock when it starts (unlike a stored function, where NOW() is
// fixed for the calling statement), so the time read is no earlier than
// the moment the CALL started to run, which is after the client sent it:
// an expiry of time + TTL (TTL rounded up to whole microseconds) is never
// earlier than send time + TTL, which is what the holder's own deadline
// assumes. Read under the lock, it also never goes back between two
// decisions on a name (unless the server's clock is stepped back), and a
// request that waited for the lock does not get an expiry already partly
// spent.
//
// Durability is the server's: with innodb_flush_log_at_trx_commit=1 (the
// default) every commit that changes something is flushed before the CALL
// returns, so a fencing token or an expiry a client was told about survives
// a crash. MySQL has no per-transaction asynchronous commit, so releases
// and queue entries are flushed too. A refused acquire that changes nothing
// (the lock is taken and the request's place in the queue needs no refresh)
// writes no log and flushes nothing.
//
// Procedure results are one row. Times are microseconds since 1970 (UTC),
// so that the client needs no time-zone or parseTime setting. Batches
// arrive as JSON arrays whose strings are hex, so that no character set
// conversion can touch a name or an owner; the results of a batch are a
// string "i,field,…;" per entry.
//
// The script is schema.sql, with the names filled in.
//
//go:embed schema.sql
var ddlTemplate string
