// Package sqlite is baton's SQLite store: locks among the processes of one
// machine, kept in one database file. It is pure Go (modernc.org/sqlite, no
// cgo). Import it for its URL scheme:
//
//	import _ "github.com/baton-go/baton/sqlite"
//
//	client, err := baton.Open(ctx, "sqlite:///var/lib/app/locks.db", nil)
//
// or open a store directly with [Open] and pass it to baton.New.
//
// # URL
//
//	sqlite:///abs/path/locks.db          an absolute path
//	sqlite:relative/path/locks.db        a path relative to the working directory
//	sqlite:///abs/path/locks.db?table=my_locks&busy_timeout=30s&nocreate=1
//
// The query parameters set [Options]: table (Table), busy_timeout
// (BusyTimeout, a Go duration) and nocreate (NoCreate, a boolean). Other
// parameters are refused, as is a host part (sqlite://locks.db): write
// sqlite:locks.db for a relative path.
//
// # Schema
//
// One table, baton_locks unless Options.Table says otherwise, holds one row
// per lock name that was ever used:
//
//	CREATE TABLE IF NOT EXISTS baton_locks (
//		name  TEXT NOT NULL PRIMARY KEY,
//		state TEXT NOT NULL
//	)
//
// state is the JSON of the name's lockstate.State (holders, queue, and the
// fencing and queue counters), plus the id of the boot it was written in.
// Rows are never deleted, so that fencing tokens keep growing for the life
// of the file; a name that nobody holds or waits for keeps a row of a few
// bytes ({"seq":12,"ticket":3}). [Open] creates the table unless
// Options.NoCreate is set, in which case the table (and the file) must
// exist already. The database is switched to WAL mode, which persists in
// the file.
//
// Every call is one transaction: Acquire, Renew, Release and Purge take the
// write lock at once (BEGIN IMMEDIATE), read the rows they need, apply the
// grant rules of package lockstate, and write back what changed. Renew and
// Release handle their whole batch in one transaction. A waiting Acquire
// that would change nothing (the lock is still taken and its place in the
// queue needs no refresh) is answered from a plain read, without taking
// the write lock. Commits are synchronous (PRAGMA synchronous=FULL), so
// that a fencing token once handed out is never handed out again, even
// after a power loss (on storage that honours fsync). SQLite keeps two
// files next to the database, FILE-wal and FILE-shm: the directory must be
// writable by every process that uses the database, as is the doorbell
// FILE-wake (see Waking waiters).
//
// # Clock
//
// On Linux the store's clock is the machine's monotonic clock
// (CLOCK_MONOTONIC): the same for every process on the machine, immune to
// changes of the wall clock. Monotonic instants mean nothing after a
// reboot, so each row also records the boot it was written in
// (/proc/sys/kernel/random/boot_id): holders and waiters recorded in
// another boot are dropped (they died with it), while the counters are
// kept; Open fails if the boot id cannot be read. A state that has an
// entry renewed later than now (the clock restarted) is treated the same.
// Every process using a file must therefore run on the same kernel:
// containers on one host share its clock and boot id (a process in a time
// namespace of its own reads the clock shifted, and the store takes its
// namespace's offset off, from /proc/self/timens_offsets), but virtual
// machines do not. Do not share the file over a network file system, which
// SQLite does not support anyway.
//
// Times reported by the store (Grant, List, Purge) are converted to the
// wall clock for display; the time left (Holder.Left) is computed on the
// monotonic clock.
//
// On other systems the store's clock is the wall clock, and a step of the
// system clock (by an administrator or a time daemon) shortens or lengthens
// every hold alive at that moment: a step forward can let two holders
// overlap. Keep the clock slewed, not stepped, there.
//
// # Waking waiters
//
// The store implements driver.Waiter: a waiting Lock is woken at once by
// commits made by any Store of the same process, and by commits of other
// processes through a doorbell: after a commit that changed a lock, the
// committing process writes a byte to FILE-wake, which waiters of other
// processes watch with a file-system notification (fsnotify). The doorbell
// rings only once the commit is visible to readers, unlike a write to the
// WAL, which comes before the commit is published. Where the notification
// cannot be set up, or for changes made without baton, baton's fallback
// poll (at most Options.MaxPoll apart) covers the rest. One notification
// watcher runs per database file per process, from its first wait until the
// file's last Store of the process closes.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sqlite3 "modernc.org/sqlite"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

func init() {
	baton.Register("sqlite", func(ctx context.Context, u *url.URL) (driver.Store, error) {
		path, opts, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		return Open(ctx, path, opts)
	})
}

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "baton_locks"

// DefaultBusyTimeout is used when Options.BusyTimeout is zero.
const DefaultBusyTimeout = 10 * time.Second

// Options configure a Store. The zero value works.
type Options struct {
	// Table is the table holding the locks (DefaultTable if empty): a
	// letter or underscore, then up to 62 letters, digits or underscores.
	Table string
	// NoCreate makes Open use an existing file and table (see the package
	// documentation for its definition) instead of creating them.
	NoCreate bool
	// BusyTimeout bounds how long one call waits for the database's write
	// lock while other processes hold it, besides the call's context
	// (DefaultBusyTimeout if zero).
	BusyTimeout time.Duration
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = errors.New("sqlite: store is closed")

var tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Store is a client of a lock table in an SQLite database file. It is safe
// for concurrent use.
type Store struct {
	db    *sql.DB
	path  string // cleaned absolute path of the file
	table string
	busy  time.Duration
	sh    *shared
	boot  string // id of the current boot ("" outside Linux)

	qGet, qNamed, qUpsert, qAll, qPrefix string

	closeOnce sync.Once
	closed    atomic.Bool
	closeErr  error
}

// sqliteBusyTimeout is SQLite's own busy timeout, per lock attempt: short,
// so that Store's retry loop, which honours the context, stays in charge.
const sqliteBusyTimeout = 50 * time.Millisecond

var bootID = sync.OnceValues(readBootID)

// Open opens (creating it, and its directory with mode 0700, if needed)
// the SQLite database file at path and the lock table in it.
func Open(ctx context.Context, path string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if !tableRE.MatchString(o.Table) {
		return nil, fmt.Errorf("sqlite: invalid table name %q: want a letter or underscore, then up to 62 letters, digits or underscores", o.Table)
	}
	switch {
	case o.BusyTimeout < 0:
		return nil, fmt.Errorf("sqlite: negative busy timeout %v", o.BusyTimeout)
	case o.BusyTimeout == 0:
		o.BusyTimeout = DefaultBusyTimeout
	}
	boot, err := bootID()
	if err != nil {
		return nil, err
	}
	path, err = cleanPath(path, !o.NoCreate)
	if err != nil {
		return nil, err
	}
	if o.NoCreate {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("sqlite: open %s with Options.NoCreate: %w", path, err)
		}
	}
	db, err := sql.Open("sqlite", dsn(path, o.NoCreate))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	s := &Store{
		db: db, path: path, table: o.Table, busy: o.BusyTimeout, boot: boot,
		sh: acquireShared(path),
	}
	q := `"` + o.Table + `"`
	s.qGet = `SELECT state FROM ` + q + ` WHERE name = ?`
	s.qNamed = `SELECT name, state FROM ` + q + ` WHERE name = ?`
	s.qUpsert = `INSERT INTO ` + q + ` (name, state) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET state = excluded.state`
	// Rows of idle names ({"seq":N,"ticket":M}) have neither key.
	active := `(state LIKE '%"holders":%' OR state LIKE '%"queue":%')`
	s.qAll = `SELECT name, state FROM ` + q + ` WHERE ` + active
	s.qPrefix = `SELECT name, state FROM ` + q + ` WHERE name >= ? AND ` + active + ` ORDER BY name`
	if err := s.setup(ctx, o.NoCreate); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// cleanPath returns path absolute, cleaned and, where the file or its
// directory exists, with symbolic links resolved, so that every Store of a
// file finds the same shared state. With create set it creates the
// directory.
func cleanPath(path string, create bool) (string, error) {
	switch path {
	case "":
		return "", errors.New("sqlite: empty database path")
	case ":memory:":
		return "", errors.New("sqlite: in-memory databases are not supported: locks need a file that every process can open")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("sqlite: database path %q: %w", path, err)
	}
	dir := filepath.Dir(abs)
	if create {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return "", fmt.Errorf("sqlite: create directory of database: %w", err)
		}
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		return filepath.Join(real, filepath.Base(abs)), nil
	}
	return abs, nil
}

// dsn is the modernc.org/sqlite data source name for path: a file: URI
// (so that any character of the path is escaped), every transaction BEGIN
// IMMEDIATE unless read-only, and the per-connection pragmas.
func dsn(path string, mustExist bool) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", sqliteBusyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	if mustExist {
		q.Set("mode", "rw")
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// ddl is the table's definition; the package documentation repeats it.
func ddl(table string) string {
	return `CREATE TABLE IF NOT EXISTS "` + table + `" (
	name  TEXT NOT NULL PRIMARY KEY,
	state TEXT NOT NULL
)`
}

// setup switches the file to WAL mode, creates the table (unless noCreate)
// and checks it. Several processes may do this at once on a new file.
func (s *Store) setup(ctx context.Context, noCreate bool) error {
	var mode string
	err := s.retry(ctx, func() error {
		return s.db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
	})
	if err != nil {
		return s.openErr("switch to WAL mode", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlite: open %s: cannot switch to WAL mode (journal mode is %q)", s.path, mode)
	}
	if !noCreate {
		err := s.retry(ctx, func() error {
			_, err := s.db.ExecContext(ctx, ddl(s.table))
			return err
		})
		if err != nil {
			return s.openErr(fmt.Sprintf("create table %q", s.table), err)
		}
	}
	err = s.retry(ctx, func() error {
		rows, err := s.db.QueryContext(ctx, `SELECT name, state FROM "`+s.table+`" LIMIT 0`)
		if err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		if noCreate {
			return fmt.Errorf("sqlite: open %s: table %q is missing or lacks the columns name and state (Options.NoCreate is set; create it with: %s): %w",
				s.path, s.table, ddl(s.table), err)
		}
		return s.openErr(fmt.Sprintf("check table %q", s.table), err)
	}
	return nil
}

func (s *Store) openErr(what string, err error) error {
	return fmt.Errorf("sqlite: open %s: %s: %w", s.path, what, err)
}

// Close closes the database. Watches of the store stay usable until their
// own Close.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.closeErr = s.db.Close()
		s.sh.release()
	})
	return s.closeErr
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// isBusy reports whether err is SQLITE_BUSY or SQLITE_LOCKED (or one of
// their extended codes): another connection holds a lock we need.
func isBusy(err error) bool {
	var se *sqlite3.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
		return true
	}
	return false
}

// retry runs fn until it succeeds, fails with an error other than
// SQLITE_BUSY/LOCKED, ctx ends, or the busy timeout passes, sleeping a
// little (with jitter) between attempts.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if !isBusy(err) {
			return err
		}
		if time.Since(start) >= s.busy {
			return fmt.Errorf("database %s stayed locked by another connection for %v: %w", s.path, s.busy, err)
		}
		d := min(time.Millisecond<<min(attempt, 5), 20*time.Millisecond)
		t := time.NewTimer(d/2 + rand.N(d/2+1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// record is what a row's state column holds.
type record struct {
	// Boot is the id of the boot in which the holders and queue entries
	// were recorded; their times are meaningless in another boot.
	Boot string `json:"boot,omitempty"`
	// Wall is the wall clock minus the store's clock, in nanoseconds, when
	// the record was written: it dates entries of an earlier boot.
	Wall int64 `json:"wall,omitempty"`
	lockstate.State
}

// clock is one reading of the store's clock, with what converts its
// instants to the wall clock.
type clock struct {
	now  time.Time // store clock
	wall int64     // wall clock minus store clock, nanoseconds
}

// wallOffset is the last wall-minus-monotonic offset used, kept while the
// wall clock does not move away from it, so that the same instant always
// converts to the same wall time.
var wallOffset atomic.Int64

func (s *Store) clock() clock {
	mono := monoNow()
	if clockIsWall {
		return clock{now: time.Unix(0, mono).UTC()}
	}
	off := time.Now().UnixNano() - mono
	if cur := wallOffset.Load(); cur != 0 && off-cur < int64(100*time.Millisecond) && cur-off < int64(100*time.Millisecond) {
		off = cur
	} else {
		wallOffset.Store(off)
	}
	return clock{now: time.Unix(0, mono).UTC(), wall: off}
}

// toWall converts an instant of the store's clock to the wall clock.
func (c *clock) toWall(t time.Time, off int64) time.Time {
	if clockIsWall || t.IsZero() {
		return t
	}
	return time.Unix(0, t.UnixNano()+off)
}

func (c *clock) holder(h driver.Holder, off int64) driver.Holder {
	h.Created, h.Renewed, h.Expires = c.toWall(h.Created, off), c.toWall(h.Renewed, off), c.toWall(h.Expires, off)
	return h
}

func (c *clock) grant(g *driver.Grant) *driver.Grant {
	if g != nil {
		g.Created, g.Renewed, g.Expires = c.toWall(g.Created, c.wall), c.toWall(g.Renewed, c.wall), c.toWall(g.Expires, c.wall)
	}
	return g
}

// decode parses a row's state as seen at c.now. Holders and queue entries
// of another boot are dropped (the state is then Dirty) and, holders only,
// returned with times dated by the wall clock.
func (s *Store) decode(name string, data []byte, c *clock) (*record, []driver.Holder, error) {
	r := &record{}
	if err := json.Unmarshal(data, r); err != nil {
		return nil, nil, fmt.Errorf("row %q of table %q holds invalid state: %w", name, s.table, err)
	}
	if r.Idle() || !s.stale(r, c.now) {
		return r, nil, nil
	}
	var gone []driver.Holder
	for _, h := range r.List(name, c.now) {
		if !h.Queued {
			h.Left = 0
			gone = append(gone, c.holder(h, r.Wall))
		}
	}
	r.Holders, r.Queue, r.Dirty = nil, nil, true
	return r, gone, nil
}

// stale reports whether r's entries were recorded in another boot: its
// boot id differs, or it has an entry renewed later than now (the
// monotonic clock restarted).
func (s *Store) stale(r *record, now time.Time) bool {
	if r.Boot != s.boot {
		return true
	}
	if clockIsWall {
		return false // the wall clock may go back; that is no reboot
	}
	for _, es := range [][]lockstate.Entry{r.Holders, r.Queue} {
		for _, e := range es {
			if e.Renewed.After(now) {
				return true
			}
		}
	}
	return false
}

// encode returns the row's state to store: compact when idle.
func (s *Store) encode(r *record, c *clock) ([]byte, error) {
	out := record{State: lockstate.State{Seq: r.Seq, Ticket: r.Ticket}}
	if !r.Idle() {
		out = record{Boot: s.boot, Wall: c.wall, State: r.State}
	}
	return json.Marshal(&out)
}

// get reads the state of name; a missing row is an empty state.
func get(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query, name string) ([]byte, bool, error) {
	var data []byte
	err := q.QueryRowContext(ctx, query, name).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	return data, err == nil, err
}

// write runs fn in one write transaction (BEGIN IMMEDIATE), committing if
// fn reports a change and waking this process's waiters after the commit.
// fn may be run more than once (when the database is busy): it must set
// its results afresh each time. It reads the store's clock only once the
// write lock is held, so that every state it reads was written earlier by
// that clock.
func (s *Store) write(ctx context.Context, op string, fn func(tx *sql.Tx, c *clock) (changed bool, err error)) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.sh.lockWrite(ctx); err != nil {
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	defer s.sh.unlockWrite()
	changed := false
	err := s.retry(ctx, func() error {
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		c := s.clock()
		ch, err := fn(tx, &c)
		if err != nil || !ch {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if changed {
		s.sh.broadcast()
		s.sh.ring()
	}
	if err != nil {
		return s.opErr(op, err)
	}
	return nil
}

func (s *Store) opErr(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlite: %s: %w", op, ErrClosed)
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if req.Queue {
		// A waiter polls: answer from a plain read when the request is
		// not granted and nothing would change.
		busy, err := s.acquireRead(ctx, req)
		if err != nil {
			return nil, err
		}
		if busy != nil {
			return nil, busy
		}
	}
	var (
		g    *driver.Grant
		gerr error
		conv clock
	)
	err := s.write(ctx, "acquire", func(tx *sql.Tx, c *clock) (bool, error) {
		g, gerr, conv = nil, nil, *c
		data, found, err := get(ctx, tx, s.qGet, req.Name)
		if err != nil {
			return false, err
		}
		r := &record{}
		if found {
			if r, _, err = s.decode(req.Name, data, c); err != nil {
				return false, err
			}
		}
		g, gerr = r.Acquire(req, c.now)
		if !r.Dirty {
			return false, nil
		}
		return true, s.put(ctx, tx, req.Name, r, c)
	})
	if err != nil {
		return nil, err
	}
	if gerr != nil {
		return nil, gerr
	}
	return conv.grant(g), nil
}

// acquireRead applies req to a plain read of its row and returns the Busy
// error if the request is not granted and the state would not change;
// nil, nil otherwise.
func (s *Store) acquireRead(ctx context.Context, req *driver.Request) (*driver.Busy, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var data []byte
	var found bool
	err := s.retry(ctx, func() (err error) {
		data, found, err = get(ctx, s.db, s.qGet, req.Name)
		return err
	})
	if err != nil {
		return nil, s.opErr("acquire", err)
	}
	if !found {
		return nil, nil
	}
	c := s.clock() // read after the row: the row is older than now
	r, _, err := s.decode(req.Name, data, &c)
	if err != nil {
		return nil, s.opErr("acquire", err)
	}
	_, gerr := r.Acquire(req, c.now)
	var busy *driver.Busy
	if !r.Dirty && errors.As(gerr, &busy) {
		return busy, nil
	}
	return nil, nil
}

func (s *Store) put(ctx context.Context, tx *sql.Tx, name string, r *record, c *clock) error {
	data, err := s.encode(r, c)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.qUpsert, name, string(data))
	return err
}

// batch reads, within tx, the rows of names (each once) that exist.
func (s *Store) batch(ctx context.Context, tx *sql.Tx, c *clock, names []string) (map[string]*record, error) {
	rs := make(map[string]*record, len(names))
	for _, n := range names {
		if _, seen := rs[n]; seen {
			continue
		}
		data, found, err := get(ctx, tx, s.qGet, n)
		if err != nil {
			return nil, err
		}
		if !found {
			rs[n] = nil
			continue
		}
		if rs[n], _, err = s.decode(n, data, c); err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// flush writes back the rows of rs that changed.
func (s *Store) flush(ctx context.Context, tx *sql.Tx, c *clock, rs map[string]*record) (bool, error) {
	changed := false
	for n, r := range rs {
		if r != nil && r.Dirty {
			if err := s.put(ctx, tx, n, r, c); err != nil {
				return false, err
			}
			changed = true
		}
	}
	return changed, nil
}

// Renew implements driver.Store: the whole batch is one transaction.
func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	out := make([]*driver.Grant, len(holds))
	if len(holds) == 0 {
		return out, s.checkOpen()
	}
	names := make([]string, len(holds))
	for i, h := range holds {
		names[i] = h.Name
	}
	var conv clock
	err := s.write(ctx, "renew", func(tx *sql.Tx, c *clock) (bool, error) {
		clear(out)
		conv = *c
		rs, err := s.batch(ctx, tx, c, names)
		if err != nil {
			return false, err
		}
		for i, h := range holds {
			if r := rs[h.Name]; r != nil {
				out[i] = r.Renew(h.Name, h.Owner, h.TTL, c.now)
			}
		}
		return s.flush(ctx, tx, c, rs)
	})
	if err != nil {
		return nil, err
	}
	for _, g := range out {
		conv.grant(g)
	}
	return out, nil
}

// Release implements driver.Store: the whole batch is one transaction.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, s.checkOpen()
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	err := s.write(ctx, "release", func(tx *sql.Tx, c *clock) (bool, error) {
		clear(out)
		rs, err := s.batch(ctx, tx, c, names)
		if err != nil {
			return false, err
		}
		for i, k := range keys {
			if r := rs[k.Name]; r != nil {
				out[i] = r.Release(k.Name, k.Owner, c.now)
			}
		}
		return s.flush(ctx, tx, c, rs)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// List implements driver.Store. It honours f.Name, f.Prefix and f.Owner,
// and reads one consistent snapshot without taking the write lock.
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if f == nil {
		f = &driver.Filter{}
	}
	var out []driver.Holder
	err := s.retry(ctx, func() error {
		out = out[:0]
		var rows *sql.Rows
		var err error
		if f.Name != "" {
			rows, err = s.db.QueryContext(ctx, s.qNamed, f.Name)
		} else {
			rows, err = s.db.QueryContext(ctx, s.qPrefix, f.Prefix)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		type row struct {
			name string
			data []byte
		}
		var rs []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.name, &r.data); err != nil {
				return err
			}
			if !strings.HasPrefix(r.name, f.Prefix) {
				break // rows come in name order
			}
			rs = append(rs, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows.Close()
		c := s.clock() // read after the rows: they are older than now
		for _, row := range rs {
			r, _, err := s.decode(row.name, row.data, &c)
			if err != nil {
				return err
			}
			for _, h := range r.List(row.name, c.now) {
				if f.Owner == "" || h.Owner == f.Owner {
					out = append(out, c.holder(h, c.wall))
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, s.opErr("list", err)
	}
	return out, nil
}

// Purge implements driver.Store: one transaction drops the expired holders
// and queue entries of every name, and those of an earlier boot.
func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	var out []driver.Holder
	err := s.write(ctx, "purge", func(tx *sql.Tx, c *clock) (bool, error) {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, s.qAll)
		if err != nil {
			return false, err
		}
		rs := map[string]*record{}
		for rows.Next() {
			var name string
			var data []byte
			if err := rows.Scan(&name, &data); err != nil {
				rows.Close()
				return false, err
			}
			r, gone, err := s.decode(name, data, c)
			if err != nil {
				rows.Close()
				return false, err
			}
			out = append(out, gone...)
			for _, h := range r.Expire(name, c.now) {
				out = append(out, c.holder(h, c.wall))
			}
			rs[name] = r
		}
		if err := rows.Close(); err != nil {
			return false, err
		}
		if err := rows.Err(); err != nil {
			return false, err
		}
		return s.flush(ctx, tx, c, rs)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseURL reads sqlite:///abs/path.db or sqlite:rel/path.db, with the
// query parameters table, busy_timeout and nocreate.
func parseURL(u *url.URL) (string, *Options, error) {
	var path string
	switch {
	case u.Opaque != "":
		p, err := url.PathUnescape(u.Opaque)
		if err != nil {
			return "", nil, fmt.Errorf("sqlite: bad path %q in URL: %w", u.Opaque, err)
		}
		path = p
	case u.Host != "" && u.Host != "localhost":
		return "", nil, fmt.Errorf("sqlite: URL has a host part %q: write sqlite:///abs/path.db for an absolute path or sqlite:%s%s for a relative one",
			u.Host, u.Host, u.Path)
	default:
		path = u.Path
		if runtime.GOOS == "windows" && len(path) >= 3 && path[0] == '/' && path[2] == ':' {
			path = path[1:] // sqlite:///C:/dir/file.db
		}
	}
	if path == "" {
		return "", nil, errors.New("sqlite: URL has no database path: want sqlite:///abs/path.db or sqlite:rel/path.db")
	}
	if u.User != nil {
		return "", nil, errors.New("sqlite: URL has a user name or password, which SQLite does not use")
	}
	o := &Options{}
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "table":
			o.Table = v
		case "busy_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return "", nil, fmt.Errorf("sqlite: URL parameter busy_timeout=%q is not a duration such as 30s", v)
			}
			o.BusyTimeout = d
		case "nocreate":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", nil, fmt.Errorf("sqlite: URL parameter nocreate=%q is not a boolean", v)
			}
			o.NoCreate = b
		default:
			return "", nil, fmt.Errorf("sqlite: unknown URL parameter %q (known: table, busy_timeout, nocreate)", k)
		}
	}
	return path, o, nil
}
