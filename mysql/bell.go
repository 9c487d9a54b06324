package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/baton-go/baton/driver"
)

var sqldriverErrBadConn = sqldriver.ErrBadConn

// bellTimeout bounds every statement on the bell connection. Its
// statements never wait for a lock (GET_LOCK with timeout 0), so they are
// quick; they do not use the caller's context, whose cancellation would
// close the connection and drop every bell of the store.
const bellTimeout = 5 * time.Second

// maxPerStatement bounds the GET_LOCK or RELEASE_LOCK calls of one statement.
const maxPerStatement = 100

// maxBellConns bounds the connections a Store keeps for its bells (a
// quarter of a pool's limit, at least one, if the pool has one).
const maxBellConns = 4

// maxCallBells bounds the bells of a connection that acquire calls run
// on: every table a statement opens makes MariaDB look through the
// session's metadata locks, user-level locks included, one by one, so a
// session holding thousands of bells runs a procedure many times slower.
// A connection with more bells only takes and releases bells.
const maxCallBells = 64

// maxBells bounds the bells a Store holds. MariaDB's GET_LOCK looks
// through the session's user-level locks one by one, so a session's bells
// slow down each one it takes after them (MySQL keeps them in a hash, but
// a client holding many locks takes them faster there too with the bound:
// see docs/benchmarks-history.md). An entry taken while the Store holds
// that many has no bell, and its waiters poll, backing off.
const maxBells = 4096

// bells holds a Store's bells: GET_LOCKs on a few connections of its own.
// An acquire runs its procedure on an idle one of them, and the procedure
// takes the entry's bell there itself, which saves a round trip; a
// connection busy with such a call (which may wait up to a second for a
// name InLockedTx holds) holds up only the bells on it, and the next
// acquire takes another. Bell names are hex hashes with a fixed prefix, so
// they are written into the SQL text, which saves preparing statements on
// the connections.
type bells struct {
	db *sql.DB

	mu     sync.Mutex // guards the fields below, never held across a statement
	conns  []*bellConn
	where  map[string]*bellConn // the connection each held bell is on
	lost   map[string]bool      // bells of a connection that failed: taken again by the next take
	closed bool
	max    int // bells held at most (0: no bound)
}

// full reports whether no more bells may be taken. b.mu is held.
func (b *bells) full() bool { return b.max > 0 && len(b.where) >= b.max }

// bellConn is one bell connection. Its mutex is held while a statement
// runs on it; bells to release while it is busy wait in pending, and
// whoever unlocks it releases them (see unlock).
type bellConn struct {
	mu      sync.Mutex
	conn    *sql.Conn
	stmts   map[string]*sql.Stmt // the procedures' CALLs, by SQL, prepared on conn
	pending []string             // guarded by bells.mu
	n       int                  // bells held on conn, guarded by bells.mu
}

// hold records that bc holds the bell name. b.mu is held.
func (b *bells) hold(name string, bc *bellConn) {
	if old := b.where[name]; old != nil {
		old.n--
	}
	b.where[name] = bc
	bc.n++
}

// forget records that the bell name is no longer held, and returns the
// connection that held it, if any. b.mu is held.
func (b *bells) forget(name string) *bellConn {
	bc := b.where[name]
	if bc != nil {
		bc.n--
		delete(b.where, name)
	}
	return bc
}

// lock returns a bell connection, locked: an idle one (for a call, one
// with at most maxCallBells bells), a new one while there are fewer than
// maxBellConns, or, with wait set, the first once it is free (nil without
// wait when there is none, or after close).
func (b *bells) lock(wait, call bool) *bellConn {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	for _, bc := range b.conns {
		if (!call || bc.n <= maxCallBells) && bc.mu.TryLock() {
			b.mu.Unlock()
			return bc
		}
	}
	limit := maxBellConns
	if m := b.db.Stats().MaxOpenConnections; m > 0 {
		limit = max(1, min(limit, m/4)) // a small pool keeps its connections for the calls
	}
	if len(b.conns) < limit {
		bc := &bellConn{}
		bc.mu.Lock()
		b.conns = append(b.conns, bc)
		b.mu.Unlock()
		return bc
	}
	bc := b.conns[0]
	b.mu.Unlock()
	if !wait {
		return nil
	}
	bc.mu.Lock()
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		bc.mu.Unlock()
		return nil
	}
	return bc
}

// unlock unlocks bc after releasing its pending bells, and releases those
// that arrive as it unlocks if nobody else has locked it meanwhile.
func (b *bells) unlock(bc *bellConn) {
	for {
		b.mu.Lock()
		rel := bc.pending
		bc.pending = nil
		closed := b.closed
		b.mu.Unlock()
		for len(rel) > 0 && !closed {
			k := min(len(rel), maxPerStatement)
			if _, err := b.exec(context.Background(), bc, "RELEASE_LOCK", rel[:k]); err != nil {
				break // the connection is gone, and its bells with it
			}
			rel = rel[k:]
		}
		bc.mu.Unlock()
		b.mu.Lock()
		more := len(bc.pending) > 0 && !b.closed
		b.mu.Unlock()
		if !more || !bc.mu.TryLock() {
			return
		}
	}
}

// connect opens bc's connection if it has none. bc is locked.
func (b *bells) connect(ctx context.Context, bc *bellConn) error {
	if bc.conn != nil {
		return nil
	}
	c, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	bc.conn = c
	return nil
}

// fail drops bc's connection after a failure: the server releases its
// bells when it notices. bc is locked.
func (b *bells) fail(bc *bellConn) {
	for _, st := range bc.stmts {
		st.Close()
	}
	bc.stmts = nil
	if bc.conn != nil {
		discard(bc.conn)
		bc.conn = nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for n, c := range b.where {
		if c == bc {
			b.forget(n)
			b.lost[n] = true
		}
	}
	bc.pending = nil // released with the connection
}

// exec runs one statement of calls (GET_LOCK(name, 0) or RELEASE_LOCK(name))
// on bc and returns their results; dial is the context for opening the
// connection if needed. bc is locked.
func (b *bells) exec(dial context.Context, bc *bellConn, fn string, names []string) ([]sql.NullInt64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bellTimeout)
	defer cancel()
	if err := b.connect(dial, bc); err != nil {
		return nil, err
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString(fn)
		q.WriteString("('")
		q.WriteString(n) // "baton:" and hex digits only
		if fn == "GET_LOCK" {
			q.WriteString("', 0)")
		} else {
			q.WriteString("')")
		}
	}
	res := make([]sql.NullInt64, len(names))
	ptrs := make([]any, len(names))
	for i := range res {
		ptrs[i] = &res[i]
	}
	if err := bc.conn.QueryRowContext(ctx, q.String()).Scan(ptrs...); err != nil {
		// The connection may be broken, and its bells with it.
		b.fail(bc)
		return nil, err
	}
	return res, nil
}

// take takes the bell called name, without waiting for it, and reports
// whether it took it now (false if it was held already, or is held by
// another session, or the bell connection failed: the entry then has no
// bell, and its waiters poll). Bells lost with a failed connection are
// taken again with it, best effort, for the entries still live.
func (b *bells) take(ctx context.Context, name string) bool {
	b.mu.Lock()
	_, held := b.where[name]
	delete(b.lost, name)
	full := b.full()
	b.mu.Unlock()
	if held || full {
		return false
	}
	bc := b.lock(true, false)
	if bc == nil {
		return false
	}
	defer b.unlock(bc)
	names := []string{name}
	b.mu.Lock()
	for n := range b.lost {
		if len(names) == maxPerStatement {
			break
		}
		names = append(names, n)
		delete(b.lost, n)
	}
	b.mu.Unlock()
	res, err := b.exec(ctx, bc, "GET_LOCK", names)
	if err != nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, n := range names {
		if res[i].Int64 == 1 {
			b.hold(n, bc)
		}
	}
	return res[0].Int64 == 1
}

// drop releases the named bells that are held: at once where their
// connection is idle, else as soon as it is (see unlock).
func (b *bells) drop(names ...string) {
	b.mu.Lock()
	var touched []*bellConn
	for _, n := range names {
		delete(b.lost, n)
		bc := b.forget(n)
		if bc == nil {
			continue
		}
		if !slices.Contains(touched, bc) {
			touched = append(touched, bc)
		}
		bc.pending = append(bc.pending, n)
	}
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return
	}
	for _, bc := range touched {
		if bc.mu.TryLock() {
			b.unlock(bc)
		}
	}
}

// releaseCall runs the release procedure on the idle bell connection
// that holds the first of the bells among names that are held, so that
// the procedure releases that connection's bells itself (see ddlTemplate).
// ok is false if there is no such connection, or it is busy, or it holds
// more than maxCallBells bells: the caller then calls the procedure on a
// pool connection. Either way the caller drops the bells after (drop skips
// those released here). args builds the procedure's arguments from the
// bell to release for each key ("" for none).
func (b *bells) releaseCall(ctx context.Context, names []string, prepare string, args func(bells []string) []any) (res string, ok bool, err error) {
	b.mu.Lock()
	var bc *bellConn
	for _, n := range names {
		if bc = b.where[n]; bc != nil {
			break
		}
	}
	if bc == nil || b.closed || bc.n > maxCallBells || !bc.mu.TryLock() {
		b.mu.Unlock()
		return "", false, nil
	}
	ring := make([]string, len(names))
	for i, n := range names {
		if b.where[n] == bc {
			ring[i] = n
			b.forget(n)
			delete(b.lost, n)
		}
	}
	b.mu.Unlock()
	defer b.unlock(bc)
	if bc.conn == nil {
		return "", false, nil // the connection failed: its bells are gone
	}
	st, err := b.prepared(ctx, bc, prepare)
	if err != nil {
		return "", false, nil
	}
	err = st.QueryRowContext(ctx, args(ring)...).Scan(&res)
	if err != nil {
		var me *mysqldrv.MySQLError
		if !errors.As(err, &me) {
			b.fail(bc) // broken, or cancelled (closed): its bells are gone
			return "", true, err
		}
		// The procedure failed before releasing the bells, or after: make
		// sure they are released (RELEASE_LOCK of a free bell does nothing).
		var rung []string
		for _, n := range ring {
			if n != "" {
				rung = append(rung, n)
			}
		}
		b.mu.Lock()
		bc.pending = append(bc.pending, rung...)
		b.mu.Unlock()
	}
	return res, true, err
}

// prepared returns the statement of the SQL prepare on bc's connection,
// preparing it the first time. If that fails, the connection is dropped.
// bc is locked and has a connection.
func (b *bells) prepared(ctx context.Context, bc *bellConn, prepare string) (*sql.Stmt, error) {
	if st := bc.stmts[prepare]; st != nil {
		return st, nil
	}
	st, err := bc.conn.PrepareContext(ctx, prepare)
	if err != nil {
		b.fail(bc)
		return nil, err
	}
	if bc.stmts == nil {
		bc.stmts = map[string]*sql.Stmt{}
	}
	bc.stmts[prepare] = st
	return st, nil
}

// acquireCall runs an acquire procedure (prepare is its CALL) on an idle
// bell connection, so that the procedure takes the bell called name
// itself, saving a round trip (see ddlTemplate). ok is false if no bell
// connection was idle with at most maxCallBells bells (or none could be
// opened): the caller then takes the bell with take and calls the
// procedure on a pool connection.
// call runs the procedure with the bell to take ("" if it is held
// already) and reports whether the session holds it after.
func (b *bells) acquireCall(ctx context.Context, name, prepare string, call func(st *sql.Stmt, bell string) (bool, error)) (ok bool, err error) {
	bc := b.lock(false, true)
	if bc == nil {
		return false, nil
	}
	defer b.unlock(bc)
	if err := b.connect(ctx, bc); err != nil {
		return false, nil
	}
	st, err := b.prepared(ctx, bc, prepare)
	if err != nil {
		return false, nil
	}
	b.mu.Lock()
	delete(b.lost, name)
	bell := name
	if b.where[name] != nil || b.full() {
		bell = "" // held already (on this connection or another), or none
	}
	b.mu.Unlock()
	held, err := call(st, bell)
	if err != nil {
		var me *mysqldrv.MySQLError
		if !errors.As(err, &me) {
			b.fail(bc) // broken, or cancelled (closed): its bells are gone
		}
		// The procedure released the bell it took.
		return true, err
	}
	if bell != "" && held {
		b.mu.Lock()
		b.hold(name, bc)
		b.mu.Unlock()
	}
	return true, nil
}

// holds reports whether the bell called name is held.
func (b *bells) holds(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.where[name] != nil
}

// heldCount is the number of bells held, for tests.
func (b *bells) heldCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.where)
}

// close drops the bell connections, which releases every bell at once.
func (b *bells) close() {
	b.mu.Lock()
	b.closed = true
	conns := b.conns
	b.mu.Unlock()
	for _, bc := range conns {
		bc.mu.Lock()
		b.fail(bc)
		bc.mu.Unlock()
	}
	b.mu.Lock()
	clear(b.lost)
	b.mu.Unlock()
}

// setBlocker records, for the watch of req if it has one, the entry req
// waits for.
func (s *Store) setBlocker(req *driver.Request, blk *blocker) {
	k := driver.Key{Name: req.Name, Owner: req.Owner}
	s.mu.Lock()
	w := s.watches[k]
	if w == nil && req.Queue {
		if blk == nil {
			delete(s.refused, k)
		} else {
			if len(s.refused) >= maxRefused {
				clear(s.refused) // Locks that ended before watching: forget them
			}
			s.refused[k] = blk
		}
	}
	s.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		w.blk = blk
		w.mu.Unlock()
	}
}

func (s *Store) clearBlocker(k driver.Key) {
	s.mu.Lock()
	w := s.watches[k]
	s.mu.Unlock()
	if w != nil {
		w.mu.Lock()
		w.blk = nil
		w.mu.Unlock()
	}
}

// Watch implements driver.Waiter. The watch waits for the bell of the
// entry that the last refused Acquire of the request named (see the
// package documentation).
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if err := s.begin(ctx); err != nil {
		return nil, err
	}
	w := &watch{s: s, key: driver.Key{Name: req.Name, Owner: req.Owner}}
	s.mu.Lock()
	s.watches[w.key] = w
	w.blk = s.refused[w.key]
	delete(s.refused, w.key)
	s.mu.Unlock()
	return w, nil
}

// maxRefused bounds Store.refused.
const maxRefused = 4096

// Replay implements driver.Replayer. A watch that starts from the blocker
// its refused attempt named waits for that entry's bell, which is free at
// once if the entry left meanwhile: nothing is missed, and no second
// attempt is needed. Without a blocker, baton tries again first.
func (w *watch) Replay(time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.blk != nil
}

// noDeadlineWait bounds one GET_LOCK of a Wait whose context has no
// deadline (baton always gives one).
const noDeadlineWait = 5 * time.Second

type watch struct {
	s   *Store
	key driver.Key

	mu     sync.Mutex
	blk    *blocker  // set by Acquire
	conn   *sql.Conn // parked between waits; nil while a wait uses it
	closed bool
	// lastBlk is the blocker of the previous wait, and lastFree whether
	// its bell was found free: if the same entry is still in the way, its
	// bell tells nothing (its Store is gone, or never took it).
	lastBlk  blocker
	lastFree bool
	streak   int // consecutive waits on an entry whose bell was free
}

// Wait implements driver.Watch.
func (w *watch) Wait(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	blk := w.blk
	var bell string
	if blk != nil {
		if *blk == w.lastBlk && w.lastFree {
			w.streak++
		} else {
			w.streak = 0
			w.lastBlk, w.lastFree = *blk, false
		}
		bell = w.s.bellName(w.key.Name, blk.owner)
	}
	streak := w.streak
	conn := w.conn
	w.conn = nil
	w.mu.Unlock()

	if blk == nil || streak > 0 {
		// Nothing to ring (or a bell that rings for nothing): back off,
		// 1ms, 2ms, 4ms… up to the caller's deadline (baton's poll).
		d := time.Duration(math.MaxInt64)
		if blk != nil {
			d = time.Millisecond << min(streak-1, 30)
		}
		w.park(conn)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-w.s.ctx.Done():
			return ErrClosed
		}
	}

	got, err := w.ring(ctx, conn, bell)
	if got {
		w.mu.Lock()
		w.lastFree = true
		w.mu.Unlock()
	}
	return err
}

// ring waits for the bell and releases it as soon as it gets it.
func (w *watch) ring(ctx context.Context, conn *sql.Conn, bell string) (bool, error) {
	timeout := noDeadlineWait
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	if timeout <= 0 {
		w.park(conn)
		return false, ctx.Err()
	}
	var qctx context.Context
	var cancel context.CancelFunc
	var secs string
	if w.s.srv.mariadb {
		// The server ends the wait at the deadline; the context only ends
		// it early, on cancellation or Close, by closing the connection.
		secs = strconv.FormatFloat(timeout.Seconds(), 'f', 3, 64)
		qctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), timeout+2*time.Second)
		stop := context.AfterFunc(ctx, func() {
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				cancel()
			}
		})
		defer stop()
	} else {
		// MySQL rounds the timeout down to whole seconds: round up, and let
		// the deadline end the wait by closing the connection.
		secs = strconv.FormatInt(int64(math.Ceil(timeout.Seconds())), 10)
		qctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	stopClose := context.AfterFunc(w.s.ctx, cancel)
	defer stopClose()

	if conn == nil {
		c, err := w.s.db.Conn(qctx)
		if err != nil {
			return false, err
		}
		conn = c
	}
	var got sql.NullInt64
	err := conn.QueryRowContext(qctx, "SELECT IF(GET_LOCK('"+bell+"', "+secs+") = 1, RELEASE_LOCK('"+bell+"'), 0)").Scan(&got)
	if err != nil {
		// Cancelled (the connection was closed) or broken: a new one next time.
		conn.Close()
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		if w.s.closed.Load() {
			return false, ErrClosed
		}
		return false, err
	}
	w.park(conn)
	return got.Int64 == 1, nil
}

// park keeps conn for the next wait, or closes it if the watch is closed.
func (w *watch) park(conn *sql.Conn) {
	if conn == nil {
		return
	}
	w.mu.Lock()
	if w.closed || w.conn != nil {
		w.mu.Unlock()
		conn.Close()
		return
	}
	w.conn = conn
	w.mu.Unlock()
}

// Close implements driver.Watch.
func (w *watch) Close() error {
	w.mu.Lock()
	w.closed = true
	conn := w.conn
	w.conn = nil
	w.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	w.s.mu.Lock()
	if w.s.watches[w.key] == w {
		delete(w.s.watches, w.key)
	}
	w.s.mu.Unlock()
	return nil
}
