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
// (BusyTimeout, a Go duration), nocreate (NoCreate, a boolean) and
// reclaim (Reclaim, a Go duration). Other
// parameters are refused, as is a host part (sqlite://locks.db): write
// sqlite:locks.db for a relative path.
//
// # Files and schema
//
// [Open] creates the file, its directory and the table, unless
// Options.NoCreate is set (the file and table must then exist), and
// switches the file to WAL mode. The table, baton_locks unless
// Options.Table says otherwise, holds one row per lock name used (a few
// bytes once idle, kept unless Options.Reclaim is set: see Guarantees) and
// the row "", which records the current epoch:
//
//	CREATE TABLE IF NOT EXISTS baton_locks (
//		name  TEXT NOT NULL PRIMARY KEY,
//		state TEXT NOT NULL
//	)
//
// Next to it, the table baton_locks_sessions (the table's name followed by
// _sessions) holds the Stores' sessions: see Sessions below. With NoCreate
// it is used if it exists.
//
// SQLite keeps FILE-wal and FILE-shm next to the database, and the store
// its doorbells, FILE-wake and FILE-wake-ID (one per process that waits,
// removed when it closes): the directory must be writable by every process
// that uses the file. Do not put the file on a network file system.
//
// # Guarantees and limits
//
// Every call is one write transaction (BEGIN IMMEDIATE) that applies the
// grant rules of package lockstate. Fencing tokens of a name grow for the
// life of the file. With Options.Reclaim, the rows of idle names are
// deleted now and then, each time in a new epoch: a name used again starts
// in the epoch it finds in the file, above every token it had. See
// docs/stores/sqlite.md#reclaiming-idle-names.
//
// Clock: on Linux, the machine's monotonic clock, which steps of the wall
// clock do not affect. Holds recorded in an earlier boot are expired (their
// holders died with it), and Open fails if the boot id cannot be read. So
// every process that uses a file must run on the same kernel: containers
// on one host do, virtual machines do not. On other systems the clock is
// the wall clock, and a step of it shortens or lengthens the holds alive
// at that moment (a step forward can let two holders overlap): keep it
// slewed, not stepped. Times the store reports are wall-clock times, for
// display. Why: docs/stores/sqlite.md#clock.
//
// Durability: on Linux, commits do not wait for the disk. A crashed
// process loses nothing; a power loss or a crash of the machine may lose
// the last commits, but every holder died with the machine, and each boot
// starts a new epoch, in the high half of its tokens, with a flushed
// commit (as does a name's counter that reaches its epoch's 2^32 tokens),
// so tokens stay above every token handed out before. On other
// systems every commit is flushed. Both hold on storage that honours
// fsync. Why: docs/stores/sqlite.md#durability.
//
// Sessions: the holds a client keeps alive together live in its Store's
// session as well as their own TTL, and the Store renews the session, one
// row every third of the TTL, instead of the client renewing every hold:
// holding many locks costs what holding one does. A hold outlives its TTL
// only while its session is renewed, so a process that dies or stops lets
// its names go as before. Processes of versions from before sessions fail
// on a name whose holder is bound to a session instead of misjudging it:
// while they share the file, set Options.NoSessions. See
// docs/stores/sqlite.md#sessions.
//
// Waking waiters: the store implements driver.Waiter. Commits of the same
// process wake its waiters at once; a commit of another process that lets
// a request in rings the doorbell of the process that queued it (a FIFO,
// FILE-wake-ID, on Unix), and every commit the common doorbell file, which
// holder watches follow (fsnotify); where neither can be set up, baton's
// fallback poll covers the rest. See docs/stores/sqlite.md#waking-waiters.
package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
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
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
	sqlite3 "modernc.org/sqlite"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/records"
)

func init() {
	baton.Register("sqlite", func(ctx context.Context, u *url.URL) (driver.Store, error) {
		return Open(ctx, u.String(), nil)
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
	// Reclaim, if above zero, is how often the rows of idle names are
	// deleted, by whichever Store of the file finds the last reclaim that
	// old: each reclaim starts a new epoch, so that a name used again
	// starts above every token it had. Zero (the default) keeps every
	// name's row. Set it only once every process that uses the file runs
	// this version of the package or a later one: an earlier version could
	// create a reclaimed name's row in the epoch it started in, and repeat
	// its tokens.
	Reclaim time.Duration
	// NoSessions makes the Store bind no hold to a session: its client
	// renews every hold on its own, as versions before sessions did. Set
	// it while processes of such a version share the file: they cannot
	// read a record whose holder is bound to a session, and fail on that
	// name (see docs/stores/sqlite.md#sessions).
	NoSessions bool
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("sqlite: %w", driver.ErrClosed)

var tableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Store is a client of a lock table in an SQLite database file. It is safe
// for concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	*records.Store
	db *db
}

// db is the lock table of one file: the records the Store works on.
type db struct {
	sql   *sql.DB
	path  string // cleaned absolute path of the file
	table string
	busy  time.Duration
	sh    *shared
	boot  string        // id of the current boot ("" outside Linux)
	epoch atomic.Uint64 // this boot's epoch, the high half of its tokens (0 outside Linux)

	qGet, qNamed, qUpsert, qPrefix string
	qGetMany                       string // reads a batch's rows, its names as one JSON array
	qIdle                          string // deletes the rows of idle names

	// Prepared once: the driver compiles an unprepared statement each
	// time it runs it.
	stGet, stNamed, stUpsert *sql.Stmt

	sessions                             atomic.Bool // the file has the sessions table
	partitioned                          atomic.Bool // a test's: session renewals fail
	qSessions, qNewSession, qKeepSession string
	qEndSession, qEndedSessions          string

	closeOnce sync.Once
	closed    atomic.Bool
	closeErr  error
	stop      context.CancelFunc // ends the janitor, if any
	janitor   sync.WaitGroup
}

// The store's retry loop (retry) waits for a lock another process holds,
// not SQLite's busy handler (whose timeout is 0): the handler sleeps 1 ms
// on the first conflict, then longer, while a write transaction holds the
// lock for a fraction of that; the loop waits firstBusyWait, doubling up
// to maxBusyWait, and honours the context.
const (
	firstBusyWait = 20 * time.Microsecond
	maxBusyWait   = 5 * time.Millisecond
)

var bootID = sync.OnceValues(readBootID)

// Open opens (creating it, and its directory with mode 0700, if needed)
// the SQLite database file at rawURL, a sqlite: URL (see the package
// documentation) or a file path, and the lock table in it. Options given
// in the URL apply where opts leaves the field zero.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	path := rawURL
	if u, err := url.Parse(rawURL); err == nil && strings.EqualFold(u.Scheme, "sqlite") {
		p, fromURL, err := parseURL(u)
		if err != nil {
			return nil, err
		}
		path, opts = p, driver.FillZero(opts, fromURL)
	}
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
	case o.Reclaim < 0:
		return nil, fmt.Errorf("sqlite: negative Options.Reclaim %v", o.Reclaim)
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
	conn, err := sql.Open("sqlite", dsn(path, o.NoCreate, boot != ""))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	conn.SetMaxOpenConns(4)
	conn.SetMaxIdleConns(4)
	d := &db{
		sql: conn, path: path, table: o.Table, busy: o.BusyTimeout, boot: boot,
		sh: acquireShared(path),
	}
	q := `"` + o.Table + `"`
	d.qGet = `SELECT state FROM ` + q + ` WHERE name = ?`
	d.qNamed = `SELECT name, state FROM ` + q + ` WHERE name = ?`
	d.qUpsert = `INSERT INTO ` + q + ` (name, state) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET state = excluded.state`
	// A batch reads its rows in one statement.
	d.qGetMany = `SELECT name, state FROM ` + q + ` WHERE name IN (SELECT value FROM json_each(?))`
	// Rows of idle names ({"seq":N,"ticket":M}) have neither key.
	active := `(state LIKE '%"holders":%' OR state LIKE '%"queue":%')`
	d.qPrefix = `SELECT name, state FROM ` + q + ` WHERE name >= ? AND ` + active + ` ORDER BY name`
	d.qIdle = `DELETE FROM ` + q + ` WHERE name <> '' AND NOT ` + active
	qs := `"` + o.Table + `_sessions"`
	d.qSessions = `SELECT id, expires FROM ` + qs + ` WHERE boot = ? AND id IN (SELECT value FROM json_each(?))`
	d.qNewSession = `INSERT INTO ` + qs + ` (id, boot, expires) VALUES (?, ?, ?)`
	d.qKeepSession = `UPDATE ` + qs + ` SET expires = ? WHERE id = ? AND boot = ? AND expires > ?`
	d.qEndSession = `DELETE FROM ` + qs + ` WHERE id = ?`
	d.qEndedSessions = `DELETE FROM ` + qs + ` WHERE boot <> ? OR expires <= ?`
	if err := d.setup(ctx, o.NoCreate); err != nil {
		d.Close()
		return nil, err
	}
	if o.Reclaim > 0 {
		jctx, stop := context.WithCancel(context.Background())
		d.stop = stop
		d.janitor.Add(1)
		go d.reclaimEvery(jctx, o.Reclaim)
	}
	var r records.Records = d
	if d.sessions.Load() && !o.NoSessions {
		r = sessionDB{d}
	}
	return &Store{Store: records.New(r, &records.Options{Wall: toWall, ReadFirst: true}), db: d}, nil
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
// IMMEDIATE unless read-only, and the per-connection pragmas: commits
// flush only with fullSync (see Durability in the package documentation).
func dsn(path string, mustExist, epochs bool) string {
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter
	}
	q := url.Values{}
	q.Set("_txlock", "immediate")
	q.Add("_pragma", "busy_timeout(0)") // see firstBusyWait
	if epochs {
		q.Add("_pragma", "synchronous(NORMAL)")
	} else {
		q.Add("_pragma", "synchronous(FULL)")
	}
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
func (d *db) setup(ctx context.Context, noCreate bool) error {
	var mode string
	err := d.retry(ctx, func() error {
		return d.sql.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
	})
	if err != nil {
		return d.openErr("switch to WAL mode", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlite: open %s: cannot switch to WAL mode (journal mode is %q)", d.path, mode)
	}
	if !noCreate {
		err := d.retry(ctx, func() error {
			_, err := d.sql.ExecContext(ctx, ddl(d.table))
			return err
		})
		if err != nil {
			return d.openErr(fmt.Sprintf("create table %q", d.table), err)
		}
	}
	err = d.retry(ctx, func() error {
		rows, err := d.sql.QueryContext(ctx, `SELECT name, state FROM "`+d.table+`" LIMIT 0`)
		if err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		if noCreate {
			return fmt.Errorf("sqlite: open %s: table %q is missing or lacks the columns name and state (Options.NoCreate is set; create it with: %s): %w",
				d.path, d.table, ddl(d.table), err)
		}
		return d.openErr(fmt.Sprintf("check table %q", d.table), err)
	}
	if err := d.setupSessions(ctx, noCreate); err != nil {
		return err
	}
	for _, st := range []struct {
		p *(*sql.Stmt)
		q string
	}{{&d.stGet, d.qGet}, {&d.stNamed, d.qNamed}, {&d.stUpsert, d.qUpsert}} {
		err := d.retry(ctx, func() (err error) {
			*st.p, err = d.sql.PrepareContext(ctx, st.q)
			return err
		})
		if err != nil {
			return d.openErr("prepare statements", err)
		}
	}
	if d.boot == "" {
		return nil
	}
	if err := d.retry(ctx, func() error { return d.startEpoch(ctx) }); err != nil {
		return d.openErr("read the epoch of this boot", err)
	}
	return nil
}

// epochRow is the state of the row named "" (no lock name is empty): the
// epoch of the last boot that used the table.
type epochRow struct {
	Epoch uint64 `json:"epoch"`
	Boot  string `json:"boot"`
	// Reclaimed is when idle names were last reclaimed, in Unix
	// nanoseconds of the wall clock of the process that did it.
	Reclaimed int64 `json:"reclaimed,omitempty"`
}

// startEpoch reads this boot's epoch, starting it with a flushed commit if
// the table was last used in another boot.
func (d *db) startEpoch(ctx context.Context) error {
	return d.flushedEpoch(ctx, nil, func(e *epochRow, found bool) bool {
		if found && e.Boot == d.boot {
			return false
		}
		// A boot, first time: the file may have lost the last commits of
		// the one before, counters included. A new epoch, durably, before
		// any grant. Epoch 0 is the first boot of a new file, or of one
		// that versions flushing every commit wrote.
		if found {
			e.Epoch++
		}
		e.Boot = d.boot
		return true
	})
}

// raiseEpoch records, with a flushed commit, that this boot hands out
// tokens of epoch at least h: a name's counter went past its epoch's 2^32
// tokens. The next boot then starts above h, so that tokens stay above
// every token handed out before even if the commits that handed them out
// are lost.
func (d *db) raiseEpoch(ctx context.Context, h uint64) error {
	err := d.flushedEpoch(ctx, nil, func(e *epochRow, found bool) bool {
		if found && e.Epoch >= h {
			return false
		}
		e.Epoch, e.Boot = h, d.boot
		return true
	})
	if err == nil && afterEpochRaise != nil {
		afterEpochRaise()
	}
	return err
}

// afterEpochRaise, set by a test, runs after raiseEpoch's flushed commit.
var afterEpochRaise func()

// flushedEpoch reads the epoch row, lets change decide whether to write it
// back changed, and does so, then runs more (if not nil) in the same
// transaction, with a flushed commit; d.epoch is then the row's epoch, or
// d.epoch if larger.
func (d *db) flushedEpoch(ctx context.Context, more func(*sql.Tx) error, change func(e *epochRow, found bool) bool) error {
	conn, err := d.sql.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A flushed commit, should it write (set outside a transaction).
	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
		return err
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), `PRAGMA synchronous = NORMAL`)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	data, found, err := get(tx.QueryRowContext(ctx, d.qGet, ""))
	if err != nil {
		return err
	}
	var e epochRow
	if found {
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("row \"\" of table %q holds an invalid epoch: %w", d.table, err)
		}
	}
	if change(&e, found) {
		b, _ := json.Marshal(&e)
		if _, err := tx.ExecContext(ctx, d.qUpsert, "", string(b)); err != nil {
			return err
		}
		if more != nil {
			if err := more(tx); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	d.epoch.Store(max(d.epoch.Load(), e.Epoch))
	return nil
}

func (d *db) openErr(what string, err error) error {
	return fmt.Errorf("sqlite: open %s: %s: %w", d.path, what, err)
}

// Close closes the database. Watches of the store stay usable until their
// own Close.
func (d *db) Close() error {
	d.closeOnce.Do(func() {
		d.closed.Store(true)
		if d.stop != nil {
			d.stop()
			d.janitor.Wait()
		}
		for _, st := range []*sql.Stmt{d.stGet, d.stNamed, d.stUpsert} {
			if st != nil {
				st.Close()
			}
		}
		d.closeErr = d.sql.Close()
		d.sh.release()
	})
	return d.closeErr
}

func (d *db) checkOpen() error {
	if d.closed.Load() {
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
func (d *db) retry(ctx context.Context, fn func() error) error {
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
		if time.Since(start) >= d.busy {
			return fmt.Errorf("database %s stayed locked by another connection for %v: %w", d.path, d.busy, err)
		}
		d := min(firstBusyWait<<min(attempt, 8), maxBusyWait)
		t := time.NewTimer(driver.Jitter(d))
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
	// Epoch is the epoch of Seq: tokens of a later epoch start above it.
	Epoch epochN `json:"e,omitempty"`
	// Bells are the doorbells of the processes that queued the queue
	// entries, by owner (see keepBells).
	Bells map[string]string `json:"bells,omitempty"`
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

// clockShift moves the store's clock on, for a test that walks through
// time (TestSessionModel).
var clockShift atomic.Int64

func (d *db) clock() clock {
	mono := monoNow() + clockShift.Load()
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

// toWall converts an instant of the store's clock to the wall clock, for
// what the store reports.
func toWall(t time.Time) time.Time {
	if clockIsWall || t.IsZero() {
		return t
	}
	return time.Unix(0, t.UnixNano()+wallOffset.Load())
}

// decode parses a row's state as seen at c.now. The holders and queue
// entries of another boot are kept, expired at c.now, with their times
// moved to this boot's clock by the wall clock, so that the rules drop
// them and Purge reports them.
func (d *db) decode(name string, data []byte, c *clock) (*record, error) {
	r := &record{}
	if err := decodeRecord(data, r); err != nil {
		return nil, fmt.Errorf("row %q of table %q holds invalid state: %w", name, d.table, err)
	}
	if epoch := d.epoch.Load(); uint64(r.Epoch) < epoch {
		r.Seq, r.Epoch = max(r.Seq, epoch<<32), epochN(epoch)
	}
	if r.Idle() || !d.stale(r, c.now) {
		return r, nil
	}
	shift := time.Duration(r.Wall - c.wall)
	for _, es := range [][]lockstate.Entry{r.Holders, r.Queue} {
		for i := range es {
			e := &es[i]
			e.Created, e.Renewed, e.Expires = e.Created.Add(shift), e.Renewed.Add(shift), c.now
		}
	}
	return r, nil
}

// stale reports whether r's entries were recorded in another boot: its
// boot id differs, or it has an entry renewed later than now (the
// monotonic clock restarted).
func (d *db) stale(r *record, now time.Time) bool {
	if r.Boot != d.boot {
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
func (d *db) encode(r *record, c *clock) ([]byte, error) {
	out := record{Epoch: r.Epoch, State: lockstate.State{Seq: r.Seq, Ticket: r.Ticket}}
	if !r.Idle() {
		if bound(&r.State) {
			return gojson.Marshal(&boundRecord{Boot: d.boot, Wall: c.wall, Epoch: strconv.FormatUint(uint64(r.Epoch), 10), Bells: r.Bells, State: r.State})
		}
		out = record{Boot: d.boot, Wall: c.wall, Epoch: r.Epoch, Bells: r.Bells, State: r.State}
	}
	return gojson.Marshal(&out)
}

// decodeRecord parses a row's state. Records are read and written with
// goccy/go-json, several times faster than encoding/json (which earlier
// versions of this package, and so other processes, may use: both read
// what the other writes alike); as anyone who can write the file can write
// a row, a panic of the decoder is an error.
func decodeRecord(data []byte, r *record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cannot decode: %v", p)
		}
	}()
	return gojson.Unmarshal(data, r)
}

// get reads the state of name; a missing row is an empty state.
func get(row *sql.Row) ([]byte, bool, error) {
	var data []byte
	err := row.Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	return data, err == nil, err
}

// Update implements records.Records: one write transaction (BEGIN
// IMMEDIATE), committed if a state changed, after which this process's
// waiters are woken and the doorbell rings for the others. It may run fn
// more than once (when the database is busy). It reads the store's clock
// only once the write lock is held, so that every state it reads was
// written earlier by that clock.
func (d *db) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if err := d.sh.lockWrite(ctx); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	defer d.sh.unlockWrite()
	for {
		raise, err := d.update(ctx, names, fn)
		if err == nil && raise > 0 {
			// A counter went past its epoch: record the epoch, then decide
			// anew in it.
			if err = d.raiseEpoch(ctx, raise); err == nil {
				continue
			}
		}
		if err != nil {
			return d.opErr(err)
		}
		return nil
	}
}

// update is one attempt of Update, in one transaction. It writes nothing
// and returns the epoch to record first when a counter would pass into a
// later epoch than d.epoch.
func (d *db) update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) (raise uint64, err error) {
	changed := false
	var bells []string // the doorbells to ring after the commit
	err = d.retry(ctx, func() error {
		raise, bells = 0, bells[:0]
		tx, err := d.sql.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		c := d.clock()
		rows, err := d.read(ctx, tx, names)
		if err != nil {
			return err
		}
		rs := make([]*record, len(names))
		dirty := false
		// A name without a row starts in the current epoch: the row may
		// have been lost with the last commits of an earlier boot, or
		// reclaimed, which another Store of the file may have done since
		// this one last read the epoch.
		epoch := d.epoch.Load()
		if len(rows) < len(names) {
			if epoch, err = d.currentEpoch(ctx, tx); err != nil {
				return err
			}
		}
		if err := d.decodeAll(names, rows, rs, epoch, &c); err != nil {
			return err
		}
		if err := d.applySessions(ctx, tx, states(rs), c.now); err != nil {
			return err
		}
		for i, r := range rs {
			if err := fn(i, &r.State, c.now); err != nil {
				return err
			}
			rs[i] = r
			dirty = dirty || r.Dirty
		}
		if !dirty {
			return nil
		}
		for _, r := range rs {
			if h := r.Seq >> 32; r.Dirty && d.boot != "" && h > d.epoch.Load() {
				raise = max(raise, h)
			}
		}
		if raise > 0 {
			return nil // rolled back: the epoch first
		}
		var writes [][2]string
		for i, r := range rs {
			if !r.Dirty {
				continue
			}
			bells = d.sh.keepBells(names[i], r, c.now, bells)
			data, err := d.encode(r, &c)
			if err != nil {
				return err
			}
			writes = append(writes, [2]string{names[i], string(data)})
		}
		if err := d.write(ctx, tx, writes); err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		changed = true
		return nil
	})
	if changed {
		d.sh.broadcast()
		d.sh.ring()
		ringBells(d.sh.path, bells)
	}
	return raise, err
}

// decodeAll sets rs[i] to the record of names[i]: decoded from its row,
// or new in epoch. A large batch is decoded on several cores: decoding is
// most of the CPU time of a batch (encoding/json, about 3 µs a row).
func (d *db) decodeAll(names []string, rows map[string][]byte, rs []*record, epoch uint64, c *clock) error {
	one := func(i int) error {
		n := names[i]
		if n == "" {
			return errors.New("sqlite: empty lock name") // the epoch's row
		}
		data, found := rows[n]
		if !found {
			rs[i] = &record{Epoch: epochN(epoch), State: lockstate.State{Seq: epoch << 32}}
			return nil
		}
		r, err := d.decode(n, data, c)
		rs[i] = r
		return err
	}
	parts := min(runtime.GOMAXPROCS(0), len(rows)/decodeShare)
	if parts < 2 {
		for i := range names {
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for p := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p * len(names) / parts; i < (p+1)*len(names)/parts && errs[p] == nil; i++ {
				errs[p] = one(i)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// decodeShare is the fewest rows worth a goroutine of decodeAll.
const decodeShare = 128

// currentEpoch reads the epoch row in tx, and raises d.epoch to it.
func (d *db) currentEpoch(ctx context.Context, tx *sql.Tx) (uint64, error) {
	data, found, err := get(tx.StmtContext(ctx, d.stGet).QueryRowContext(ctx, ""))
	if err != nil || !found {
		return d.epoch.Load(), err
	}
	var e epochRow
	if err := json.Unmarshal(data, &e); err != nil {
		return 0, fmt.Errorf("row \"\" of table %q holds an invalid epoch: %w", d.table, err)
	}
	for {
		cur := d.epoch.Load()
		if e.Epoch <= cur {
			return cur, nil
		}
		if d.epoch.CompareAndSwap(cur, e.Epoch) {
			return e.Epoch, nil
		}
	}
}

// read returns the rows of names that exist, by name.
func (d *db) read(ctx context.Context, tx *sql.Tx, names []string) (map[string][]byte, error) {
	rows := make(map[string][]byte, len(names))
	if len(names) == 1 {
		data, found, err := get(tx.StmtContext(ctx, d.stGet).QueryRowContext(ctx, names[0]))
		if found {
			rows[names[0]] = data
		}
		return rows, err
	}
	for _, n := range names {
		if !utf8.ValidString(n) {
			// JSON would change it, and miss its row.
			return nil, fmt.Errorf("sqlite: lock name %q is not valid UTF-8", n)
		}
	}
	list, err := json.Marshal(names)
	if err != nil {
		return nil, err
	}
	rs, err := tx.QueryContext(ctx, d.qGetMany, string(list))
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	for rs.Next() {
		var name string
		var data []byte
		if err := rs.Scan(&name, &data); err != nil {
			return nil, err
		}
		rows[name] = data
	}
	return rows, rs.Err()
}

// write stores each (name, state) of writes; of a name written twice,
// the last state stays.
func (d *db) write(ctx context.Context, tx *sql.Tx, writes [][2]string) error {
	st := tx.StmtContext(ctx, d.stUpsert)
	// The rows without the goroutine the driver starts for each statement
	// whose context can end (to interrupt it): the context is checked
	// between rows instead, and a statement does not wait for a lock (the
	// transaction holds the write lock already).
	wctx := context.WithoutCancel(ctx)
	for i, w := range writes {
		if i%64 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if _, err := st.ExecContext(wctx, w[0], w[1]); err != nil {
			return err
		}
	}
	return nil
}

func (d *db) opErr(err error) error {
	if d.closed.Load() {
		return fmt.Errorf("sqlite: %w", ErrClosed)
	}
	return fmt.Errorf("sqlite: %w", err)
}

// Scan implements records.Records: one read of the rows that have holders
// or queue entries (of name, or starting with prefix), without the write
// lock.
func (d *db) Scan(ctx context.Context, name, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	type row struct {
		name string
		data []byte
	}
	var rs []row
	err := d.retry(ctx, func() error {
		rs = rs[:0]
		var rows *sql.Rows
		var err error
		if name != "" {
			rows, err = d.stNamed.QueryContext(ctx, name)
		} else {
			rows, err = d.sql.QueryContext(ctx, d.qPrefix, prefix)
		}
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.name, &r.data); err != nil {
				return err
			}
			if !strings.HasPrefix(r.name, prefix) {
				break // rows come in name order
			}
			rs = append(rs, r)
		}
		return rows.Err()
	})
	if err != nil {
		return d.opErr(err)
	}
	c := d.clock() // read after the rows: they are older than now
	recs := make([]*record, len(rs))
	for i, row := range rs {
		r, err := d.decode(row.name, row.data, &c)
		if err != nil {
			return d.opErr(err)
		}
		recs[i] = r
	}
	// The sessions are read after the rows: a session renewed meanwhile
	// only keeps a hold live that was.
	if err := d.retry(ctx, func() error { return d.applySessions(ctx, d.sql, states(recs), c.now) }); err != nil {
		return d.opErr(err)
	}
	for i, r := range recs {
		if !fn(rs[i].name, &r.State, c.now) {
			break
		}
	}
	return nil
}

// parseURL reads sqlite:///abs/path.db or sqlite:rel/path.db, with the
// query parameters table, busy_timeout, nocreate and reclaim.
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
		case "reclaim":
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return "", nil, fmt.Errorf("sqlite: URL parameter reclaim=%q is not a duration such as 10m", v)
			}
			o.Reclaim = d
		case "nocreate":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", nil, fmt.Errorf("sqlite: URL parameter nocreate=%q is not a boolean", v)
			}
			o.NoCreate = b
		case "nosessions":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", nil, fmt.Errorf("sqlite: URL parameter nosessions=%q is not a boolean", v)
			}
			o.NoSessions = b
		default:
			return "", nil, fmt.Errorf("sqlite: unknown URL parameter %q (known: table, busy_timeout, nocreate, nosessions, reclaim)", k)
		}
	}
	return path, o, nil
}
