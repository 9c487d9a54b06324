// Package postgres is baton's PostgreSQL store: locks shared by every
// process that reaches one PostgreSQL database (version 12 or later). It
// uses pgx v5. Import it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/postgres"
//
//	client, err := baton.Open(ctx, "postgres://app@db.example.com/app?sslmode=verify-full", nil)
//
// or open a store directly with [Open] (or [New], over a pool of your own)
// and pass it to baton.New. Tests and faultcheck run on PostgreSQL 15, 18.
//
// # URL
//
// postgres:// and postgresql:// URLs are handed to pgx as they are, so
// everything about the connection (TLS with sslmode, sslrootcert, sslcert…,
// passwords, .pgpass, PG* environment variables, pool_max_conns and the
// other pgxpool settings) is pgx's own configuration. These query
// parameters are baton's and are removed before pgx sees the URL:
//
//	baton_table=NAME    Options.Table
//	baton_schema=NAME   Options.Schema
//	baton_nocreate=1    Options.NoCreate
//	baton_durable=1     Options.Durable
//	baton_maxgrace=D    Options.MaxGrace (a Go duration: 90s)
//	baton_reclaim=D     Options.Reclaim (10m; -1s: never)
//
// # Schema
//
// With Options.Table T (baton_locks by default), in Options.Schema or else
// the connection's current schema, the store uses the tables T (a row per
// lock name in use), T_holds, T_epochs, the unlogged T_incarnation and
// T_sessions, and the PL/pgSQL functions T_acquire, T_join, T_renew,
// T_release, T_release_one, T_purge, T_list, T_bind, T_reclaim and
// T_session with their helpers: each call of a Store is one statement, one
// round trip, one transaction.
// [DDL] returns the script.
// Unless Options.NoCreate is set, the store runs it on first use when the
// table is missing or was made by another version of this package; its
// role then needs to create tables and functions in the schema. With
// NoCreate, run the script yourself; the store's role then needs SELECT,
// INSERT, UPDATE and DELETE on the tables and EXECUTE on the functions.
// Idle names' rows are reclaimed every Options.Reclaim. A store whose
// role owns the holds table vacuums it when contention leaves many dead
// queue entries there (docs/stores/postgres.md#vacuum-of-a-hot-names-queue).
//
// # Guarantees and limits
//
// Each decision about a name is taken under that name's row lock, with the
// grant rules of package lockstate. Fencing tokens of a name grow for the
// life of the table, across crashes, failovers and reclaims: each carries
// an epoch above its low 32 bits.
//
// Clock: the server's clock_timestamp(), read under the row lock; clients'
// clocks may disagree. Stepping the server's clock (rather than slewing
// it) shortens or lengthens every hold alive at that moment. Why:
// docs/stores/postgres.md#clock.
//
// Durability: lock calls commit without waiting for the disk. After a
// crash, a failover or a restore, the store starts a new epoch and grants
// nothing for a grace period as long as the longest lease granted without
// a flush (at most Options.MaxGrace), so that the holds the server forgot
// have ended first; their holders learn of it when renewing. Leases longer
// than MaxGrace, and all leases with Options.Durable, are flushed and need
// no grace. Not covered: fsync off, an asynchronous standby that missed an
// epoch (use synchronous replication), a pg_dump of a live table restored
// elsewhere (dump with --no-unlogged-table-data). Why:
// docs/stores/postgres.md#durability.
//
// Sessions: the holds a client keeps alive while it holds others live in
// the Store's session, a row of T_sessions renewed every third of the TTL
// in place of every hold, and each lives until the later of its own expiry
// and its session's. A crash forgets the sessions, and the grace period
// covers them as it covers the leases; sessions are kept only for leases
// the grace period covers (not with Options.Durable). Processes of
// versions from before sessions cannot open a table this version upgraded.
// See docs/stores/postgres.md#sessions.
//
// Hand-off: the call that lets a queued request in grants it in the
// server, in FIFO order, and tells its owner with LISTEN/NOTIFY
// (driver.Waiter), on one connection of its own while the Store has
// waiters; the waiter then takes the hold without a call of its own.
// LISTEN does not work through a pooler in transaction mode (PgBouncer).
// See docs/stores/postgres.md#hand-off-and-waking-waiters.
//
// [Store.InLockedTx] runs a function in a database transaction that holds a
// lock name as a lease would, with a fencing token from the same counter,
// for work that must commit atomically with the lock.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/sessions"
)

func init() {
	open := func(ctx context.Context, u *url.URL) (driver.Store, error) {
		return Open(ctx, u.String(), nil)
	}
	baton.Register("postgres", open)
	baton.Register("postgresql", open)
}

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "baton_locks"

// Options configure a Store. The zero value works.
type Options struct {
	// Table names the lock table (DefaultTable if empty) and the other
	// objects of the store, which take it as prefix (see the package
	// documentation): a lower-case letter or underscore, then up to 40
	// lower-case letters, digits or underscores.
	Table string
	// Schema holds the objects; empty means the connection's current
	// schema, looked up on first use.
	Schema string
	// NoCreate makes the store use existing objects, created beforehand
	// with the script from DDL, instead of creating them.
	NoCreate bool
	// Durable makes every grant and renewal wait for the disk (a
	// synchronous commit): no grace period after a crash of the server,
	// at the cost of a flush per grant (see Durability in the package
	// documentation).
	Durable bool
	// MaxGrace bounds the grace period after a crash of the server:
	// leases longer than it are granted and renewed durably (60s if
	// zero).
	MaxGrace time.Duration
	// Reclaim is how often the store drops entries that expired that
	// long ago and the rows of idle names, for all the clients of the
	// table together (10 minutes if zero; negative: never, Purge only).
	Reclaim time.Duration
}

// Defaults of Options.
const (
	DefaultMaxGrace = 60 * time.Second
	DefaultReclaim  = 10 * time.Minute
)

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("postgres: %w", driver.ErrClosed)

// Store is a client of a lock table in PostgreSQL. It is safe for
// concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) and sessions.Store
// (KeepSession, EndSession) are its contract with baton's Client, not an
// application API: use the store through baton.New.
type Store struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    Options
	hub     *hub
	busy    driver.BusyNames // names to send to join

	initSem chan struct{} // held while the schema is checked or created
	ready   atomic.Bool
	obj     objects // set once ready
	q       queries // set once ready

	closed    atomic.Bool
	closeOnce sync.Once
	mu        sync.Mutex      // orders starting the janitor and Close
	ctx       context.Context // ends at Close
	stop      context.CancelFunc
	janitor   sync.WaitGroup

	// for the janitor's vacuum (janitor.go)
	nQueued   atomic.Int64
	vacuumDue chan struct{}
	mayVacuum int // 0 unknown, 1 the role owns the holds table, -1 not; the janitor's

	sessions    *sessions.Keeper // nil with Options.Durable
	partitioned atomic.Bool      // a test's: session renewals fail
}

type queries struct {
	acquire, join, renew, release, releaseOne, list, purge, bind, reclaim, session string
}

// Open connects to the database at rawURL (a postgres:// URL, see the
// package documentation, or a keyword/value string as pgxpool.ParseConfig
// takes) with a pool of its own, checks the lock table and creates it
// unless opts.NoCreate is set. Options given in the URL apply where opts
// leaves the field zero. Close closes the pool.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	connString := rawURL
	if u, err := url.Parse(rawURL); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		c, fromURL, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		connString, opts = c, driver.FillZero(opts, fromURL)
	}
	o, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := newStore(pool, o)
	s.ownPool = true
	if err := s.init(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// New returns a store over pool, which stays the caller's: Close leaves it
// open, and the caller closes it after closing the Store (and every baton
// Client over it). The store checks (and, unless opts.NoCreate is set,
// creates) the lock table on first use. Besides the pool's connections, a
// Store that has waiters opens one connection of its own, with the pool's
// connection settings, to listen for notifications.
func New(pool *pgxpool.Pool, opts *Options) (*Store, error) {
	if pool == nil {
		return nil, errors.New("postgres: pool is nil")
	}
	o, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	return newStore(pool, o), nil
}

func checkOptions(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	switch {
	case o.MaxGrace < 0:
		return o, fmt.Errorf("postgres: Options.MaxGrace %v is negative", o.MaxGrace)
	case o.MaxGrace == 0:
		o.MaxGrace = DefaultMaxGrace
	}
	if o.Reclaim == 0 {
		o.Reclaim = DefaultReclaim
	}
	if err := checkTable(o.Table); err != nil {
		return o, err
	}
	return o, checkSchema(o.Schema)
}

func newStore(pool *pgxpool.Pool, o Options) *Store {
	s := &Store{
		pool:      pool,
		opts:      o,
		hub:       newHub(pool.Config().ConnConfig, o.Table),
		busy:      driver.BusyNames{For: busyFor, Max: maxRemembered},
		initSem:   make(chan struct{}, 1),
		vacuumDue: make(chan struct{}, 1),
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if !o.Durable {
		s.sessions = sessions.New(s)
	}
	return s
}

// parseURL splits baton's parameters off a postgres:// URL.
func parseURL(u *url.URL) (string, *Options, error) {
	var o Options
	q := u.Query()
	for k, vs := range q {
		if !strings.HasPrefix(k, "baton_") {
			continue
		}
		v := vs[len(vs)-1]
		switch k {
		case "baton_table":
			o.Table = v
		case "baton_schema":
			o.Schema = v
		case "baton_nocreate", "baton_durable":
			on, ok := driver.ParseFlag(v)
			if !ok {
				return "", nil, fmt.Errorf("postgres: %s=%q in the URL: want 1 or 0", k, v)
			}
			if k == "baton_durable" {
				o.Durable = on
			} else {
				o.NoCreate = on
			}
		case "baton_maxgrace", "baton_reclaim":
			d, err := time.ParseDuration(v)
			if err != nil {
				return "", nil, fmt.Errorf("postgres: %s=%q in the URL: want a duration such as 90s or 10m", k, v)
			}
			if k == "baton_maxgrace" {
				o.MaxGrace = d
			} else {
				o.Reclaim = d
			}
		default:
			return "", nil, fmt.Errorf("postgres: unknown URL parameter %s (known: baton_table, baton_schema, baton_nocreate, baton_durable, baton_maxgrace, baton_reclaim)", k)
		}
		q.Del(k)
	}
	c := *u
	c.RawQuery = q.Encode()
	return c.String(), &o, nil
}

// init resolves the schema and checks or creates the objects, once.
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
	err := retry(ctx, func() error { return s.setup(ctx) })
	if err != nil {
		return err
	}
	s.ready.Store(true)
	s.mu.Lock()
	if !s.closed.Load() {
		s.janitor.Add(1)
		go s.janitorLoop()
	}
	s.mu.Unlock()
	return nil
}

func (s *Store) setup(ctx context.Context) error {
	schema, version, err := s.lookup(ctx, s.pool)
	if err != nil {
		return err
	}
	obj := newObjects(schema, s.opts.Table)
	if version != schemaVersion {
		if s.opts.NoCreate {
			what := "is missing"
			if version != "" {
				what = fmt.Sprintf("was created for %q, not %q", version, schemaVersion)
			}
			return fmt.Errorf("postgres: lock table %s %s, and Options.NoCreate is set: create it with the script from postgres.DDL", obj.counter, what)
		}
		if err := s.create(ctx, obj); err != nil {
			return err
		}
	}
	s.obj = obj
	s.q = queries{
		acquire:    "SELECT o_status, o_token, o_created, o_renewed, o_expires, o_after, o_bound FROM " + obj.acquire + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
		join:       "SELECT o_status, o_token, o_created, o_renewed, o_expires, o_after, o_bound FROM " + obj.join + "($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
		renew:      "SELECT o_i, o_token, o_created, o_renewed, o_expires FROM " + obj.renew + "($1, $2, $3, $4)",
		release:    "SELECT o_i, o_held FROM " + obj.release + "($1, $2)",
		releaseOne: "SELECT " + obj.releaseOne + "($1, $2)",
		list:       "SELECT * FROM " + obj.list + "($1, $2, $3)",
		purge:      "SELECT * FROM " + obj.purge + "()",
		bind:       "SELECT " + obj.bind + "($1, $2, $3)",
		reclaim:    "SELECT " + obj.reclaim + "($1)",
		session:    "SELECT " + obj.session + "($1, $2, $3, $4)",
	}
	return nil
}

// lookup returns the schema (Options.Schema, or the current one) and the
// version recorded on the lock table ("" if there is none).
func (s *Store) lookup(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (schema, version string, err error) {
	var sch, ver *string
	err = q.QueryRow(ctx, `SELECT s, obj_description(to_regclass(quote_ident(s) || '.' || quote_ident($2)), 'pg_class')
		FROM (SELECT coalesce(nullif($1, ''), current_schema()) AS s) x`, s.opts.Schema, s.opts.Table).Scan(&sch, &ver)
	if err != nil {
		return "", "", fmt.Errorf("postgres: looking up the lock table: %w", err)
	}
	if sch == nil {
		return "", "", errors.New("postgres: no schema: the connection's search_path names no existing schema; set Options.Schema")
	}
	if ver != nil {
		version = *ver
	}
	return *sch, version, nil
}

// create runs the DDL in a transaction that holds an advisory lock, so
// that concurrent first opens of the same table take turns.
func (s *Store) create(ctx context.Context, obj objects) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: creating the lock table: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "baton ddl "+obj.counter); err != nil {
		return fmt.Errorf("postgres: creating the lock table: %w", err)
	}
	// Another process may have created it while we waited for the lock.
	if _, version, err := s.lookup(ctx, tx); err != nil {
		return err
	} else if version == schemaVersion {
		return nil
	}
	if _, err := tx.Exec(ctx, obj.ddl()); err != nil {
		return fmt.Errorf("postgres: creating the lock table %s: %w", obj.counter, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: creating the lock table %s: %w", obj.counter, err)
	}
	return nil
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
// idle connections fail once each) or on a serialization failure (under a
// default isolation level above READ COMMITTED). Every call of the store
// may be repeated safely: an acquire granted by the lost attempt is
// extended by the next one, with the same token.
func retry(ctx context.Context, f func() error) error {
	return driver.Retry(ctx, 5, 5*time.Millisecond, retryable, f)
}

func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001", "40P01", // serialization failure, deadlock
			"57P01", "57P02", "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
			"08000", "08003", "08006": // connection exceptions
			return true
		}
		return false
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return false // the server is not there: retrying at once will not help
	}
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.As(err, &ne) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

func ns(d time.Duration) int64 { return int64(d) }

// durable is the functions' p_durable: the longest lease granted without
// a flush, in ns, or -1 for none.
func (s *Store) durable() int64 {
	if s.opts.Durable {
		return -1
	}
	return ns(s.opts.MaxGrace)
}

// busyFor is how long a Store sends a name it found busy to join.
const busyFor = time.Second

// callGrace is how long an acquire may outlive its caller's context (see
// driver.Outlive): room for a short wait on the name's row.
const callGrace = time.Second

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if g := s.hub.handedGrant(req, time.Now()); g != nil {
		s.busy.Mark(req.Name)
		return g, nil
	}
	// join is acquire made for contention: the first ask of an exclusive
	// request to wait, on a name this Store found busy lately, most likely
	// joins the queue (schema.sql).
	query := s.q.acquire
	if req.Mode == driver.Exclusive && req.Queue && s.busy.Recent(req.Name) && !s.hub.asked(req) {
		query = s.q.join
	}
	var (
		status                    int16
		token, after              int64
		created, renewed, expires time.Time
		bound                     bool
		x                         *sessions.Session
		sid                       *string
	)
	if s.sessionsFor(req) {
		if x = s.sessions.Session(req.TTL, false); x != nil {
			id := x.ID()
			sid = &id
		}
	}
	sent := time.Now()
	// The call outlives ctx: a statement whose connection closes still
	// commits, and a grant or queue entry nobody learns of would block the
	// name until it expires. Its outcome comes back instead, and baton
	// undoes what it no longer wants.
	cctx, cancel := driver.Outlive(ctx, callGrace)
	defer cancel()
	err := retry(ctx, func() error {
		return s.pool.QueryRow(cctx, query, req.Name, req.Owner, int16(req.Mode), int32(req.Limit),
			ns(req.TTL), req.Queue, ns(req.QueueTTL), req.Host, req.Meta, s.durable(), sid, s.hub.own).
			Scan(&status, &token, &created, &renewed, &expires, &after, &bound)
	})
	if err != nil {
		return nil, wrap("acquire", err)
	}
	switch status {
	case 0, 1:
		if req.Queue {
			s.hub.setMark(req, driver.ServerMark{})
		}
		g := &driver.Grant{Token: uint64(token), Created: created, Renewed: renewed, Expires: expires, Extended: status == 1}
		if bound && x != nil {
			g.Session = x
		} else if x == nil && s.sessionsFor(req) {
			s.sessions.Session(req.TTL, true)
		}
		return g, nil
	case 2:
		s.busy.Mark(req.Name)
		if req.Queue {
			// created is the server's clock, read after sent.
			s.hub.setMark(req, driver.ServerMark{Sent: sent, Server: created, Resolution: time.Microsecond})
			s.queued()
		}
		return nil, &driver.Busy{After: time.Duration(after)}
	case 3:
		return nil, driver.ErrModeConflict
	case 4:
		return nil, driver.ErrLimitConflict
	}
	return nil, fmt.Errorf("postgres: acquire: unexpected status %d", status)
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
	names, owners, ttls := make([]string, len(holds)), make([]string, len(holds)), make([]int64, len(holds))
	for i, h := range holds {
		names[i], owners[i], ttls[i] = h.Name, h.Owner, ns(h.TTL)
	}
	gs := make([]driver.Grant, len(holds)) // one allocation for all
	err := retry(ctx, func() error {
		clear(out)
		rows, err := s.pool.Query(ctx, s.q.renew, names, owners, ttls, s.durable())
		if err != nil {
			return err
		}
		var (
			i                         int32
			token                     int64
			created, renewed, expires time.Time
		)
		_, err = pgx.ForEachRow(rows, []any{&i, &token, &created, &renewed, &expires}, func() error {
			if i < 1 || int(i) > len(out) {
				return fmt.Errorf("renew: row %d out of range", i)
			}
			gs[i-1] = driver.Grant{Token: uint64(token), Created: created, Renewed: renewed, Expires: expires}
			out[i-1] = &gs[i-1]
			return nil
		})
		return err
	})
	if err != nil {
		return nil, wrap("renew", err)
	}
	return out, nil
}

// Release implements driver.Store.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	// A hold handed over and released before its owner took it must not
	// be taken later by a request of the same owner.
	s.hub.forget(keys)
	names, owners := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		names[i], owners[i] = k.Name, k.Owner
	}
	if len(keys) == 1 {
		err := retry(ctx, func() error {
			var held *bool
			err := s.pool.QueryRow(ctx, s.q.releaseOne, names[0], owners[0]).Scan(&held)
			out[0] = held != nil && *held
			return err
		})
		if err != nil {
			return nil, wrap("release", err)
		}
		return out, nil
	}
	err := retry(ctx, func() error {
		clear(out)
		rows, err := s.pool.Query(ctx, s.q.release, names, owners)
		if err != nil {
			return err
		}
		var (
			i    int32
			held bool
		)
		_, err = pgx.ForEachRow(rows, []any{&i, &held}, func() error {
			if i < 1 || int(i) > len(out) {
				return fmt.Errorf("release: row %d out of range", i)
			}
			out[i-1] = out[i-1] || held
			return nil
		})
		return err
	})
	if err != nil {
		return nil, wrap("release", err)
	}
	return out, nil
}

// List implements driver.Store. It honours f.Name, f.Prefix and f.Owner.
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	if f == nil {
		f = &driver.Filter{}
	}
	var out []driver.Holder
	err := retry(ctx, func() error {
		out = out[:0]
		rows, err := s.pool.Query(ctx, s.q.list, f.Name, f.Prefix, f.Owner)
		if err != nil {
			return err
		}
		var h holderRow
		_, err = pgx.ForEachRow(rows, []any{&h.name, &h.owner, &h.queued, &h.mode, &h.limit, &h.token,
			&h.host, &h.meta, &h.ttl, &h.created, &h.renewed, &h.expires, &h.now}, func() error {
			out = append(out, h.holder())
			h = holderRow{}
			return nil
		})
		return err
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
		rows, err := s.pool.Query(ctx, s.q.purge)
		if err != nil {
			return err
		}
		var h holderRow
		_, err = pgx.ForEachRow(rows, []any{&h.name, &h.owner, &h.mode, &h.limit, &h.token,
			&h.host, &h.meta, &h.ttl, &h.created, &h.renewed, &h.expires, &h.now}, func() error {
			out = append(out, h.holder())
			h = holderRow{}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, wrap("purge", err)
	}
	if _, err := s.reclaim(ctx, 0); err != nil {
		return out, err
	}
	return out, nil
}

type holderRow struct {
	name, owner, host         string
	queued                    bool
	mode                      int16
	limit                     int32
	token, ttl                int64
	meta                      map[string]string
	created, renewed, expires time.Time
	now                       time.Time
}

func (h *holderRow) holder() driver.Holder {
	out := driver.Holder{
		Name: h.name, Owner: h.owner, Mode: driver.Mode(h.mode), Limit: int(h.limit), Queued: h.queued,
		Host: h.host, Meta: h.meta, TTL: time.Duration(h.ttl),
		Created: h.created, Renewed: h.renewed, Expires: h.expires, Left: h.expires.Sub(h.now),
	}
	if !h.queued {
		out.Token = uint64(h.token)
	}
	return out
}

// Close stops the store's listener and, for a store made by Open, closes
// its pool. A pool given to New stays open. Close waits for calls in
// flight to return their connections.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.sessions != nil {
			s.sessions.Close() // ends and deletes them, while the pool is open
		}
		s.mu.Lock()
		s.closed.Store(true)
		s.mu.Unlock()
		s.stop()
		s.janitor.Wait()
		s.hub.close()
		if s.ownPool {
			s.pool.Close()
		}
	})
	return nil
}

// sessionsFor reports whether req's hold may be bound to a session: one
// the client keeps alive, of a TTL the grace period after a crash covers,
// for the sessions' table is unlogged and renewed without a flush.
func (s *Store) sessionsFor(req *driver.Request) bool {
	return req.KeepAlive && s.sessions != nil && req.TTL <= s.opts.MaxGrace
}

// KeepSession implements sessions.Store: one call of the table's session
// function. A new session raises the longest TTL the grace period
// covers, durably, when it must.
func (s *Store) KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error) {
	if s.partitioned.Load() {
		return false, errors.New("postgres: partitioned (a test's fault)")
	}
	if err := s.begin(ctx); err != nil {
		return false, err
	}
	var ok bool
	err := retry(ctx, func() error {
		return s.pool.QueryRow(ctx, s.q.session, id, ns(ttl), create, s.durable()).Scan(&ok)
	})
	return ok, wrap("session", err)
}

// EndSession implements sessions.Store.
func (s *Store) EndSession(ctx context.Context, id string) error {
	if !s.ready.Load() {
		return nil
	}
	_, err := s.pool.Exec(ctx, "DELETE FROM "+s.obj.sessions+" WHERE id = $1", id)
	return wrap("end session", err)
}

// Watch implements driver.Waiter.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	return s.hub.watch(req.Name, req.Owner)
}

// jitter returns d scaled by a random factor in [0.5, 1].
