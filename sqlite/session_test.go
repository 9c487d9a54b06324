package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/sqlite"
)

// renewCounter counts the holds a client renews one by one.
type renewCounter struct {
	driver.Store
	holds atomic.Int64
}

func (r *renewCounter) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	for _, h := range hs {
		if strings.HasPrefix(h.Name, "s/") {
			r.holds.Add(1)
		}
	}
	return r.Store.Renew(ctx, hs)
}

// TestSessionKeepsHolds checks that the holds a client keeps alive live in
// the Store's session: over three TTLs the client renews none of them, and
// they stay held, in the store and for their holder.
func TestSessionKeepsHolds(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	ttl := 300 * time.Millisecond
	st := open(t, path, nil)
	rc := &renewCounter{Store: st}
	a := client(t, rc, &baton.Options{TTL: ttl})
	b := client(t, open(t, path, nil), nil)
	// The Store starts its session after its first grant; the client
	// offers a lease to it while it holds another.
	waitSession(t, ctx, st, ttl)
	mustTryLock(t, ctx, a, "first")
	var ls []*baton.Lease
	for i := range 20 {
		l, err := a.TryLock(ctx, fmt.Sprintf("s/%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	time.Sleep(3 * ttl)
	if n := rc.holds.Load(); n != 0 {
		t.Errorf("the client renewed %d holds one by one; want none (the session keeps them)", n)
	}
	for _, l := range ls {
		if err := l.Err(); err != nil {
			t.Errorf("lease %s: %v", l.Name(), err)
		}
		if d := time.Until(l.Deadline()); d < ttl/2 {
			t.Errorf("lease %s: %v left of its TTL %v", l.Name(), d, ttl)
		}
		if _, err := b.TryLock(ctx, l.Name(), nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("another client's TryLock of %s: %v, want ErrNotAcquired", l.Name(), err)
		}
	}
	hs, err := b.Status(ctx, &baton.Filter{Prefix: "s/"})
	if err != nil || len(hs) != 20 {
		t.Fatalf("Status: %d holders, %v; want 20", len(hs), err)
	}
	for _, h := range hs {
		if h.Left <= ttl/2 {
			t.Errorf("%s listed with %v left; want the session's expiry", h.Name, h.Left)
		}
	}
	// Released, they are free at once.
	a.Close()
	for _, l := range ls {
		lb := mustTryLock(t, ctx, b, l.Name())
		lb.Release(ctx)
	}
	// No goroutine outlives the Stores: sessions stop on Close.
	b.Close()
	goleak.VerifyNone(t, leaks)
}

// waitSession waits until st binds holds of ttl to a session.
func waitSession(t *testing.T, ctx context.Context, st driver.Store, ttl time.Duration) {
	t.Helper()
	req := &driver.Request{Name: "probe/" + baton.NewOwner(), Owner: baton.NewOwner(), Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
	for i := 0; ; i++ {
		g, err := st.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// A hold extended keeps its binding: take it anew each time.
		if _, err := st.Release(ctx, []driver.Key{{Name: req.Name, Owner: req.Owner}}); err != nil {
			t.Fatal(err)
		}
		if g.Session != nil {
			return
		}
		if i == 100 {
			t.Fatal("no session after 100 grants")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustTryLock(t *testing.T, ctx context.Context, c *baton.Client, name string) *baton.Lease {
	t.Helper()
	l, err := c.TryLock(ctx, name, nil)
	if err != nil {
		t.Fatalf("TryLock %s: %v", name, err)
	}
	return l
}

// TestSessionLost checks that a session the Store cannot renew ends its
// leases, that the store lets their names go only after their deadline,
// and that the session is never renewed again: the leases stay lost, and
// new ones live in a new session.
func TestSessionLost(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	ttl := 300 * time.Millisecond
	st := open(t, path, nil)
	a := client(t, st, &baton.Options{TTL: ttl})
	b := client(t, open(t, path, nil), nil)
	waitSession(t, ctx, st, ttl)
	mustTryLock(t, ctx, a, "lost/first") // the client offers the next ones to the session
	la := mustTryLock(t, ctx, a, "lost/a")
	lb := mustTryLock(t, ctx, a, "lost/b")
	sqlite.Faulty{Store: st}.SetPartitioned(true)
	for _, l := range []*baton.Lease{la, lb} {
		select {
		case <-l.Done():
		case <-time.After(3 * ttl):
			t.Fatalf("%s: Done not closed though its session went unrenewed for its TTL", l.Name())
		}
		if !errors.Is(l.Err(), baton.ErrLeaseLost) {
			t.Errorf("%s: Err = %v, want ErrLeaseLost", l.Name(), l.Err())
		}
	}
	deadline := la.Deadline()
	lock, err := b.Lock(ctx, "lost/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(deadline) {
		t.Errorf("taken over before the lost lease's deadline")
	}
	sqlite.Faulty{Store: st}.SetPartitioned(false)
	time.Sleep(ttl)
	if la.Err() == nil || lb.Err() == nil {
		t.Error("a lost lease came back")
	}
	lock.Release(ctx)
	l2 := mustTryLock(t, ctx, a, "lost/c")
	time.Sleep(2 * ttl)
	if err := l2.Err(); err != nil {
		t.Errorf("a lease in the new session: %v", err)
	}
	if _, err := b.TryLock(ctx, "lost/c", nil); !errors.Is(err, baton.ErrLocked) {
		t.Errorf("another client's TryLock of a lease kept by the new session: %v", err)
	}
}

// TestSessionOfEarlierBoot checks that a session of an earlier boot keeps
// no hold alive: its holders died with that boot.
func TestSessionOfEarlierBoot(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	restore := sqlite.SetBoot("boot-a")
	a := open(t, path, nil)
	restore()
	waitSession(t, ctx, a, time.Minute)
	g, err := a.Acquire(ctx, &driver.Request{Name: "boot", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true})
	if err != nil || g.Session == nil {
		t.Fatalf("Acquire: %+v, %v; want a grant in a session", g, err)
	}
	restore = sqlite.SetBoot("boot-b")
	b := client(t, open(t, path, nil), nil)
	restore()
	l := mustTryLock(t, ctx, b, "boot")
	l.Release(ctx)
}

// TestSessionEndsOnClose checks that Close deletes the Store's session:
// holds it could not release live only their own TTL.
func TestSessionEndsOnClose(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	a, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitSession(t, ctx, a, time.Minute)
	g, err := a.Acquire(ctx, &driver.Request{Name: "close", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true})
	if err != nil {
		t.Fatal(err)
	}
	if g.Session == nil {
		t.Fatal("a KeepAlive hold is in no session")
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	count := func() (n int) {
		if err := raw.QueryRowContext(ctx, `SELECT count(*) FROM baton_locks_sessions`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 1 {
		t.Fatalf("%d sessions while a hold is bound to one, want 1", n)
	}
	a.Close()
	select {
	case <-g.Session.Done():
	default:
		t.Error("Close did not end the session")
	}
	if d := g.Session.(driver.SessionDeadline).Deadline(); d.After(time.Now()) {
		t.Errorf("the session's deadline after Close is %v ahead, though its row is gone", time.Until(d))
	}
	if n := count(); n != 0 {
		t.Errorf("%d sessions after Close, want 0", n)
	}
}

// TestSessionNoCreate checks that a file without the sessions table, used
// with NoCreate, works as before: every hold renewed on its own; and that
// the Store still honours the sessions of another Store that made the
// table later.
func TestSessionNoCreate(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	open(t, path, nil).Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `DROP TABLE baton_locks_sessions`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	st := open(t, path, &sqlite.Options{NoCreate: true})
	for i := range 5 {
		g, err := st.Acquire(ctx, &driver.Request{Name: fmt.Sprint("nocreate/", i), Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if g.Session != nil {
			t.Error("a hold bound to a session though the file has no sessions table")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Another Store makes the table and binds a hold: past the hold's own
	// TTL, the first Store judges it by its session too.
	ttl := 200 * time.Millisecond
	b := open(t, path, nil)
	waitSession(t, ctx, b, ttl)
	if _, err := b.Acquire(ctx, &driver.Request{Name: "nocreate/b", Owner: "b", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	if _, err := st.Acquire(ctx, &driver.Request{Name: "nocreate/b", Owner: "o", Mode: driver.Exclusive, TTL: ttl}); !errors.Is(err, driver.ErrNotGranted) {
		t.Errorf("Acquire of a name a session keeps, by a Store opened before the sessions table existed: %v, want ErrNotGranted", err)
	}
}

// oldRecord is a row's state as versions from before sessions read it.
type oldRecord struct {
	Boot  string `json:"boot,omitempty"`
	Wall  int64  `json:"wall,omitempty"`
	Epoch uint64 `json:"e,omitempty"`
	lockstate.State
}

// TestSessionRecordsRefusedByEarlierVersions checks that a version from
// before sessions cannot read a record whose holder is bound to a session
// (it would take the holder for expired after its own TTL), and reads it
// again once that holder left; and that a Store with NoSessions binds
// nothing, yet honours the sessions of others.
func TestSessionRecordsRefusedByEarlierVersions(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	st := open(t, path, nil)
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	oldRead := func(name string) error {
		var state string
		if err := raw.QueryRowContext(ctx, `SELECT state FROM baton_locks WHERE name = ?`, name).Scan(&state); err != nil {
			t.Fatal(err)
		}
		var r oldRecord
		return json.Unmarshal([]byte(state), &r)
	}
	ttl := 200 * time.Millisecond
	waitSession(t, ctx, st, ttl)
	req := &driver.Request{Name: "old", Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
	if _, err := st.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := oldRead("old"); err == nil {
		t.Error("an earlier version reads a record whose holder is bound to a session")
	}
	// Past its own TTL the hold lives in its session, for this version
	// and for a Store with NoSessions, which binds none of its own.
	time.Sleep(2 * ttl)
	ns := open(t, path, &sqlite.Options{NoSessions: true})
	if _, err := ns.Acquire(ctx, &driver.Request{Name: "old", Owner: "p", Mode: driver.Exclusive, TTL: ttl}); !errors.Is(err, driver.ErrNotGranted) {
		t.Errorf("a NoSessions Store's Acquire of a name a session keeps: %v, want ErrNotGranted", err)
	}
	for i := range 5 {
		g, err := ns.Acquire(ctx, &driver.Request{Name: fmt.Sprint("ns/", i), Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if g.Session != nil {
			t.Error("a NoSessions Store bound a hold to a session")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := st.Release(ctx, []driver.Key{{Name: "old", Owner: "o"}}); err != nil {
		t.Fatal(err)
	}
	if err := oldRead("old"); err != nil {
		t.Errorf("an earlier version cannot read the record once its holder left: %v", err)
	}
}

// TestSessionExtendedKeepsBinding checks that a hold extended (its owner
// asked again) keeps the session it was bound to, the one its lease
// knows: a grant says it is in the Store's session only if it is.
func TestSessionExtendedKeepsBinding(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	st := open(t, filepath.Join(t.TempDir(), "locks.db"), nil)
	ttl := time.Minute
	waitSession(t, ctx, st, ttl)
	plain := &driver.Request{Name: "ext/plain", Owner: "o", Mode: driver.Exclusive, TTL: ttl}
	if g, err := st.Acquire(ctx, plain); err != nil || g.Session != nil {
		t.Fatalf("Acquire without KeepAlive: %+v, %v; want a grant in no session", g, err)
	}
	again := *plain
	again.KeepAlive = true
	g, err := st.Acquire(ctx, &again)
	if err != nil || !g.Extended {
		t.Fatalf("Acquire again: %+v, %v; want it extended", g, err)
	}
	if g.Session != nil {
		t.Error("a hold taken in no session is in one once extended: its lease would not renew it")
	}
	bound := &driver.Request{Name: "ext/bound", Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
	for _, r := range []*driver.Request{bound, bound} {
		if g, err := st.Acquire(ctx, r); err != nil || g.Session == nil {
			t.Fatalf("Acquire with KeepAlive: %+v, %v; want a grant in the session", g, err)
		}
	}
}
