package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/sessions"
)

// SessionsConfig says how to run Sessions on a store that binds the holds
// its client keeps alive to a session of its own (driver.Request.KeepAlive).
type SessionsConfig struct {
	// Open returns a new store of the same locks each time. It must
	// implement Partitioner: a partition fails its session's renewals.
	Open func(t testing.TB) driver.Store
	// Count, if set, returns how many sessions the store keeps (its
	// records of them).
	Count func(t testing.TB) int
	// Slow multiplies the TTLs (default 1).
	Slow float64
	// CloseMeta, if set, is the metadata of one of the leases that
	// CloseReleases has Close release (a store that keeps long metadata
	// apart can take that path).
	CloseMeta map[string]string
	// AfterClose, if set, checks the store after CloseReleases's Close
	// (every name it used starts with prefix): no hold of a session, no
	// session's record left.
	AfterClose func(t testing.TB, prefix string)
}

// Sessions checks a store's sessions through baton's API: holds past
// their own TTL that only their session keeps, Purge, Status, a session
// lost to a partition, an extended hold's binding, a session ended by
// Close, and Close releasing a session's holds (handing a name to its
// waiter).
func Sessions(t *testing.T, cfg SessionsConfig) {
	if cfg.Slow <= 0 {
		cfg.Slow = 1
	}
	ttl := time.Duration(float64(300*time.Millisecond) * cfg.Slow)
	t.Run("KeepsHolds", func(t *testing.T) { sessionsKeepHolds(t, cfg, ttl) })
	t.Run("Lost", func(t *testing.T) { sessionLost(t, cfg, ttl) })
	t.Run("ExtendedKeepsBinding", func(t *testing.T) { sessionExtendedKeepsBinding(t, cfg) })
	t.Run("EndsOnClose", func(t *testing.T) { sessionEndsOnClose(t, cfg) })
	t.Run("CloseReleases", func(t *testing.T) { sessionCloseReleases(t, cfg) })
}

// WaitSession waits until st binds holds of ttl to a session: the store
// makes one after a first grant that could have used it.
func WaitSession(t testing.TB, ctx context.Context, st driver.Store, ttl time.Duration) {
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

// renewCounter counts the holds of names with a prefix that a client
// renews one by one.
type renewCounter struct {
	driver.Store
	prefix string
	holds  atomic.Int64
}

func (r *renewCounter) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	for _, h := range hs {
		if strings.HasPrefix(h.Name, r.prefix) {
			r.holds.Add(1)
		}
	}
	return r.Store.Renew(ctx, hs)
}

// sessionsKeepHolds: over three TTLs the client renews none of the holds
// in its session, and they stay held, for their holder and in the store,
// whether exclusive or shared, asked for by another client all along or
// not at all; Status shows them with their session's expiry, Purge leaves
// them; released, they are free at once; no goroutine outlives Close.
func sessionsKeepHolds(t *testing.T, cfg SessionsConfig, ttl time.Duration) {
	leaks := goleak.IgnoreCurrent()
	ctx := ctxFor(t, 60*time.Second)
	st := cfg.Open(t)
	prefix := name(t) + "/"
	rc := &renewCounter{Store: st, prefix: prefix}
	a := newClient(t, rc, &baton.Options{TTL: ttl})
	b := newClient(t, cfg.Open(t), nil)
	WaitSession(t, ctx, st, ttl)
	mustTry(t, ctx, a, name(t)+"-first", nil) // the client offers the next ones to the session
	// Names another client asks for all along, and names nobody asks for
	// until the end.
	var asked, quiet []*baton.Lease
	for i := range 10 {
		o := &baton.LockOptions{Shared: i%4 == 3}
		asked = append(asked, mustTry(t, ctx, a, fmt.Sprintf("%sasked/%d", prefix, i), o))
		quiet = append(quiet, mustTry(t, ctx, a, fmt.Sprintf("%squiet/%d", prefix, i), o))
	}
	for range 3 {
		time.Sleep(ttl)
		for i, l := range asked {
			if _, err := b.TryLock(ctx, l.Name(), nil); !errors.Is(err, baton.ErrLocked) {
				t.Errorf("another client's TryLock of %s: %v, want ErrLocked", l.Name(), err)
			}
			if i%5 == 0 {
				// A request that queues, and leaves an entry.
				wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				if _, err := b.Lock(wctx, l.Name(), nil); err == nil {
					t.Errorf("another client's Lock of %s granted", l.Name())
				}
				cancel()
			}
		}
	}
	status := func(when string) {
		t.Helper()
		hs, err := b.Status(ctx, &baton.Filter{Prefix: prefix})
		if err != nil || len(hs) != 20 {
			t.Fatalf("Status %s: %d holders, %v; want 20", when, len(hs), err)
		}
		for _, h := range hs {
			if h.Left <= ttl/2 {
				t.Errorf("Status %s: %s listed with %v left; want the session's expiry", when, h.Name, h.Left)
			}
		}
	}
	status("")
	if _, err := b.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	status("after Purge")
	if n := rc.holds.Load(); n != 0 {
		t.Errorf("the client renewed %d holds one by one; want none (the session keeps them)", n)
	}
	for _, l := range append(asked, quiet...) {
		if err := l.Err(); err != nil {
			t.Errorf("lease %s: %v", l.Name(), err)
		}
		if d := time.Until(l.Deadline()); d < ttl/2 {
			t.Errorf("lease %s: %v left of its TTL %v", l.Name(), d, ttl)
		}
	}
	for i, l := range append(quiet, asked...) {
		if i >= len(quiet) {
			if _, err := b.TryLock(ctx, l.Name(), nil); !errors.Is(err, baton.ErrLocked) {
				t.Errorf("another client's TryLock of %s: %v, want ErrLocked", l.Name(), err)
			}
		}
		// Strict: the store must find the hold its session kept.
		if err := l.ReleaseStrict(ctx); err != nil {
			t.Errorf("Release %s: %v", l.Name(), err)
		}
		release(t, ctx, mustTry(t, ctx, b, l.Name(), nil))
	}
	a.Close()
	b.Close()
	goleak.VerifyNone(t, leaks)
}

// sessionLost: a session the store cannot renew ends its leases; the
// store lets their names go only after their deadline; the session is
// never renewed again (the leases stay lost), and new leases live in a new
// session.
func sessionLost(t *testing.T, cfg SessionsConfig, ttl time.Duration) {
	ctx := ctxFor(t, 60*time.Second)
	st := cfg.Open(t)
	p, ok := st.(Partitioner)
	if !ok {
		t.Fatalf("drivertest: SessionsConfig.Open must return a Partitioner, not %T", st)
	}
	n := name(t)
	a := newClient(t, st, &baton.Options{TTL: ttl})
	b := newClient(t, cfg.Open(t), nil)
	WaitSession(t, ctx, st, ttl)
	mustTry(t, ctx, a, n+"/first", nil)
	la := mustTry(t, ctx, a, n+"/a", nil)
	lb := mustTry(t, ctx, a, n+"/b", &baton.LockOptions{Shared: true})
	p.SetPartitioned(true)
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
	for _, l := range []*baton.Lease{la, lb} {
		deadline := l.Deadline()
		lock := mustLock(t, ctx, b, l.Name(), nil)
		if time.Now().Before(deadline) {
			t.Errorf("%s taken over before the lost lease's deadline", l.Name())
		}
		release(t, ctx, lock)
	}
	p.SetPartitioned(false)
	time.Sleep(ttl)
	if la.Err() == nil || lb.Err() == nil {
		t.Error("a lost lease came back")
	}
	l2 := mustTry(t, ctx, a, n+"/c", nil)
	time.Sleep(2 * ttl)
	if err := l2.Err(); err != nil {
		t.Errorf("a lease in the new session: %v", err)
	}
	if _, err := b.TryLock(ctx, n+"/c", nil); !errors.Is(err, baton.ErrLocked) {
		t.Errorf("another client's TryLock of a lease kept by the new session: %v", err)
	}
}

// sessionExtendedKeepsBinding: a hold extended (its owner asked again)
// keeps the session it was bound to, the one its lease knows; a grant says
// it is in the store's session only if it is.
func sessionExtendedKeepsBinding(t *testing.T, cfg SessionsConfig) {
	ctx := ctxFor(t, 30*time.Second)
	st := cfg.Open(t)
	n := name(t)
	ttl := time.Minute
	WaitSession(t, ctx, st, ttl)
	plain := &driver.Request{Name: n + "/plain", Owner: "o", Mode: driver.Exclusive, TTL: ttl}
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
	bound := &driver.Request{Name: n + "/bound", Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
	for range 2 {
		if g, err := st.Acquire(ctx, bound); err != nil || g.Session == nil {
			t.Fatalf("Acquire with KeepAlive: %+v, %v; want a grant in the session", g, err)
		}
	}
	if _, err := st.Release(ctx, []driver.Key{{Name: plain.Name, Owner: "o"}, {Name: bound.Name, Owner: "o"}}); err != nil {
		t.Fatal(err)
	}
}

// sessionEndsOnClose: Close ends the store's session, moves its deadline
// to the moment it ended (a lease must not outlive its session's record in
// its holder's eyes), and deletes its record.
func sessionEndsOnClose(t *testing.T, cfg SessionsConfig) {
	ctx := ctxFor(t, 30*time.Second)
	st := cfg.Open(t)
	WaitSession(t, ctx, st, time.Minute)
	req := &driver.Request{Name: name(t), Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true}
	g, err := st.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if g.Session == nil {
		t.Fatal("a KeepAlive hold is in no session")
	}
	before := 0
	if cfg.Count != nil {
		if before = cfg.Count(t); before < 1 {
			t.Fatalf("%d sessions while a hold is bound to one", before)
		}
	}
	if _, err := st.Release(ctx, []driver.Key{{Name: req.Name, Owner: req.Owner}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	select {
	case <-g.Session.Done():
	default:
		t.Error("Close did not end the session")
	}
	if d := g.Session.(driver.SessionDeadline).Deadline(); d.After(time.Now()) {
		t.Errorf("the session's deadline after Close is %v ahead, though its record is gone", time.Until(d))
	}
	if cfg.Count != nil {
		if n := cfg.Count(t); n != before-1 {
			t.Errorf("%d sessions after Close, want %d", n, before-1)
		}
	}
}

// releaseCounter counts the keys a client releases one by one.
type releaseCounter struct {
	driver.Store
	keys atomic.Int64
}

func (r *releaseCounter) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	r.keys.Add(int64(len(keys)))
	return r.Store.Release(ctx, keys)
}

// sessionReleaseCounter also counts the sessions it releases at once, for
// a store that does (driver.SessionReleaser).
type sessionReleaseCounter struct {
	*releaseCounter
	sr       driver.SessionReleaser
	sessions atomic.Int64
}

func (r *sessionReleaseCounter) ReleaseSession(ctx context.Context, x driver.Session) error {
	r.sessions.Add(1)
	return r.sr.ReleaseSession(ctx, x)
}

// sessionCloseReleases: a client's Close releases the leases in its
// session (with one call, on a store that releases a session at once),
// hands a name to the waiter queued for it, frees the others at once,
// and leaves no goroutine behind.
func sessionCloseReleases(t *testing.T, cfg SessionsConfig) {
	leaks := goleak.IgnoreCurrent()
	ctx := ctxFor(t, 60*time.Second)
	st := cfg.Open(t)
	rc := &releaseCounter{Store: st}
	var counted driver.Store = rc
	sr, bySession := st.(driver.SessionReleaser)
	var src *sessionReleaseCounter
	if bySession {
		src = &sessionReleaseCounter{releaseCounter: rc, sr: sr}
		counted = src
	}
	a, err := baton.New(counted, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ttl := 15 * time.Second
	WaitSession(t, ctx, st, ttl)
	p := name(t) + "/"
	mustTry(t, ctx, a, p+"first", nil) // in no session: the client held no other lease
	names := []string{p + "1", p + "2", p + "shared", p + "meta"}
	for _, n := range names {
		o := &baton.LockOptions{Shared: n == p+"shared"}
		if n == p+"meta" {
			o.Meta = cfg.CloseMeta
		}
		mustTry(t, ctx, a, n, o)
	}
	b := newClient(t, cfg.Open(t), nil)
	woken := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, names[0], nil)
		if err == nil {
			err = l.Release(ctx)
		}
		woken <- err
	}()
	waitQueued(t, ctx, b, names[0], 1)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if bySession && (src.sessions.Load() != 1 || rc.keys.Load() != 1) {
		t.Errorf("Close released %d sessions and %d keys one by one; want 1 and 1", src.sessions.Load(), rc.keys.Load())
	}
	select {
	case err := <-woken:
		if err != nil {
			t.Fatalf("the waiter: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was not handed the lock")
	}
	for _, n := range names[1:] {
		release(t, ctx, mustTry(t, ctx, b, n, nil))
	}
	b.Close()
	goleak.VerifyNone(t, leaks)
	if cfg.AfterClose != nil {
		cfg.AfterClose(t, p)
	}
}

func newClient(t testing.TB, st driver.Store, o *baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(st, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// SessionNotRevived checks st's sessions (a store that keeps its own:
// sessions.Store) below the Keeper: a session that expired is never
// renewed again (its holds may have gone to others), nor is one never
// made, and none is made longer than maxGrace, which the grace period
// after a crash covers (0: a store with no grace period, such as SQLite).
func SessionNotRevived(t *testing.T, st sessions.Store, maxGrace time.Duration) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	if ok, err := st.KeepSession(ctx, "s1", 100*time.Millisecond, true); !ok || err != nil {
		t.Fatalf("create: %v, %v", ok, err)
	}
	if ok, err := st.KeepSession(ctx, "s1", 100*time.Millisecond, false); !ok || err != nil {
		t.Fatalf("renew a live session: %v, %v", ok, err)
	}
	time.Sleep(200 * time.Millisecond)
	if ok, err := st.KeepSession(ctx, "s1", time.Minute, false); ok || err != nil {
		t.Errorf("renew an expired session: %v, %v; want false", ok, err)
	}
	if ok, err := st.KeepSession(ctx, "s2", time.Minute, false); ok || err != nil {
		t.Errorf("renew a session never made: %v, %v; want false", ok, err)
	}
	if maxGrace == 0 {
		return
	}
	if ok, err := st.KeepSession(ctx, "s3", maxGrace+time.Second, true); ok || err != nil {
		t.Errorf("create a session longer than the grace period: %v, %v; want false", ok, err)
	}
}
