// Package mysql is baton's MySQL and MariaDB store: locks shared by every
// process that reaches one database of a MySQL 8.0 (or later) or MariaDB
// 10.6 (or later) server, through github.com/go-sql-driver/mysql and
// database/sql. Import it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/mysql"
//
//	client, err := baton.Open(ctx, "mysql://app:secret@db.example.com:3306/app?tls=true", nil)
//
// or open a store directly with [Open] (or [New], over a pool of your own)
// and pass it to baton.New. Tests and faultcheck run on MariaDB 10.11 and
// MySQL 8.0.31.
//
// # URL
//
// mysql:// and mariadb:// URLs have the form
//
//	mysql://USER:PASSWORD@HOST:PORT/DATABASE?PARAM=VALUE&…
//
// The port defaults to 3306; the user and password are URL-encoded.
// A socket=/path/to/mysqld.sock parameter connects over a Unix socket
// instead of TCP. Other parameters are go-sql-driver's own DSN parameters
// (timeout, readTimeout, charset, …), except those starting with baton_:
//
//	baton_table=NAME    Options.Table
//	baton_nocreate=1    Options.NoCreate
//	baton_reclaim=D     Options.Reclaim (10m; -1s: never)
//	baton_durable=1     Options.Durable
//	baton_maxgrace=D    Options.MaxGrace (60s)
//
// TLS is go-sql-driver's: tls=true verifies the server's certificate
// against the system roots, tls=skip-verify encrypts without verifying,
// tls=preferred uses TLS when the server offers it, and tls=NAME uses a
// *tls.Config registered under NAME with mysql.RegisterTLSConfig (for a
// private CA or client certificates) before the URL is opened.
//
// # Schema
//
// With Options.Table T (baton_locks by default), the store uses, in the
// connection's database, the tables T (in a durable table, one row per lock
// name in use, which serializes the decisions about the name; idle names'
// rows are reclaimed every Options.Reclaim), T_holds (holds and queue
// entries), T_state, T_stripes (a fast table's serializers), T_epochs,
// T_long, T_meta and T_sessions, and the stored procedures T_grant,
// T_take, T_acquire, T_renew, T_release, T_purge, T_bind, T_txrow, T_reclaim,
// T_keep, T_incarnate, T_raise and T_session. Names and owners are
// VARBINARY, compared byte for byte. [DDL] returns the script. Unless
// Options.NoCreate is set, the store runs it on first use when the objects
// are missing or were made by another version of this package: the user
// then needs the CREATE, DROP, ALTER, CREATE ROUTINE and ALTER ROUTINE
// privileges on the database. With NoCreate, run the script yourself; the
// store's user then needs SELECT, INSERT, UPDATE and DELETE on the tables,
// DROP on T_holds, T_state and T_sessions (a new incarnation empties them
// with TRUNCATE), EXECUTE on the procedures and CREATE TEMPORARY TABLES on
// the database (for reclaim).
//
// # Guarantees and limits
//
// Each decision about a name is taken under a row lock that serializes the
// name (its row of T in a durable table, its stripe in a fast one), at READ
// COMMITTED (which needs binlog_format ROW or MIXED if the server writes a
// binary log, and autocommit on, the default), with the grant rules of
// package lockstate. Fencing tokens of a name grow for the life of the
// table. A call whose context ends may run a few seconds longer, to report
// what the server did. See docs/stores/mysql.md#how-a-call-is-decided.
//
// Clock: the server's UTC_TIMESTAMP(6), read under the row lock; clients'
// clocks may disagree. Stepping the server's clock shortens or lengthens
// every hold alive at that moment. Why: docs/stores/mysql.md#clock.
//
// Durability: a table is fast (the default) or durable (Options.Durable),
// chosen when it is created and kept for its life.
//
// A fast table keeps holds, queue entries and counters in MEMORY tables,
// so that grants, renewals and releases wait for no log flush; the
// exceptions are leases longer than Options.MaxGrace and metadata longer
// than 255 bytes, which are also written to InnoDB. The decisions about a
// name serialize on one of 65,536 InnoDB rows made with the table (a
// stripe, shared by the names that hash to it), so even a name's first
// grant inserts no row. A
// restart of the server, clean or not, empties the MEMORY tables, and so
// does a failover to a replica; the store then starts a new incarnation:
// tokens carry an epoch, raised durably once per incarnation, so they keep
// growing; every lease the server forgot is reported lost by its next
// renewal; nothing is granted for a grace period as long as the longest
// lease granted without a flush (at most MaxGrace); leases longer than
// MaxGrace come back. A fast table needs about 1.4 KB of the server's
// memory per hold or queue entry and 0.5 KB per name in use (at most
// 512 MB per table), and cuts a host to 255 bytes. On MySQL with
// enforce_gtid_consistency, which refuses a MEMORY table's writes in a
// transaction, new tables are durable.
//
// A durable table keeps everything in InnoDB. With
// innodb_flush_log_at_trx_commit=1 (the default) each grant and release
// waits for a log flush, and a restart loses nothing.
//
// If the server writes a binary log, the writes of either kind go to it
// too (with sync_binlog=1, a flush per call). See
// docs/stores/mysql.md#durability.
//
// Sessions: on a fast table, the holds a client keeps alive while it holds
// others are bound to the Store's session, a row of T_sessions renewed
// every third of the TTL; a renewal of the session extends its holds on
// the server, so the client sends one call instead of one renewal per
// hold, and every rule still judges a hold by its expiry alone. A restart
// forgets the sessions, and the grace period covers them as it covers the
// leases. See docs/stores/mysql.md#sessions.
//
// Hand-off and waking waiters: a release hands the name to the head of
// its queue, in FIFO order, when the head asks for an exclusive hold
// (others are woken and ask; see docs/stores/mysql.md#hand-off), and
// rings a doorbell made of a user-level lock (GET_LOCK): each release
// wakes the one waiter next in line; baton's fallback poll covers holds
// that expire. A Store keeps up to four pool connections for its bells
// and one more per Lock that is waiting: size a pool given to New
// accordingly. See docs/stores/mysql.md#waking-waiters.
//
// [Store.InLockedTx] runs a function in a database transaction that holds
// a lock name as a lease would, with a fencing token from the same
// counter, for work that must commit atomically with the lock.
//
// The store logs nothing; go-sql-driver logs connection trouble to stderr
// unless a program routes or silences it with mysql.SetLogger.
package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/sessions"
)

func init() {
	open := func(ctx context.Context, u *url.URL) (driver.Store, error) {
		return Open(ctx, u.String(), nil)
	}
	baton.Register("mysql", open)
	baton.Register("mariadb", open)
}

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "baton_locks"

// Options configure a Store. The zero value works.
type Options struct {
	// Table names the lock table (DefaultTable if empty) and is the prefix
	// of the store's other objects (see the package documentation): a
	// lower-case letter or underscore, then up to 40 lower-case letters,
	// digits or underscores.
	Table string
	// NoCreate makes the store use existing objects, created beforehand
	// with the script from DDL, instead of creating them.
	NoCreate bool
	// Reclaim is how often the counters rows of idle names are deleted,
	// for all the clients of the table together: each tries about that
	// often, and the first that finds the last reclaim that old does it
	// (DefaultReclaim if zero; negative: never).
	Reclaim time.Duration
	// Durable makes a new lock table durable: every grant, renewal and
	// release waits for the server's log flush, and a restart of the
	// server keeps every hold. By default a new table keeps its holds in
	// MEMORY tables, which cost no flush; a restart then loses them, and
	// the store grants nothing for a grace period (see MaxGrace). A table
	// keeps the mode it was created with: Open refuses Durable on a fast
	// table, and a durable table (every table made by an earlier version
	// of this package) stays durable.
	Durable bool
	// MaxGrace bounds the grace period of a fast table: leases longer
	// than MaxGrace are also written to an InnoDB table, with a flush, and
	// come back after a restart (DefaultMaxGrace if zero).
	MaxGrace time.Duration
}

// DefaultMaxGrace is used when Options.MaxGrace is zero.
const DefaultMaxGrace = 60 * time.Second

// DefaultReclaim is used when Options.Reclaim is zero.
const DefaultReclaim = 10 * time.Minute

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("mysql: %w", driver.ErrClosed)

// Store is a client of a lock table in MySQL or MariaDB. It is safe for
// concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	db    *sql.DB
	ownDB bool
	opts  Options
	obj   objects

	initSem chan struct{} // held while the schema is checked or created
	ready   atomic.Bool
	fast    bool         // the table's holds are in MEMORY; set once ready
	maxTTL  atomic.Int64 // the longest TTL a grace period covers, as last learned
	st      stmts        // set once ready
	srv     server

	bells *bells

	sessions    *sessions.Keeper // a fast table's; set once ready
	partitioned atomic.Bool      // a test's: session renewals fail

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu      sync.Mutex
	watches map[driver.Key]*watch
	// refused holds the blocker named by a queued request's refusal that
	// came before its watch, for the watch to start from (see Replay).
	refused map[driver.Key]*blocker

	busy driver.BusyNames

	closed    atomic.Bool
	closeOnce sync.Once
	janitor   sync.WaitGroup
}

type stmts struct {
	acquire, take, renew, release, release1  *sql.Stmt
	bind                                     *sql.Stmt
	listAll, listName, listOwner, listPrefix *sql.Stmt
	raise, session                           *sql.Stmt
	purge, reclaim, txrow                    string
	acquireSQL, takeSQL, releaseSQL          string // prepared again on the bell connections
	release1SQL                              string
}

func (s *stmts) close() {
	for _, st := range []*sql.Stmt{s.acquire, s.take, s.renew, s.release, s.release1, s.bind, s.listAll, s.listName, s.listOwner, s.listPrefix, s.raise, s.session} {
		if st != nil {
			st.Close()
		}
	}
}

// server is what the store learned about the server on first use.
type server struct {
	mariadb bool   // GET_LOCK takes fractional timeouts
	dbName  string // the connection's database
}

// Open connects to the database at rawURL, a mysql:// or mariadb:// URL
// (see the package documentation) or a go-sql-driver DSN such as
// "user:password@tcp(host:3306)/db?tls=true", with a pool of its own,
// checks the lock table and creates it unless opts.NoCreate is set.
// Options given in the URL apply where opts leaves the field zero. Close
// closes the pool.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	dsn := rawURL
	if u, err := url.Parse(rawURL); err == nil && (strings.EqualFold(u.Scheme, "mysql") || strings.EqualFold(u.Scheme, "mariadb")) {
		d, fromURL, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		dsn, opts = d, driver.FillZero(opts, fromURL)
	}
	o, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	cfg, err := mysqldrv.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	if cfg.DBName == "" {
		return nil, errors.New("mysql: the DSN names no database")
	}
	conn, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	db := sql.OpenDB(conn)
	// A Store keeps up to four connections for its bells and one per
	// waiting Lock out of the pool; keep a few idle ones for the calls.
	db.SetMaxIdleConns(8)
	s := newStore(db, o)
	s.ownDB = true
	if err := s.init(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over db, which stays the caller's: Close leaves it
// open, and the caller closes it after closing the Store (and every baton
// Client over it). db must be a go-sql-driver pool whose DSN names a
// database. The store checks (and, unless opts.NoCreate is set, creates)
// the lock table on first use. Besides the connections of its calls, a
// Store takes up to four connections from db for its bells (one for each
// Acquire it runs at once; no more than a quarter of a limit set with
// SetMaxOpenConns, and at least one), for as long as it is open, and one
// more for each Lock that waits, while it waits: a limited pool must leave
// room for them.
func New(db *sql.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, errors.New("mysql: db is nil")
	}
	o, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	return newStore(db, o), nil
}

func checkOptions(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Reclaim == 0 {
		o.Reclaim = DefaultReclaim
	}
	if o.MaxGrace == 0 {
		o.MaxGrace = DefaultMaxGrace
	}
	if o.MaxGrace < 0 {
		return o, fmt.Errorf("mysql: Options.MaxGrace is negative (%v)", o.MaxGrace)
	}
	return o, checkTable(o.Table)
}

func newStore(db *sql.DB, o Options) *Store {
	s := &Store{
		db:      db,
		opts:    o,
		obj:     newObjects(o.Table),
		initSem: make(chan struct{}, 1),
		watches: make(map[driver.Key]*watch),
		refused: make(map[driver.Key]*blocker),
		busy:    driver.BusyNames{For: busyFor, Max: maxBusy},
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.bells = &bells{db: db, where: map[string]*bellConn{}, lost: map[string]bool{}, max: maxBells}
	return s
}

func parseURL(u *url.URL) (string, *Options, error) {
	switch strings.ToLower(u.Scheme) {
	case "mysql", "mariadb":
	default:
		return "", nil, fmt.Errorf("mysql: URL scheme %q is not mysql or mariadb", u.Scheme)
	}
	if u.Opaque != "" {
		return "", nil, fmt.Errorf("mysql: URL %q: want mysql://user:password@host:port/database", u.Redacted())
	}
	var o Options
	q := u.Query()
	socket := ""
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch {
		case k == "socket":
			socket = v
			q.Del(k)
		case k == "baton_table":
			o.Table = v
			q.Del(k)
		case k == "baton_nocreate" || k == "baton_durable":
			on, ok := driver.ParseFlag(v)
			if !ok {
				return "", nil, fmt.Errorf("mysql: %s=%q in the URL: want 1 or 0", k, v)
			}
			if k == "baton_durable" {
				o.Durable = on
			} else {
				o.NoCreate = on
			}
			q.Del(k)
		case k == "baton_reclaim":
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", nil, fmt.Errorf("mysql: baton_reclaim=%q in the URL: want a duration such as 10m (negative: never)", v)
			}
			o.Reclaim = d
			q.Del(k)
		case k == "baton_maxgrace":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "", nil, fmt.Errorf("mysql: baton_maxgrace=%q in the URL: want a positive duration such as 60s", v)
			}
			o.MaxGrace = d
			q.Del(k)
		case strings.HasPrefix(k, "baton_"):
			return "", nil, fmt.Errorf("mysql: unknown URL parameter %s (known: baton_table, baton_nocreate, baton_reclaim, baton_durable, baton_maxgrace)", k)
		}
	}
	if o.Table != "" {
		if err := checkTable(o.Table); err != nil {
			return "", nil, err
		}
	}
	// The driver parses its own parameters from a DSN without address;
	// everything else is set on the config it returns.
	cfg, err := mysqldrv.ParseDSN("/?" + q.Encode())
	if err != nil {
		return "", nil, fmt.Errorf("mysql: URL parameters: %w", err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return "", nil, fmt.Errorf("mysql: URL %q: want one database name as its path", u.Redacted())
	}
	switch {
	case socket != "":
		if u.Host != "" {
			return "", nil, fmt.Errorf("mysql: URL %q has both a host and a socket", u.Redacted())
		}
		cfg.Net, cfg.Addr = "unix", socket
	case u.Host == "":
		return "", nil, fmt.Errorf("mysql: URL %q has no host (or socket= parameter)", u.Redacted())
	default:
		host, port := u.Hostname(), u.Port()
		if port == "" {
			port = "3306"
		}
		cfg.Net, cfg.Addr = "tcp", net.JoinHostPort(host, port)
	}
	return cfg.FormatDSN(), &o, nil
}

// init checks or creates the objects and prepares the statements, once.
func (s *Store) init(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	select {
	case s.initSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.initSem }()
	if s.ready.Load() {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if err := retry(ctx, func() error { return s.setup(ctx) }); err != nil {
		return err
	}
	s.ready.Store(true)
	if s.opts.Reclaim > 0 {
		s.janitor.Add(1)
		go s.reclaimEvery(s.opts.Reclaim)
	}
	return nil
}

func (s *Store) setup(ctx context.Context) error {
	var serverVersion string
	var dbName sql.NullString
	if err := s.db.QueryRowContext(ctx, "SELECT VERSION(), DATABASE()").Scan(&serverVersion, &dbName); err != nil {
		return fmt.Errorf("mysql: connecting: %w", err)
	}
	if !dbName.Valid || dbName.String == "" {
		return errors.New("mysql: the connection has no current database: name one in the DSN")
	}
	srv := server{mariadb: strings.Contains(strings.ToLower(serverVersion), "mariadb"), dbName: dbName.String}
	if err := checkVersion(serverVersion, srv.mariadb); err != nil {
		return err
	}
	s.srv = srv
	durable, err := s.mode(ctx, s.db)
	if err != nil {
		return err
	}
	ok, err := s.current(ctx, s.db, durable)
	if err != nil {
		return err
	}
	if !ok {
		if s.opts.NoCreate {
			return fmt.Errorf("mysql: lock table %s in database %s is missing or out of date (want %q), and Options.NoCreate is set: create it with the script from mysql.DDL",
				s.obj.counters, srv.dbName, version(durable))
		}
		if durable, err = s.create(ctx, srv.dbName); err != nil {
			return err
		}
	}
	var st stmts
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var p *sql.Stmt
		p, err = s.db.PrepareContext(ctx, q)
		return p
	}
	// Metadata too long for a MEMORY row is in T_meta (flag 2).
	const cols = "h.name, h.owner, h.queued, h.mode, h.lim, h.token, h.host, COALESCE(h.meta, m.meta), h.ttl_ns, " +
		"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', h.created), " +
		"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', h.renewed), " +
		"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', h.expires), " +
		"TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	h := s.obj.holds + " h LEFT JOIN " + s.obj.meta + " m ON h.flags & 2 AND m.name = h.name AND m.owner = h.owner AND m.token = h.token"
	st.acquireSQL = "CALL " + s.obj.grant + "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	st.takeSQL = "CALL " + s.obj.take + "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	st.releaseSQL = "CALL " + s.obj.release + "(?)"
	st.release1SQL = "CALL " + s.obj.release1 + "(?, ?, ?, ?)"
	st.acquire = prep(st.acquireSQL)
	st.take = prep(st.takeSQL)
	st.renew = prep("CALL " + s.obj.renew + "(?)")
	st.release = prep(st.releaseSQL)
	st.release1 = prep(st.release1SQL)
	st.bind = prep("CALL " + s.obj.bind + "(?, ?, ?)")
	st.raise = prep("CALL " + s.obj.raise + "(?, ?)")
	st.session = prep("CALL " + s.obj.session + "(?, ?, ?)")
	st.listAll = prep("SELECT " + cols + " FROM " + h)
	st.listName = prep("SELECT " + cols + " FROM " + h + " WHERE h.name = UNHEX(?)")
	st.listOwner = prep("SELECT " + cols + " FROM " + h + " WHERE h.owner = UNHEX(?)")
	// Names are UTF-8, which has no byte 0xFF: the names with a prefix p
	// are exactly those in [p, p || 0xFF).
	st.listPrefix = prep("SELECT " + cols + " FROM " + h + " WHERE h.name >= UNHEX(?) AND h.name < UNHEX(?)")
	st.purge = "CALL " + s.obj.purge + "()"
	st.reclaim = "CALL " + s.obj.reclaim + "(?)"
	st.txrow = "CALL " + s.obj.txrow + "(?)"
	if err != nil {
		st.close()
		return fmt.Errorf("mysql: preparing statements: %w", err)
	}
	// A session's renewal reads SYSDATE as it runs; a server started with
	// --sysdate-is-now reads it at the statement's start, as NOW, which
	// sessions cannot use (see T_session).
	moves := false
	if !durable && err == nil {
		err = s.db.QueryRowContext(ctx, "SELECT SYSDATE(6) > NOW(6) FROM (SELECT SLEEP(0.002)) d").Scan(&moves)
	}
	if err != nil {
		st.close()
		return fmt.Errorf("mysql: preparing statements: %w", err)
	}
	s.st, s.fast = st, !durable
	if moves && s.sessions == nil {
		s.sessions = sessions.New(s)
	}
	return nil
}

// mode tells whether the lock table is durable: the engine of its holds
// table if it exists, Options.Durable otherwise. A table keeps its mode:
// switching it while clients hold locks would hide their holds from each
// other.
func (s *Store) mode(ctx context.Context, q queryRower) (durable bool, err error) {
	var engine sql.NullString
	err = q.QueryRowContext(ctx, "SELECT MAX(ENGINE) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
		s.obj.holds).Scan(&engine)
	if err != nil {
		return false, fmt.Errorf("mysql: looking up the lock table: %w", err)
	}
	switch {
	case !engine.Valid && !s.opts.Durable && !s.srv.mariadb:
		// MySQL with GTID consistency enforced refuses a MEMORY table's
		// writes in a transaction, which a fast table makes.
		var gtid string
		if err := q.QueryRowContext(ctx, "SELECT @@GLOBAL.enforce_gtid_consistency").Scan(&gtid); err != nil {
			return false, fmt.Errorf("mysql: looking up the lock table: %w", err)
		}
		return gtid != "OFF" && gtid != "0", nil
	case !engine.Valid:
		return s.opts.Durable, nil
	case strings.EqualFold(engine.String, "MEMORY"):
		if s.opts.Durable {
			return false, fmt.Errorf("mysql: Options.Durable is set, but lock table %s was created fast (its holds are in a MEMORY table): use another table for durable locks", s.obj.counters)
		}
		return false, nil
	}
	return true, nil
}

// checkVersion refuses servers without JSON_TABLE.
func checkVersion(version string, mariadb bool) error {
	major, minor := 0, 0
	v := version
	if i := strings.IndexFunc(v, func(r rune) bool { return r != '.' && (r < '0' || r > '9') }); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) >= 2 {
		major, _ = strconv.Atoi(parts[0])
		minor, _ = strconv.Atoi(parts[1])
	}
	if mariadb && (major > 10 || major == 10 && minor >= 6) || !mariadb && major >= 8 {
		return nil
	}
	return fmt.Errorf("mysql: server version %q is too old: the store needs MySQL 8.0 or MariaDB 10.6 (for JSON_TABLE)", version)
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// current reports whether the tables exist and every procedure has this
// version's comment.
func (s *Store) current(ctx context.Context, q queryRower, durable bool) (bool, error) {
	var tables, procs int
	ps, ts := s.obj.procedures(), s.obj.tables()
	var args []any
	for _, t := range ts {
		args = append(args, t)
	}
	for _, p := range ps {
		args = append(args, p)
	}
	args = append(args, version(durable))
	err := q.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN (?`+strings.Repeat(", ?", len(ts)-1)+`)),
		(SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()
		    AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME IN (?`+strings.Repeat(", ?", len(ps)-1)+`) AND ROUTINE_COMMENT = ?)`,
		args...).Scan(&tables, &procs)
	if err != nil {
		return false, fmt.Errorf("mysql: looking up the lock table: %w", err)
	}
	return tables == len(ts) && procs == len(ps), nil
}

// create runs the DDL on a connection that holds a GET_LOCK named after
// the table, so that concurrent first opens take turns (DDL is not
// transactional in MySQL). It returns the table's mode, which a process
// that created the table meanwhile may have chosen.
func (s *Store) create(ctx context.Context, dbName string) (durable bool, err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("mysql: creating the lock table: %w", err)
	}
	// The GET_LOCK dies with the connection: discard it rather than return
	// it to the pool.
	defer discard(conn)
	ddlLock := "baton-ddl:" + hash(dbName, s.opts.Table) // GET_LOCK names are server-wide
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 60)", ddlLock).Scan(&got); err != nil {
		return false, fmt.Errorf("mysql: creating the lock table: %w", err)
	}
	if got.Int64 != 1 {
		return false, fmt.Errorf("mysql: creating the lock table %s: another process held the DDL lock for 60s", s.obj.counters)
	}
	// Another process may have created it while we waited for the lock.
	if durable, err = s.mode(ctx, conn); err != nil {
		return false, err
	}
	if ok, err := s.current(ctx, conn, durable); err != nil || ok {
		return durable, err
	}
	// Procedures keep the sql_mode they were created with.
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'"); err != nil {
		return false, fmt.Errorf("mysql: creating the lock table: %w", err)
	}
	// A holds table made by schema 1 lacks the flags column, one made
	// before schema 3 the sid column, and one made before hand-off the
	// hold_ttl column.
	var holds, flags, sid, holdTTL int
	if err := conn.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?),
		(SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'flags'),
		(SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'sid'),
		(SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'hold_ttl')`,
		s.obj.holds, s.obj.holds, s.obj.holds, s.obj.holds).Scan(&holds, &flags, &sid, &holdTTL); err != nil {
		return false, fmt.Errorf("mysql: creating the lock table %s: %w", s.obj.counters, err)
	}
	stmts := s.obj.statements(durable)
	var alter []string
	if holds == 1 && flags == 0 {
		alter = append(alter, "ADD COLUMN flags TINYINT NOT NULL DEFAULT 0")
	}
	if holds == 1 && sid == 0 {
		alter = append(alter, "ADD COLUMN sid VARBINARY(32) NOT NULL DEFAULT ''", "ADD KEY sid_ix (sid) USING BTREE")
	}
	if holds == 1 && holdTTL == 0 {
		alter = append(alter, "ADD COLUMN hold_ttl BIGINT NOT NULL DEFAULT 0")
	}
	if len(alter) > 0 {
		// A MEMORY table altered takes this session's size limit, which
		// the script's first statement sets.
		if !durable {
			if _, err := conn.ExecContext(ctx, stmts[0]); err != nil {
				return false, fmt.Errorf("mysql: upgrading the lock table %s: %w", s.obj.counters, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE "+s.obj.holds+" "+strings.Join(alter, ", ")); err != nil {
			return false, fmt.Errorf("mysql: upgrading the lock table %s: %w", s.obj.counters, err)
		}
	}
	for _, stmt := range stmts {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return false, fmt.Errorf("mysql: creating the lock table %s: %w", s.obj.counters, err)
		}
	}
	return durable, nil
}

// discard closes conn's underlying connection instead of returning it to
// the pool, which also ends its session and releases its GET_LOCKs.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldriverErrBadConn })
	_ = conn.Close()
}

func hash(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:48]
}

// begin is called by every method: the store must be open and set up.
func (s *Store) begin(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.init(ctx)
}

// retry runs f again, a few times, when it failed on a broken connection
// (the pool drops such connections and dials anew: after a server restart,
// idle connections fail once each) or on a deadlock. Every call of the
// store may be repeated safely: an acquire granted by a lost attempt is
// extended by the next one, with the same token.
func retry(ctx context.Context, f func() error) error {
	return driver.Retry(ctx, 5, 5*time.Millisecond, retryable, f)
}

func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1213, // deadlock
			1205,       // lock wait timeout: a name of the batch was held by InLockedTx for a second
			1615,       // prepared statement needs to be re-prepared
			1053,       // server shutdown in progress
			1927,       // connection killed (MariaDB)
			2006, 2013: // server gone away, lost connection
			return true
		}
		return false
	}
	var ne net.Error
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return false // the server is not there: retrying at once will not help
	}
	return errors.Is(err, mysqldrv.ErrInvalidConn) || errors.Is(err, sqldriverErrBadConn) ||
		errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("mysql: %s: %w", op, err)
}

// callGrace is how long a CALL that changes locks may outlive its
// caller's context. Cancelling a query closes its connection, but MySQL
// runs the statement to its end all the same, without anyone to tell the
// outcome to: a grant or queue entry nobody knows of, which would block the
// name until it expires. The procedures bound their lock waits to a
// second, so a CALL normally returns by itself soon after its context
// ends, with an outcome the caller can act on (baton releases a grant or
// queue entry it no longer wants); the grace only cuts off a server or
// network that stopped answering.
const callGrace = 3 * time.Second

// callCtx returns the context for a CALL made on behalf of ctx.
func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return driver.Outlive(ctx, callGrace)
}

func ns(d time.Duration) int64 { return int64(d) }

func usTime(us int64) time.Time { return time.UnixMicro(us).UTC() }

// blocker is the entry a refused request waits for (see Acquire).
type blocker struct {
	owner  string
	queued bool
	token  uint64
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var meta []byte
	if len(req.Meta) > 0 {
		var err error
		if meta, err = json.Marshal(req.Meta); err != nil {
			return nil, fmt.Errorf("mysql: acquire: metadata: %w", err)
		}
	}
	// The bell goes up before the entry can exist, so that whoever sees
	// the entry finds its bell held: the procedure takes it, on a bell
	// connection, or else it is taken before the call.
	bell := s.bellName(req.Name, req.Owner)
	took := false
	var (
		status                    int8
		token                     uint64
		created, renewed, expires int64
		after                     int64
		bOwner                    []byte
		bQueued                   int8
		bToken                    uint64
		flags                     int8
		x                         *sessions.Session
		sid                       string
	)
	if s.sessionsFor(req) {
		if x = s.sessions.Session(req.TTL, false); x != nil {
			sid = x.ID()
		}
	}
	queue, long := 0, 0
	if req.Queue {
		queue = 1
	}
	host := req.Host
	if s.fast {
		host = cut(host, maxHost)
		if req.TTL > s.opts.MaxGrace {
			long = 1
		}
	}
	// T_take decides the commonest exclusive requests in a lighter call
	// than T_grant, and hands the others to T_grant: a waiter asking
	// again, which holds its bell, takes the hold a release handed it
	// (queue 3); on a name this Store has not found busy lately, a grant;
	// on one it has, the first ask joins the queue without the name's
	// stripe (queue 2). Requests not to queue on a busy name go to
	// T_grant at once.
	proc, procSQL := s.st.acquire, s.st.acquireSQL
	if s.fast && req.Mode == driver.Exclusive && long == 0 && len(meta) <= maxMeta {
		switch {
		case req.Queue && s.bells.holds(bell):
			proc, procSQL, queue = s.st.take, s.st.takeSQL, 3
		case !s.busy.Recent(req.Name):
			proc, procSQL = s.st.take, s.st.takeSQL
		case req.Queue:
			proc, procSQL, queue = s.st.take, s.st.takeSQL, 2
		}
	}
	cctx, cancel := callCtx(ctx)
	defer cancel()
	err := retry(ctx, func() error {
		for range 3 {
			bOwner, flags = nil, 0
			call := func(st *sql.Stmt, bell string) (bool, error) {
				err := st.QueryRowContext(cctx, req.Name, req.Owner, int8(req.Mode), int32(req.Limit),
					ns(req.TTL), queue, ns(req.QueueTTL), host, meta, long, bell, sid).
					Scan(&status, &token, &created, &renewed, &expires, &after, &bOwner, &bQueued, &bToken, &flags)
				return flags&1 == 1, err
			}
			ok, err := s.bells.acquireCall(cctx, bell, procSQL, call)
			if !ok {
				if !took {
					took = s.bells.take(ctx, bell)
				}
				_, err = call(proc, "")
			}
			switch {
			case err != nil:
				return err
			case status == 5: // the TTL is longer than a grace period covers
				err = s.raise(cctx, req.TTL, -1)
			case status == 6: // the name's counter is full
				err = s.raise(cctx, 0, int64(token))
			default:
				return nil
			}
			if err != nil {
				return err
			}
		}
		return fmt.Errorf("acquire: status %d after raising", status)
	})
	keep := err == nil && (status <= 1 || status == 2 && req.Queue)
	if took && !keep {
		s.bells.drop(bell)
	}
	if err != nil {
		return nil, wrap("acquire", err)
	}
	// The outcome stands even if ctx ended meanwhile: a grant is returned
	// (the caller releases it if it no longer wants it).
	switch status {
	case 0, 1:
		s.setBlocker(req, nil)
		g := &driver.Grant{Token: token, Created: usTime(created), Renewed: usTime(renewed), Expires: usTime(expires), Extended: status == 1}
		if flags&2 != 0 && x != nil {
			g.Session = x
		} else if x == nil && s.sessionsFor(req) {
			s.sessions.Session(req.TTL, true) // makes one, for the grants to come
		}
		return g, nil
	case 2:
		s.busy.Mark(req.Name)
		if bOwner != nil {
			s.setBlocker(req, &blocker{owner: string(bOwner), queued: bQueued == 1, token: bToken})
		} else {
			s.setBlocker(req, nil)
		}
		return nil, &driver.Busy{After: time.Duration(after)}
	case 3:
		return nil, driver.ErrModeConflict
	case 4:
		return nil, driver.ErrLimitConflict
	}
	return nil, fmt.Errorf("mysql: acquire: unexpected status %d", status)
}

// A Store sends a name it was refused on to T_grant rather than T_take
// for busyFor, and remembers at most maxBusy such names (beyond that, all
// are forgotten at once: a forgotten name costs a call of T_take that
// hands over to T_grant).
const (
	busyFor = time.Second
	maxBusy = 10000
)

// sessionsFor reports whether req's hold may be bound to a session: one
// the client keeps alive, on a fast table, of a TTL the grace period after
// a restart covers (sessions live in a MEMORY table).
func (s *Store) sessionsFor(req *driver.Request) bool {
	return req.KeepAlive && s.sessions != nil && req.TTL <= s.opts.MaxGrace
}

// KeepSession implements sessions.Store: one call of T_session. A new
// session raises the longest TTL the grace period covers, durably, when
// it must; none is made longer than MaxGrace, or on a durable table.
func (s *Store) KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error) {
	if s.partitioned.Load() {
		return false, errors.New("mysql: partitioned (a test's fault)")
	}
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	if s.sessions == nil || ttl > s.opts.MaxGrace {
		return false, nil
	}
	var status int8
	err := retry(ctx, func() error {
		for range 2 {
			if err := s.st.session.QueryRowContext(ctx, id, ns(ttl), create).Scan(&status); err != nil {
				return err
			}
			if status != 5 {
				return nil
			}
			if err := s.raise(ctx, ttl, -1); err != nil {
				return err
			}
		}
		return fmt.Errorf("status %d after raising", status)
	})
	if err != nil {
		return false, wrap("session", err)
	}
	return status == 1, nil
}

// ReleaseSession implements driver.SessionReleaser: the plain holds bound
// to x go in one statement, without the names' stripes, as a lease's own
// release of a plain hold does (see T_release); those kept in InnoDB as
// well (long leases, long metadata) through T_release. Their bells are
// released when the Store closes. The session's renewal stops first, and
// its record goes last.
func (s *Store) ReleaseSession(ctx context.Context, x driver.Session) error {
	xs, ok := x.(*sessions.Session)
	if !ok || s.sessions == nil {
		return errors.New("mysql: release session: not a session of this store")
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	if err := s.sessions.Stop(ctx, xs); err != nil {
		return wrap("release session", err)
	}
	var keys []driver.Key
	err := retry(ctx, func() error {
		keys = keys[:0]
		rows, err := s.db.QueryContext(ctx, "SELECT name, owner FROM "+s.obj.holds+" WHERE sid = ? AND flags <> 0", xs.ID())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k driver.Key
			if err := rows.Scan(&k.Name, &k.Owner); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	if err == nil && len(keys) > 0 {
		err = s.ReleaseQuiet(ctx, keys)
	}
	if err == nil {
		err = retry(ctx, func() error {
			_, err := s.db.ExecContext(ctx, "DELETE FROM "+s.obj.holds+" WHERE sid = ? AND queued = 0 AND flags = 0", xs.ID())
			return err
		})
	}
	if err == nil {
		_, err = s.db.ExecContext(ctx, "DELETE FROM "+s.obj.sessions+" WHERE id = ?", xs.ID())
	}
	return wrap("release session", err)
}

// EndSession implements sessions.Store. The holds bound to the session
// stay until their expiry, which is no later than the session's was.
func (s *Store) EndSession(ctx context.Context, id string) error {
	if !s.ready.Load() {
		return nil
	}
	_, err := s.db.ExecContext(ctx, "DELETE FROM "+s.obj.sessions+" WHERE id = ?", id)
	return wrap("end session", err)
}

// raise records durably that grace periods must cover leases of ttl and,
// if epoch >= 0, starts the epoch after it (see T_raise).
func (s *Store) raise(ctx context.Context, ttl time.Duration, epoch int64) error {
	var max int64
	if err := s.st.raise.QueryRowContext(ctx, ns(ttl), epoch).Scan(&max); err != nil {
		return err
	}
	for {
		old := s.maxTTL.Load()
		if max <= old || s.maxTTL.CompareAndSwap(old, max) {
			return nil
		}
	}
}

// cut returns s cut to at most n bytes, at a UTF-8 character boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// holdsJSON encodes holds, in the order of their indexes in order, as the
// renew procedure's argument.
func holdsJSON(holds []driver.Hold, order []int) string {
	n := 2
	for _, h := range holds {
		n += 2*len(h.Name) + 2*len(h.Owner) + 30
	}
	b := make([]byte, 0, n) // one allocation, and one for the string
	b = append(b, '[')
	for i, k := range order {
		h := holds[k]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `["`...)
		b = hex.AppendEncode(b, []byte(h.Name))
		b = append(b, `","`...)
		b = hex.AppendEncode(b, []byte(h.Owner))
		b = append(b, `",`...)
		b = strconv.AppendInt(b, ns(h.TTL), 10)
		b = append(b, ']')
	}
	b = append(b, ']')
	return string(b)
}

// keysJSON encodes keys, with the bell to release for each (none if bells
// is nil or has ""), as the release procedure's argument.
func keysJSON(keys []driver.Key, bells []string) string {
	n := 2
	for i, k := range keys {
		n += 2*len(k.Name) + 2*len(k.Owner) + 12
		if bells != nil {
			n += len(bells[i])
		}
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `["`...)
		b = hex.AppendEncode(b, []byte(k.Name))
		b = append(b, `","`...)
		b = hex.AppendEncode(b, []byte(k.Owner))
		b = append(b, `","`...)
		if bells != nil {
			b = append(b, bells[i]...) // "baton:" and hex digits only
		}
		b = append(b, `"]`...)
	}
	b = append(b, ']')
	return string(b)
}

// parseOut splits a batch result "i,f1,f2…;…" into its integer fields;
// each gets one slice for every record, and must not keep it.
func parseOut(out string, fields int, each func(i int, f []int64) error) error {
	f := make([]int64, fields)
	for rest := out; rest != ""; {
		var rec string
		rec, rest, _ = strings.Cut(rest, ";")
		if rec == "" {
			continue
		}
		bad := func() error { return fmt.Errorf("malformed result %q", rec) }
		first, more, _ := strings.Cut(rec, ",")
		i, err := strconv.Atoi(first)
		if err != nil {
			return bad()
		}
		for k := range f {
			if more == "" {
				return bad()
			}
			var v string
			v, more, _ = strings.Cut(more, ",")
			if f[k], err = strconv.ParseInt(v, 10, 64); err != nil {
				return bad()
			}
		}
		if more != "" {
			return bad()
		}
		if err := each(i, f); err != nil {
			return err
		}
	}
	return nil
}

// Renew implements driver.Store.
func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	out := make([]*driver.Grant, len(holds))
	if len(holds) == 0 {
		return out, nil
	}
	// The procedure locks the names in the order it is given them: byte
	// order, as every batch does (see the package's SQL).
	order := make([]int, len(holds))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(holds[a].Name, holds[b].Name) })
	arg := holdsJSON(holds, order)
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if s.fast {
		var longest time.Duration
		for _, h := range holds {
			if h.TTL <= s.opts.MaxGrace && h.TTL > longest {
				longest = h.TTL
			}
		}
		if int64(longest) > s.maxTTL.Load() {
			if err := retry(ctx, func() error { return s.raise(cctx, longest, -1) }); err != nil {
				return nil, wrap("renew", err)
			}
		}
	}
	gs := make([]driver.Grant, len(holds)) // one allocation for all
	err := retry(ctx, func() error {
		clear(out)
		var res string
		if err := s.st.renew.QueryRowContext(cctx, arg).Scan(&res); err != nil {
			return err
		}
		return parseOut(res, 4, func(i int, f []int64) error {
			if i < 1 || i > len(out) {
				return fmt.Errorf("renew: entry %d out of range", i)
			}
			k := order[i-1]
			gs[k] = driver.Grant{Token: uint64(f[0]), Created: usTime(f[1]), Renewed: usTime(f[2]), Expires: usTime(f[3])}
			out[k] = &gs[k]
			return nil
		})
	})
	if err != nil {
		return nil, wrap("renew", err)
	}
	// A hold that is gone needs its bell no more.
	var gone []string
	for i, g := range out {
		if g == nil {
			gone = append(gone, s.bellName(holds[i].Name, holds[i].Owner))
		}
	}
	s.bells.drop(gone...)
	return out, nil
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	out := make([]bool, len(keys))
	err := s.release(ctx, keys, "", func(res string) error {
		clear(out)
		return parseOut(res, 1, func(i int, f []int64) error {
			if i < 1 || i > len(out) {
				return fmt.Errorf("release: entry %d out of range", i)
			}
			out[i-1] = out[i-1] || f[0] == 1
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReleaseQuiet implements driver.QuietReleaser: a batch of plain holds
// takes one statement instead of two.
func (s *Store) ReleaseQuiet(ctx context.Context, keys []driver.Key) error {
	return s.release(ctx, keys, "q", func(string) error { return nil })
}

// release calls the release procedure with keys, prefixed with prefix,
// and passes its answer to read.
func (s *Store) release(ctx context.Context, keys []driver.Key, prefix string, read func(res string) error) error {
	if err := s.begin(ctx); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	bs := make([]string, len(keys))
	for i, k := range keys {
		bs[i] = s.bellName(k.Name, k.Owner)
	}
	proc, procSQL := s.st.release, s.st.releaseSQL
	args := func(bells []string) []any { return []any{prefix + keysJSON(keys, bells)} }
	if s.fast && len(keys) == 1 && prefix == "" {
		// A lease's own release, in T_release_one; a name found busy
		// lately has its hand-off tried first.
		busy := 0
		if s.busy.Recent(keys[0].Name) {
			busy = 1
		}
		proc, procSQL = s.st.release1, s.st.release1SQL
		args = func(bells []string) []any {
			bell := ""
			if bells != nil {
				bell = bells[0]
			}
			return []any{keys[0].Name, keys[0].Owner, bell, busy}
		}
	}
	cctx, cancel := callCtx(ctx)
	defer cancel()
	err := retry(ctx, func() error {
		res, ok, err := s.bells.releaseCall(cctx, bs, procSQL, args)
		if !ok {
			err = proc.QueryRowContext(cctx, args(nil)...).Scan(&res)
		}
		if err != nil {
			return err
		}
		return read(res)
	})
	// The entries are gone (or the call failed, and they will expire):
	// ring the bells that the procedure did not.
	for _, k := range keys {
		s.clearBlocker(k)
	}
	s.bells.drop(bs...)
	if err != nil {
		return wrap("release", err)
	}
	return nil
}

// List implements driver.Store. It honours f.Name, f.Prefix and f.Owner.
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if f == nil {
		f = &driver.Filter{}
	}
	var st *sql.Stmt
	var args []any
	x := func(s string) string { return hex.EncodeToString([]byte(s)) }
	switch {
	case f.Name != "":
		st, args = s.st.listName, []any{x(f.Name)}
	case f.Owner != "":
		st, args = s.st.listOwner, []any{x(f.Owner)}
	case f.Prefix != "":
		st, args = s.st.listPrefix, []any{x(f.Prefix), x(f.Prefix) + "ff"}
	default:
		st = s.st.listAll
	}
	var out []driver.Holder
	err := retry(ctx, func() error {
		out = out[:0]
		rows, err := st.QueryContext(ctx, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h holderRow
			if err := rows.Scan(&h.name, &h.owner, &h.queued, &h.mode, &h.limit, &h.token, &h.host, &h.meta,
				&h.ttl, &h.created, &h.renewed, &h.expires, &h.now); err != nil {
				return err
			}
			hd, err := h.holder()
			if err != nil {
				return err
			}
			if strings.HasPrefix(hd.Name, f.Prefix) && (f.Name == "" || hd.Name == f.Name) && (f.Owner == "" || hd.Owner == f.Owner) {
				out = append(out, hd)
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap("list", err)
	}
	return out, nil
}

// Purge implements driver.Store.
func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	var out []driver.Holder
	err := retry(ctx, func() error {
		out = out[:0]
		rows, err := s.db.QueryContext(ctx, s.st.purge)
		if err != nil {
			return err
		}
		defer rows.Close()
		for {
			for rows.Next() {
				var h holderRow
				if err := rows.Scan(&h.name, &h.owner, &h.mode, &h.limit, &h.token, &h.host, &h.meta,
					&h.ttl, &h.created, &h.renewed, &h.expires, &h.now); err != nil {
					return err
				}
				hd, err := h.holder()
				if err != nil {
					return err
				}
				out = append(out, hd)
			}
			if !rows.NextResultSet() {
				break
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap("purge", err)
	}
	return out, nil
}

type holderRow struct {
	name, owner, host, meta        []byte
	queued, mode                   int8
	limit                          int32
	token                          uint64
	ttl                            int64
	created, renewed, expires, now int64
}

func (h *holderRow) holder() (driver.Holder, error) {
	out := driver.Holder{
		Name: string(h.name), Owner: string(h.owner), Mode: driver.Mode(h.mode), Limit: int(h.limit),
		Queued: h.queued == 1, Host: string(h.host), TTL: time.Duration(h.ttl),
		Created: usTime(h.created), Renewed: usTime(h.renewed), Expires: usTime(h.expires),
		Left: time.Duration(h.expires-h.now) * time.Microsecond,
	}
	if !out.Queued {
		out.Token = h.token
	}
	if len(h.meta) > 0 {
		if err := json.Unmarshal(h.meta, &out.Meta); err != nil {
			return out, fmt.Errorf("metadata of %q: %w", out.Name, err)
		}
	}
	return out, nil
}

// Close releases the store's bells and connections and, for a store made
// by Open, closes its pool. A pool given to New stays open. Waits in
// progress end.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cancel()
		// Let a setup in progress finish (it then finds the store closed
		// next time), so that its statements are closed below, and its
		// janitor, if it started one, is waited for.
		s.initSem <- struct{}{}
		defer func() { <-s.initSem }()
		if s.sessions != nil {
			s.sessions.Close() // ends and deletes them, while the pool is open
		}
		s.janitor.Wait()
		s.mu.Lock()
		ws := make([]*watch, 0, len(s.watches))
		for _, w := range s.watches {
			ws = append(ws, w)
		}
		s.mu.Unlock()
		for _, w := range ws {
			w.Close()
		}
		s.bells.close()
		s.st.close()
		if s.ownDB {
			s.db.Close()
		}
	})
	return nil
}

// bellName is the GET_LOCK name of the entry (name, owner): a hash, since
// GET_LOCK names are limited to 64 characters and are server-wide.
func (s *Store) bellName(name, owner string) string {
	return "baton:" + hash(s.srv.dbName, s.opts.Table, name, owner)
}
