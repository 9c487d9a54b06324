package mysql

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"math"
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

// bells holds a Store's bells: GET_LOCKs on one connection of its own.
// Bell names are hex hashes with a fixed prefix, so they are written into
// the SQL text, which saves preparing statements on the connection.
type bells struct {
	db *sql.DB

	mu      sync.Mutex
	conn    *sql.Conn
	release *sql.Stmt       // the release procedure, prepared on conn
	held    map[string]bool // bells held on conn
	lost    map[string]bool // bells held on a connection that failed: taken again on the next one
	closed  bool
}

// connect opens the bell connection if there is none. b.mu is held.
func (b *bells) connect(ctx context.Context) error {
	if b.conn != nil {
		return nil
	}
	c, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	b.conn = c
	return nil
}

// fail drops a bell connection that failed: the server releases its bells
// when it notices. b.mu is held.
func (b *bells) fail() {
	if b.release != nil {
		b.release.Close()
		b.release = nil
	}
	if b.conn != nil {
		discard(b.conn)
		b.conn = nil
	}
	for n := range b.held {
		b.lost[n] = true
	}
	clear(b.held)
}

// exec runs one statement of calls (GET_LOCK(name, 0) or RELEASE_LOCK(name))
// on the bell connection and returns their results; dial is the context
// for opening the connection if needed. b.mu is held.
func (b *bells) exec(dial context.Context, fn string, names []string) ([]sql.NullInt64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bellTimeout)
	defer cancel()
	if b.conn == nil {
		if err := b.connect(dial); err != nil {
			return nil, err
		}
		if len(b.lost) > 0 && fn == "GET_LOCK" {
			// Best effort: the bells of the failed connection were released
			// by the server; take them again for the entries still live.
			for n := range b.lost {
				names = append(names, n)
			}
		}
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
	if err := b.conn.QueryRowContext(ctx, q.String()).Scan(ptrs...); err != nil {
		// The connection may be broken, and its bells with it.
		b.fail()
		return nil, err
	}
	if fn == "GET_LOCK" {
		for i := len(names) - 1; i >= 0 && b.lost[names[i]]; i-- {
			if res[i].Int64 == 1 {
				b.held[names[i]] = true
			}
			delete(b.lost, names[i])
		}
	}
	return res, nil
}

// take takes the bell called name, without waiting, and reports whether it
// took it now (false if it was held already, or is held by another
// session, or the bell connection failed: the entry then has no bell, and
// its waiters poll).
func (b *bells) take(ctx context.Context, name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.held[name] {
		return false
	}
	delete(b.lost, name)
	res, err := b.exec(ctx, "GET_LOCK", []string{name})
	if err != nil || res[0].Int64 != 1 {
		return false
	}
	b.held[name] = true
	return true
}

// drop releases the named bells that are held.
func (b *bells) drop(names ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var rel []string
	for _, n := range names {
		delete(b.lost, n)
		if b.held[n] {
			delete(b.held, n)
			rel = append(rel, n)
		}
	}
	if b.closed {
		return
	}
	for len(rel) > 0 {
		k := min(len(rel), maxPerStatement)
		if _, err := b.exec(context.Background(), "RELEASE_LOCK", rel[:k]); err != nil {
			return // the connection is gone, and its bells with it
		}
		rel = rel[k:]
	}
}

// releaseCall runs the release procedure on the bell connection, if it is
// idle, with the bells among names that it holds, so that the procedure
// releases them itself (see ddlTemplate). ok is false if the connection
// was busy: the caller then calls the procedure on a pool connection and
// drops the bells after. keys builds the procedure's argument from the
// bell to release for each key ("" for none).
func (b *bells) releaseCall(ctx context.Context, names []string, prepare string, keys func(bells []string) string) (res string, ok bool, err error) {
	if !b.mu.TryLock() {
		return "", false, nil
	}
	defer b.mu.Unlock()
	if b.closed {
		return "", false, nil
	}
	if err := b.connect(ctx); err != nil {
		return "", false, nil
	}
	if b.release == nil {
		st, err := b.conn.PrepareContext(ctx, prepare)
		if err != nil {
			b.fail()
			return "", false, nil
		}
		b.release = st
	}
	ring := make([]string, len(names))
	var rung []string
	for i, n := range names {
		delete(b.lost, n)
		if b.held[n] {
			ring[i] = n
			rung = append(rung, n)
			delete(b.held, n)
		}
	}
	err = b.release.QueryRowContext(ctx, keys(ring)).Scan(&res)
	if err != nil {
		var me *mysqldrv.MySQLError
		if !errors.As(err, &me) {
			b.fail() // broken, or cancelled (closed): its bells are gone
			return "", true, err
		}
		// The procedure failed before releasing the bells, or after: make
		// sure they are released (RELEASE_LOCK of a free bell does nothing).
		for len(rung) > 0 {
			k := min(len(rung), maxPerStatement)
			if _, err := b.exec(ctx, "RELEASE_LOCK", rung[:k]); err != nil {
				break
			}
			rung = rung[k:]
		}
	}
	return res, true, err
}

// heldCount is the number of bells held, for tests.
func (b *bells) heldCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// close drops the bell connection, which releases every bell at once.
func (b *bells) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.fail()
	clear(b.lost)
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
