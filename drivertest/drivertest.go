// Package drivertest is baton's conformance suite. Every store's tests call
// Run with a way to open clients of that store; the suite then checks,
// through baton's portable API and, where a crash must be simulated, through
// the driver directly:
//
//   - exclusive, shared and semaphore locks, FIFO order and writer
//     preference, re-acquire by the same owner, owner groups, status and
//     purge;
//   - mutual exclusion and strictly increasing fencing tokens under
//     contention, with holders that lose their store and are taken over
//     (see History);
//   - expiry of a holder that stops renewing, whose late renew and release
//     change nothing; lost-lease notification before anyone else can be
//     granted; cancellation of a wait; elections; run-under-lock;
//   - bad input and odd names; no goroutine left after Close.
//
// Model and SessionModel are random walks against package lockstate. Each
// logs its seed; DRIVERTEST_SEED=<seed> repeats a walk, and
// DRIVERTEST_MODEL_DEBUG=1 logs its steps.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// Config says how to reach the store under test.
type Config struct {
	// Open returns a new client (its own connection or session) of the
	// store under test. Every call must reach the same backing store, so
	// that locks taken through one client are seen by all others.
	Open func(t testing.TB) driver.Store
	// Slow multiplies the suite's TTLs and waits, for stores whose round
	// trips are slow (default 1).
	Slow float64
	// Contenders is the number of clients in contention tests (default 6).
	Contenders int
	// SessionBound is set for stores whose holds live in a store session
	// (Grant.Session): a crashed holder's hold then vanishes when its
	// session times out, instead of expiring in place. Such stores must
	// implement Crasher and Partitioner.
	SessionBound bool
	// IgnoreGoroutines names functions on the stacks of goroutines the
	// store does not own, which may outlive Close: the idle connections of
	// an HTTP client the caller passed in, say
	// ("net/http.(*persistConn).readLoop").
	IgnoreGoroutines []string
}

type suite struct {
	cfg Config
}

// Run runs the conformance suite.
func Run(t *testing.T, cfg Config) {
	if cfg.Open == nil {
		t.Fatal("drivertest: Config.Open is nil")
	}
	if cfg.Slow <= 0 {
		cfg.Slow = 1
	}
	if cfg.Contenders <= 0 {
		cfg.Contenders = 6
	}
	s := &suite{cfg: cfg}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"TryLockAndRelease", s.tryLockAndRelease},
		{"LockWaitsForRelease", s.lockWaitsForRelease},
		{"WokenByStore", s.wokenByStore},
		{"CancelWhileWaiting", s.cancelWhileWaiting},
		{"FIFO", s.fifo},
		{"Shared", s.shared},
		{"WriterNotStarved", s.writerNotStarved},
		{"Semaphore", s.semaphore},
		{"LimitConflict", s.limitConflict},
		{"ReacquireExtends", s.reacquireExtends},
		{"ModeConflict", s.modeConflict},
		{"KeepAlive", s.keepAlive},
		{"NoKeepAliveExpires", s.noKeepAliveExpires},
		{"MinHold", s.minHold},
		{"LockDelay", s.lockDelay},
		{"WatchHolders", s.watchHolders},
		{"CrashedHolderExpires", s.crashedHolderExpires},
		{"LostLeaseNotified", s.lostLeaseNotified},
		{"ReleaseForms", s.releaseForms},
		{"BatchRelease", s.batchRelease},
		{"OwnerGroup", s.ownerGroup},
		{"StatusFilters", s.statusFilters},
		{"Purge", s.purge},
		{"Do", s.do},
		{"Election", s.election},
		{"Ask", s.ask},
		{"ElectionHandOver", s.handOver},
		{"ContentionExclusive", s.contentionExclusive},
		{"ContentionMixed", s.contentionMixed},
		{"ContentionWithLostHolders", s.contentionLost},
		{"TokensSurviveReopen", s.tokensSurviveReopen},
		{"BadInput", s.badInput},
		{"OddNames", s.oddNames},
		{"NoGoroutineLeak", s.noLeak},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// d scales a duration by Config.Slow.
func (s *suite) d(x time.Duration) time.Duration { return time.Duration(float64(x) * s.cfg.Slow) }

func (s *suite) client(t testing.TB, o *baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(s.cfg.Open(t), o)
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// faulty returns a client whose store can be cut off, and the switch.
func (s *suite) faulty(t testing.TB, o *baton.Options) (*baton.Client, *Faulty) {
	t.Helper()
	f := NewFaulty(s.cfg.Open(t))
	c, err := baton.New(f, o)
	if err != nil {
		t.Fatalf("baton.New: %v", err)
	}
	t.Cleanup(func() { f.SetDown(false); c.Close() })
	return c, f
}

var runID = fmt.Sprintf("%08x", rand.Uint32())

// name returns a lock name no other test (or earlier run) uses.
func name(t testing.TB, suffix ...string) string {
	n := "drivertest/" + runID + "/" + strings.ReplaceAll(t.Name(), "/", ".")
	if len(suffix) > 0 {
		n += "/" + strings.Join(suffix, "/")
	}
	return n
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (s *suite) ctx(t testing.TB) context.Context { return ctxFor(t, s.d(30*time.Second)) }

func mustLock(t testing.TB, ctx context.Context, c *baton.Client, n string, o *baton.LockOptions) *baton.Lease {
	t.Helper()
	l, err := c.Lock(ctx, n, o)
	if err != nil {
		t.Fatalf("Lock(%q): %v", n, err)
	}
	return l
}

func mustTry(t testing.TB, ctx context.Context, c *baton.Client, n string, o *baton.LockOptions) *baton.Lease {
	t.Helper()
	l, err := c.TryLock(ctx, n, o)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", n, err)
	}
	return l
}

func mustBeLocked(t testing.TB, ctx context.Context, c *baton.Client, n string, o *baton.LockOptions) {
	t.Helper()
	l, err := c.TryLock(ctx, n, o)
	if err == nil {
		l.Release(ctx)
		t.Fatalf("TryLock(%q) was granted (token %d), want ErrLocked", n, l.Token())
	}
	if !errors.Is(err, baton.ErrLocked) {
		t.Fatalf("TryLock(%q): %v, want ErrLocked", n, err)
	}
}

func release(t testing.TB, ctx context.Context, l *baton.Lease) {
	t.Helper()
	if err := l.ReleaseStrict(ctx); err != nil {
		t.Fatalf("Release(%q): %v", l.Name(), err)
	}
}

// waitQueued waits until n waiters are queued for name.
func waitQueued(t testing.TB, ctx context.Context, c *baton.Client, name string, n int) {
	t.Helper()
	for {
		hs, err := c.Status(ctx, &baton.Filter{Name: name, Queued: true})
		if err != nil {
			t.Fatalf("Status: %v", err)
		}
		q := 0
		for _, h := range hs {
			if h.Queued {
				q++
			}
		}
		if q >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters queued for %q, want %d", q, name, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

type result struct {
	l   *baton.Lease
	err error
}

func goLock(ctx context.Context, c *baton.Client, n string, o *baton.LockOptions) <-chan result {
	ch := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, n, o)
		ch <- result{l, err}
	}()
	return ch
}

func (s *suite) tryLockAndRelease(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	n := name(t)
	la := mustTry(t, ctx, a, n, nil)
	if la.Token() == 0 {
		t.Errorf("token is 0")
	}
	if la.Name() != n || la.Owner() == "" || la.Mode() != baton.Exclusive || la.Err() != nil {
		t.Errorf("lease: name %q owner %q mode %v err %v", la.Name(), la.Owner(), la.Mode(), la.Err())
	}
	info := la.Info()
	if info.Token != la.Token() || info.Owner != la.Owner() || info.Host == "" || info.Created.IsZero() {
		t.Errorf("Info() = %+v", info)
	}
	mustBeLocked(t, ctx, b, n, nil)
	release(t, ctx, la)
	select {
	case <-la.Done():
	default:
		t.Fatal("Done not closed after Release")
	}
	if !errors.Is(la.Err(), baton.ErrReleased) {
		t.Errorf("Err after Release = %v, want ErrReleased", la.Err())
	}
	lb := mustTry(t, ctx, b, n, nil)
	if lb.Token() <= la.Token() {
		t.Errorf("second token %d not above first %d", lb.Token(), la.Token())
	}
	release(t, ctx, lb)
}

func (s *suite) lockWaitsForRelease(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	n := name(t)
	la := mustLock(t, ctx, a, n, nil)
	ch := goLock(ctx, b, n, nil)
	waitQueued(t, ctx, a, n, 1)
	select {
	case r := <-ch:
		t.Fatalf("Lock returned while held: %v", r.err)
	default:
	}
	release(t, ctx, la)
	r := <-ch
	if r.err != nil {
		t.Fatalf("waiting Lock: %v", r.err)
	}
	if r.l.Token() <= la.Token() {
		t.Errorf("token %d not above %d", r.l.Token(), la.Token())
	}
	release(t, ctx, r.l)
}

// wokenByStore: a store that can wake waiters (a driver.Waiter) must: with
// MaxPoll at 10s, a waiting Lock is granted within a second of the
// release, not at its next poll. (The waiter has waited a while first,
// so that a watch that only polls at first cannot pass for a wake-up.)
func (s *suite) wokenByStore(t *testing.T) {
	if _, ok := s.cfg.Open(t).(driver.Waiter); !ok {
		t.Skip("the store cannot wake waiters: baton polls")
	}
	ctx := s.ctx(t)
	o := &baton.Options{MaxPoll: 10 * time.Second}
	a, b := s.client(t, o), s.client(t, o)
	n := name(t)
	la := mustLock(t, ctx, a, n, nil)
	ch := goLock(ctx, b, n, nil)
	waitQueued(t, ctx, a, n, 1)
	time.Sleep(s.d(500 * time.Millisecond))
	released := time.Now()
	release(t, ctx, la)
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("waiting Lock: %v", r.err)
		}
		release(t, ctx, r.l)
	case <-time.After(s.d(time.Second)):
		t.Fatalf("a waiter with MaxPoll 10s was not granted within %v of the release: the store does not wake it", s.d(time.Second))
	}
	t.Logf("granted %v after the release", time.Since(released).Round(time.Millisecond))
}

func (s *suite) cancelWhileWaiting(t *testing.T) {
	ctx := s.ctx(t)
	a, b, c := s.client(t, nil), s.client(t, nil), s.client(t, nil)
	n := name(t)
	la := mustLock(t, ctx, a, n, nil)
	wctx, cancel := context.WithTimeout(ctx, s.d(300*time.Millisecond))
	defer cancel()
	_, err := b.Lock(wctx, n, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with expiring context: %v, want DeadlineExceeded", err)
	}
	// The cancelled waiter must have left the queue: with FIFO order a
	// stale entry would keep the next TryLock out.
	release(t, ctx, la)
	release(t, ctx, mustTry(t, ctx, c, n, nil))
}

func (s *suite) fifo(t *testing.T) {
	ctx := s.ctx(t)
	a, b, c := s.client(t, nil), s.client(t, nil), s.client(t, nil)
	n := name(t)
	la := mustLock(t, ctx, a, n, nil)
	chB := goLock(ctx, b, n, nil)
	waitQueued(t, ctx, a, n, 1)
	chC := goLock(ctx, c, n, nil)
	waitQueued(t, ctx, a, n, 2)
	mustBeLocked(t, ctx, a, n, nil) // a newcomer does not jump the queue
	release(t, ctx, la)
	rb := <-chB
	if rb.err != nil {
		t.Fatalf("first waiter: %v", rb.err)
	}
	select {
	case rc := <-chC:
		t.Fatalf("second waiter granted while first holds (err %v)", rc.err)
	case <-time.After(s.d(50 * time.Millisecond)):
	}
	release(t, ctx, rb.l)
	rc := <-chC
	if rc.err != nil {
		t.Fatalf("second waiter: %v", rc.err)
	}
	if !(la.Token() < rb.l.Token() && rb.l.Token() < rc.l.Token()) {
		t.Errorf("tokens %d, %d, %d not increasing", la.Token(), rb.l.Token(), rc.l.Token())
	}
	release(t, ctx, rc.l)
}

func (s *suite) shared(t *testing.T) {
	ctx := s.ctx(t)
	a, b, c := s.client(t, nil), s.client(t, nil), s.client(t, nil)
	n := name(t)
	sh := &baton.LockOptions{Shared: true}
	l1 := mustTry(t, ctx, a, n, sh)
	l2 := mustTry(t, ctx, b, n, sh)
	if l1.Mode() != baton.Shared || l2.Token() <= l1.Token() {
		t.Errorf("shared leases: mode %v, tokens %d then %d", l1.Mode(), l1.Token(), l2.Token())
	}
	mustBeLocked(t, ctx, c, n, nil)
	release(t, ctx, l1)
	mustBeLocked(t, ctx, c, n, nil)
	release(t, ctx, l2)
	lx := mustTry(t, ctx, c, n, nil)
	mustBeLocked(t, ctx, a, n, sh)
	release(t, ctx, lx)
}

func (s *suite) writerNotStarved(t *testing.T) {
	ctx := s.ctx(t)
	r1, w, r2 := s.client(t, nil), s.client(t, nil), s.client(t, nil)
	n := name(t)
	sh := &baton.LockOptions{Shared: true}
	l1 := mustTry(t, ctx, r1, n, sh)
	chW := goLock(ctx, w, n, nil)
	waitQueued(t, ctx, r1, n, 1)
	// A queued writer keeps new readers out.
	mustBeLocked(t, ctx, r2, n, sh)
	chR := goLock(ctx, r2, n, sh)
	waitQueued(t, ctx, r1, n, 2)
	release(t, ctx, l1)
	rw := <-chW
	if rw.err != nil {
		t.Fatalf("writer: %v", rw.err)
	}
	select {
	case rr := <-chR:
		t.Fatalf("reader granted while writer holds (err %v)", rr.err)
	case <-time.After(s.d(50 * time.Millisecond)):
	}
	release(t, ctx, rw.l)
	rr := <-chR
	if rr.err != nil {
		t.Fatalf("reader: %v", rr.err)
	}
	release(t, ctx, rr.l)
}

func (s *suite) semaphore(t *testing.T) {
	ctx := s.ctx(t)
	n := name(t)
	sem := &baton.LockOptions{Limit: 3}
	var ls []*baton.Lease
	cs := make([]*baton.Client, 4)
	for i := range cs {
		cs[i] = s.client(t, nil)
	}
	for i := 0; i < 3; i++ {
		l := mustTry(t, ctx, cs[i], n, sem)
		if l.Mode() != baton.Shared || l.Limit() != 3 {
			t.Errorf("semaphore lease: mode %v limit %d", l.Mode(), l.Limit())
		}
		ls = append(ls, l)
	}
	mustBeLocked(t, ctx, cs[3], n, sem)
	mustBeLocked(t, ctx, cs[3], n, nil) // exclusive excluded too
	ch := goLock(ctx, cs[3], n, sem)
	waitQueued(t, ctx, cs[0], n, 1)
	release(t, ctx, ls[1])
	r := <-ch
	if r.err != nil {
		t.Fatalf("fourth slot after a release: %v", r.err)
	}
	for _, l := range []*baton.Lease{ls[0], ls[2], r.l} {
		release(t, ctx, l)
	}
	if _, err := cs[0].TryLock(ctx, n, &baton.LockOptions{Limit: -1}); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("Limit -1: %v, want ErrInvalid", err)
	}
}

// limitConflict: a request whose limit contradicts the shared holders'
// (a plain shared lock or another limit joining a semaphore) is refused
// with ErrLimitConflict at once, by TryLock and by Lock, and leaves
// nothing queued; an exclusive request is refused as usual.
func (s *suite) limitConflict(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	n := name(t)
	sem := &baton.LockOptions{Limit: 2}
	l := mustTry(t, ctx, a, n, sem)
	for _, o := range []*baton.LockOptions{{Shared: true}, {Limit: 1}, {Limit: 3}} {
		if _, err := b.TryLock(ctx, n, o); !errors.Is(err, baton.ErrLimitConflict) {
			t.Errorf("TryLock %+v on a semaphore of 2: %v, want ErrLimitConflict", *o, err)
		}
		lctx, cancel := context.WithTimeout(ctx, s.d(5*time.Second))
		_, err := b.Lock(lctx, n, o)
		cancel()
		if !errors.Is(err, baton.ErrLimitConflict) {
			t.Errorf("Lock %+v on a semaphore of 2: %v, want ErrLimitConflict at once", *o, err)
		}
	}
	if hs, err := a.Status(ctx, &baton.Filter{Name: n, Queued: true}); err != nil || len(hs) != 1 {
		t.Errorf("Status after refused conflicts = %+v, %v; want the one holder", hs, err)
	}
	mustBeLocked(t, ctx, b, n, nil)
	l2 := mustTry(t, ctx, b, n, sem) // the same limit joins
	release(t, ctx, l)
	release(t, ctx, l2)
	// Free again: any limit goes.
	release(t, ctx, mustTry(t, ctx, b, n, &baton.LockOptions{Limit: 3}))
}

func (s *suite) reacquireExtends(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t, nil)
	other := s.client(t, nil)
	n := name(t)
	o := &baton.LockOptions{Owner: baton.NewOwner(), TTL: s.d(2 * time.Second)}
	l1 := mustTry(t, ctx, a, n, o)
	d1 := l1.Deadline()
	time.Sleep(s.d(20 * time.Millisecond))
	o.Meta = map[string]string{"k": "v2"}
	l2 := mustTry(t, ctx, a, n, o)
	if l2.Token() != l1.Token() {
		t.Errorf("re-acquire changed token %d → %d", l1.Token(), l2.Token())
	}
	if !s.cfg.SessionBound && !l2.Deadline().After(d1) {
		t.Errorf("re-acquire did not extend: deadline %v then %v", d1, l2.Deadline())
	}
	// Another client with the same owner extends the same hold too.
	l3 := mustTry(t, ctx, other, n, o)
	if l3.Token() != l1.Token() {
		t.Errorf("re-acquire from another client changed token %d → %d", l1.Token(), l3.Token())
	}
	hs, err := a.Status(ctx, &baton.Filter{Name: n})
	if err != nil || len(hs) != 1 || hs[0].Meta["k"] != "v2" {
		t.Errorf("Status after re-acquire = %+v, %v; want one holder with meta k=v2", hs, err)
	}
	mustBeLocked(t, ctx, other, n, nil)
	release(t, ctx, l2)
}

func (s *suite) modeConflict(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t, nil)
	n := name(t)
	owner := baton.NewOwner()
	l := mustTry(t, ctx, a, n, &baton.LockOptions{Owner: owner})
	if _, err := a.TryLock(ctx, n, &baton.LockOptions{Owner: owner, Shared: true}); !errors.Is(err, baton.ErrModeConflict) {
		t.Errorf("same owner, shared after exclusive: %v, want ErrModeConflict", err)
	}
	release(t, ctx, l)
}

func (s *suite) keepAlive(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	n := name(t)
	ttl := s.d(300 * time.Millisecond)
	l := mustTry(t, ctx, a, n, &baton.LockOptions{TTL: ttl})
	time.Sleep(4 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("lease ended despite keepalive: %v", err)
	}
	mustBeLocked(t, ctx, b, n, nil)
	if err := l.Renew(ctx); err != nil {
		t.Errorf("manual Renew: %v", err)
	}
	release(t, ctx, l)
}

func (s *suite) noKeepAliveExpires(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	n := name(t)
	ttl := s.d(300 * time.Millisecond)
	l := mustTry(t, ctx, a, n, &baton.LockOptions{TTL: ttl, NoKeepAlive: true})
	select {
	case <-l.Done():
	case <-time.After(10 * ttl):
		t.Fatal("Done not closed after TTL without keepalive")
	}
	if !errors.Is(l.Err(), baton.ErrExpired) {
		t.Errorf("Err = %v, want ErrExpired", l.Err())
	}
	// The holder released it when its TTL ran out: it is free at once.
	lb := mustLock(t, ctxFor(t, s.d(5*time.Second)), b, n, nil)
	release(t, ctx, lb)
}

// minHold checks LockOptions.MinHold: a release before it leaves the name
// held until it has passed, even when the holder's client closes (on
// session-bound stores Release waits for it, and Close ends it).
func (s *suite) minHold(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	n := name(t)
	minHold := s.d(400 * time.Millisecond)
	start := time.Now()
	l := mustTry(t, ctx, a, n, &baton.LockOptions{MinHold: minHold})
	release(t, ctx, l)
	if !errors.Is(l.Err(), baton.ErrReleased) {
		t.Errorf("Err after Release = %v, want ErrReleased", l.Err())
	}
	if s.cfg.SessionBound {
		if d := time.Since(start); d < minHold {
			t.Errorf("Release returned %v after the grant, within the minimum hold of %v", d, minHold)
		}
	} else if time.Since(start) < minHold/2 {
		mustBeLocked(t, ctx, b, n, nil)
	}
	lb := mustLock(t, ctx, b, n, nil)
	if d := time.Since(start); d < minHold {
		t.Fatalf("granted again %v after the first grant, within its minimum hold of %v", d, minHold)
	}
	if lb.Token() <= l.Token() {
		t.Errorf("token %d after %d", lb.Token(), l.Token())
	}
	release(t, ctx, lb)

	// A release after the minimum hold releases at once.
	l = mustTry(t, ctx, a, n, &baton.LockOptions{MinHold: s.d(10 * time.Millisecond)})
	time.Sleep(s.d(20 * time.Millisecond))
	release(t, ctx, l)
	release(t, ctx, mustTry(t, ctx, b, n, nil))

	if _, err := a.TryLock(ctx, n, &baton.LockOptions{MinHold: -time.Second}); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("negative MinHold: %v, want ErrInvalid", err)
	}
	if s.cfg.SessionBound {
		return // Close ends the session, and its holds with it
	}
	// The hold stays when its client closes, as when its process exits.
	c := s.client(t, nil)
	start = time.Now()
	mustTry(t, ctx, c, n, &baton.LockOptions{MinHold: minHold})
	c.Close()
	if time.Since(start) < minHold/2 {
		mustBeLocked(t, ctx, b, n, nil)
	}
	lb = mustLock(t, ctx, b, n, nil)
	if d := time.Since(start); d < minHold {
		t.Fatalf("granted again %v after a grant whose client closed, within its minimum hold of %v", d, minHold)
	}
	release(t, ctx, lb)
}

// lockDelay checks LockOptions.LockDelay: a lease lost involuntarily (its
// holder cut off from the store) keeps the name from everyone for the
// delay after its TTL; a release frees it at once. Session-bound stores
// refuse it.
func (s *suite) lockDelay(t *testing.T) {
	ctx := s.ctx(t)
	a, fa := s.faulty(t, nil)
	b := s.client(t, nil)
	n := name(t)
	ttl, delay := s.d(300*time.Millisecond), s.d(400*time.Millisecond)
	o := &baton.LockOptions{TTL: ttl, LockDelay: delay}
	start := time.Now()
	la, err := a.TryLock(ctx, n, o)
	if s.cfg.SessionBound {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("TryLock with a lock-delay on a session-bound store: %v, want ErrUnsupported", err)
		}
		release(t, ctx, mustTry(t, ctx, b, n, nil)) // nothing left behind
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if la.TTL() != ttl {
		t.Errorf("lease TTL %v, want %v (the delay is the store's)", la.TTL(), ttl)
	}
	fa.SetDown(true) // the holder is cut off: it loses its lease
	select {
	case <-la.Done():
	case <-time.After(5 * ttl):
		t.Fatal("Done not closed though the holder could not renew")
	}
	fa.SetDown(false) // back, it must not release: the loss was involuntary
	lb := mustLock(t, ctx, b, n, nil)
	if d := time.Since(start); d < ttl+delay {
		t.Fatalf("granted again %v after a grant that was lost, within its TTL and lock-delay (%v)", d, ttl+delay)
	}
	release(t, ctx, lb)

	// A lease that expires unrenewed is not released either.
	start = time.Now()
	la = mustTry(t, ctx, a, n, &baton.LockOptions{TTL: ttl, LockDelay: delay, NoKeepAlive: true})
	select {
	case <-la.Done():
	case <-time.After(5 * ttl):
		t.Fatal("Done not closed after the TTL without keepalive")
	}
	lb = mustLock(t, ctx, b, n, nil)
	if d := time.Since(start); d < ttl+delay {
		t.Fatalf("granted again %v after a grant that expired, within its TTL and lock-delay (%v)", d, ttl+delay)
	}
	release(t, ctx, lb)

	// A release is voluntary: no delay.
	la = mustTry(t, ctx, a, n, o)
	release(t, ctx, la)
	release(t, ctx, mustTry(t, ctx, b, n, nil))
	if _, err := a.TryLock(ctx, n, &baton.LockOptions{LockDelay: -time.Second}); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("negative LockDelay: %v, want ErrInvalid", err)
	}
}

// watchHolders checks Client.WatchHolders: the holders at once, then
// every grant and release, and a hold that expires unreleased when it
// expires. A store that can tell (a driver.HolderWatcher that does not
// answer errors.ErrUnsupported) must wake it: with a poll of a minute, the
// changes still come within a second or two. Close ends the watch.
func (s *suite) watchHolders(t *testing.T) {
	ctx := s.ctx(t)
	st := s.cfg.Open(t)
	n := name(t)
	notifies := false
	if hw, ok := st.(driver.HolderWatcher); ok {
		w, err := hw.WatchHolders(ctx, n+"/probe")
		switch {
		case err == nil:
			notifies = true
			w.Close()
		case !errors.Is(err, errors.ErrUnsupported):
			t.Fatalf("WatchHolders: %v", err)
		}
	}
	poll := s.d(50 * time.Millisecond)
	if notifies {
		poll = time.Minute
	}
	t.Logf("the store wakes holder watches: %v", notifies)
	a, err := baton.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b := s.client(t, nil)
	hs, err := a.WatchHolders(ctx, n, poll)
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string, want ...*baton.Lease) []baton.LockInfo {
		t.Helper()
		select {
		case h, ok := <-hs:
			if !ok {
				t.Fatalf("%s: the watch ended", what)
			}
			if len(h) != len(want) {
				t.Fatalf("%s: holders %v, want %d", what, h, len(want))
			}
			for i, l := range want {
				if l != nil && (h[i].Owner != l.Owner() || h[i].Token != l.Token()) {
					t.Fatalf("%s: holder %d is %s (token %d), want %s (token %d)", what, i, h[i].Owner, h[i].Token, l.Owner(), l.Token())
				}
			}
			return h
		case <-time.After(s.d(2 * time.Second)):
			t.Fatalf("%s: no holders sent within %v (store notifies: %v)", what, s.d(2*time.Second), notifies)
		}
		return nil
	}
	next("at the start")
	l := mustTry(t, ctx, b, n, nil)
	next("after a grant", l)
	release(t, ctx, l)
	next("after the release")
	r1 := mustTry(t, ctx, b, n, &baton.LockOptions{Shared: true})
	next("after a shared grant", r1)
	r2 := mustTry(t, ctx, a, n, &baton.LockOptions{Shared: true})
	next("after a second shared grant", r1, r2)
	release(t, ctx, r1)
	next("after a shared release", r2)
	release(t, ctx, r2)
	next("after the last release")
	if !s.cfg.SessionBound {
		// A holder that never renews nor releases: its expiry is no write,
		// and is seen when it comes.
		raw := s.cfg.Open(t)
		defer raw.Close()
		ttl := s.d(500 * time.Millisecond)
		sent := time.Now()
		if _, err := raw.Acquire(ctx, &driver.Request{Name: n, Owner: baton.NewOwner(), Mode: driver.Exclusive, TTL: ttl, Host: "crashed"}); err != nil {
			t.Fatalf("driver Acquire: %v", err)
		}
		next("after a crashed holder's grant", nil)
		next("after its expiry")
		// Listings may judge by an upper bound of the store's clock
		// (Elasticsearch's cached one): a little early, never much.
		if d := time.Since(sent); d < ttl-s.d(50*time.Millisecond) {
			t.Errorf("expiry seen %v after the grant, well before its TTL %v", d, ttl)
		}
	}
	a.Close()
	select {
	case _, ok := <-hs:
		if ok {
			t.Error("the watch sent holders after Close")
		}
	case <-time.After(s.d(2 * time.Second)):
		t.Error("Close did not end the watch")
	}
}

// crashedHolderExpires simulates a holder that dies: it takes the lock
// through the driver and never renews or releases it (a session-bound store
// crashes its session instead).
func (s *suite) crashedHolderExpires(t *testing.T) {
	ctx := s.ctx(t)
	raw := s.cfg.Open(t)
	defer raw.Close()
	b := s.client(t, nil)
	n := name(t)
	ttl := s.d(400 * time.Millisecond)
	req := &driver.Request{Name: n, Owner: baton.NewOwner(), Mode: driver.Exclusive, TTL: ttl, Host: "crashed"}
	sent := time.Now()
	g, err := raw.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("driver Acquire: %v", err)
	}
	mustBeLocked(t, ctx, b, n, nil)
	if s.cfg.SessionBound {
		crash(t, raw)
	}
	lb := mustLock(t, ctx, b, n, nil)
	if since := time.Since(sent); !s.cfg.SessionBound && since < ttl {
		t.Fatalf("granted %v after a crashed holder's grant, before its TTL %v ran out", since, ttl)
	}
	if lb.Token() <= g.Token {
		t.Errorf("takeover token %d not above crashed holder's %d", lb.Token(), g.Token)
	}
	if !s.cfg.SessionBound {
		// The crashed holder's late renew and release change nothing.
		gs, err := raw.Renew(ctx, []driver.Hold{{Name: n, Owner: req.Owner, TTL: ttl}})
		if err != nil || len(gs) != 1 || gs[0] != nil {
			t.Errorf("late Renew = %v, %v; want [nil]", gs, err)
		}
		held, err := raw.Release(ctx, []driver.Key{{Name: n, Owner: req.Owner}})
		if err != nil || len(held) != 1 || held[0] {
			t.Errorf("late Release = %v, %v; want [false]", held, err)
		}
	}
	if err := lb.Renew(ctx); err != nil {
		t.Errorf("new holder's Renew after the late calls: %v", err)
	}
	hs, err := b.Status(ctx, &baton.Filter{Name: n})
	if err != nil || len(hs) != 1 || hs[0].Owner != lb.Owner() {
		t.Errorf("Status = %+v, %v; want only the new holder", hs, err)
	}
	release(t, ctx, lb)
}

func crash(t testing.TB, st driver.Store) {
	t.Helper()
	c, ok := st.(Crasher)
	if !ok {
		t.Fatalf("a session-bound store must implement drivertest.Crasher")
	}
	c.Crash()
}

func (s *suite) lostLeaseNotified(t *testing.T) {
	ctx := s.ctx(t)
	var events sync.Map
	a, fa := s.faulty(t, &baton.Options{OnEvent: func(e baton.Event) { events.Store(e.Kind, e) }})
	b := s.client(t, nil)
	n := name(t)
	ttl := s.d(400 * time.Millisecond)
	la := mustTry(t, ctx, a, n, &baton.LockOptions{TTL: ttl})
	fa.SetDown(true)
	select {
	case <-la.Done():
	case <-time.After(3 * ttl):
		t.Fatal("Done not closed though the holder could not renew for its TTL")
	}
	lostAt := time.Now()
	if !errors.Is(la.Err(), baton.ErrLeaseLost) || !errors.Is(context.Cause(la.Context()), baton.ErrLeaseLost) {
		t.Errorf("Err = %v, Context cause = %v; want ErrLeaseLost", la.Err(), context.Cause(la.Context()))
	}
	if _, ok := events.Load(baton.EventLost); !ok {
		t.Errorf("no %q event", baton.EventLost)
	}
	lb := mustLock(t, ctx, b, n, nil)
	if granted := time.Now(); granted.Before(la.Deadline()) {
		t.Errorf("new holder granted at %v, before the old lease's deadline %v", granted, la.Deadline())
	}
	_ = lostAt
	fa.SetDown(false)
	if err := la.ReleaseStrict(ctx); !errors.Is(err, baton.ErrNotHeld) {
		t.Errorf("ReleaseStrict of a lost lease: %v, want ErrNotHeld", err)
	}
	if err := la.Renew(ctx); !errors.Is(err, baton.ErrNotHeld) {
		t.Errorf("Renew of a lost lease: %v, want ErrNotHeld", err)
	}
	if err := lb.Renew(ctx); err != nil {
		t.Errorf("new holder disturbed: %v", err)
	}
	release(t, ctx, lb)
}

func (s *suite) releaseForms(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t, nil)
	n := name(t)
	l := mustTry(t, ctx, a, n, nil)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("second Release: %v, want nil", err)
	}
	if err := l.ReleaseStrict(ctx); !errors.Is(err, baton.ErrNotHeld) {
		t.Errorf("ReleaseStrict after Release: %v, want ErrNotHeld", err)
	}
	// An administrator's release: the holder's next renewal finds it gone.
	l2 := mustTry(t, ctx, a, n, nil)
	admin := s.client(t, nil)
	if err := admin.ForceRelease(ctx, n, l2.Owner()); err != nil {
		t.Fatalf("admin Release: %v", err)
	}
	if err := admin.ForceRelease(ctx, n, l2.Owner()); !errors.Is(err, baton.ErrNotHeld) {
		t.Errorf("second admin Release: %v, want ErrNotHeld", err)
	}
	if err := l2.Renew(ctx); !errors.Is(err, baton.ErrNotHeld) {
		t.Errorf("Renew after admin release: %v, want ErrNotHeld", err)
	}
	if !errors.Is(l2.Err(), baton.ErrLeaseLost) {
		t.Errorf("Err after failed renew: %v, want ErrLeaseLost", l2.Err())
	}
}

// batchRelease checks the release Client.Close makes, through the store's
// driver.QuietReleaser if it has one: one batch of every kind of entry
// (plain and shared holds, a hold with long metadata, a queue entry, an
// expired hold, a key twice, a key of nothing) leaves none of them behind.
func (s *suite) batchRelease(t *testing.T) {
	st := s.cfg.Open(t)
	release := func(ctx context.Context, keys []driver.Key) error {
		if q, ok := st.(driver.QuietReleaser); ok {
			return q.ReleaseQuiet(ctx, keys)
		}
		_, err := st.Release(ctx, keys)
		return err
	}
	ctx := s.ctx(t)
	other := s.cfg.Open(t)
	ttl := s.d(time.Minute)
	acquire := func(st driver.Store, r driver.Request) {
		t.Helper()
		if r.Mode == 0 {
			r.Mode = driver.Exclusive
		}
		if r.TTL == 0 {
			r.TTL = ttl
		}
		if _, err := st.Acquire(ctx, &r); err != nil && !(r.Queue && errors.Is(err, driver.ErrNotGranted)) {
			t.Fatalf("Acquire %+v: %v", r, err)
		}
	}
	var keys []driver.Key
	var names []string
	for i := range 5 {
		n := name(t, "plain", strconv.Itoa(i))
		acquire(st, driver.Request{Name: n, Owner: "q-owner"})
		keys, names = append(keys, driver.Key{Name: n, Owner: "q-owner"}), append(names, n)
	}
	shared := name(t, "shared")
	acquire(st, driver.Request{Name: shared, Owner: "q-owner", Mode: driver.Shared, Limit: 3})
	long := name(t, "meta")
	acquire(st, driver.Request{Name: long, Owner: "q-owner", Meta: map[string]string{"m": strings.Repeat("x", 3000)}})
	queued := name(t, "queued")
	acquire(other, driver.Request{Name: queued, Owner: "q-blocker"})
	acquire(st, driver.Request{Name: queued, Owner: "q-owner", Queue: true, QueueTTL: ttl})
	expired := name(t, "expired")
	acquire(st, driver.Request{Name: expired, Owner: "q-owner", TTL: s.d(50 * time.Millisecond)})
	time.Sleep(s.d(100 * time.Millisecond))
	keys = append(keys,
		driver.Key{Name: shared, Owner: "q-owner"}, driver.Key{Name: long, Owner: "q-owner"},
		driver.Key{Name: queued, Owner: "q-owner"}, driver.Key{Name: expired, Owner: "q-owner"},
		driver.Key{Name: names[0], Owner: "q-owner"}, driver.Key{Name: name(t, "none"), Owner: "q-owner"})
	names = append(names, shared, long, expired)
	if err := release(ctx, keys); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := release(ctx, keys); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if err := release(ctx, nil); err != nil {
		t.Fatalf("release of no keys: %v", err)
	}
	after := []driver.Key{{Name: queued, Owner: "q-blocker"}}
	for _, n := range names {
		if _, err := other.Acquire(ctx, &driver.Request{Name: n, Owner: "q-after", Mode: driver.Exclusive, TTL: ttl}); err != nil {
			t.Errorf("Acquire of %s after the batch's release: %v", n, err)
		}
		after = append(after, driver.Key{Name: n, Owner: "q-after"})
	}
	defer other.Release(ctx, after)
	hs, err := other.List(ctx, &driver.Filter{Owner: "q-owner", Queued: true, Expired: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if strings.HasPrefix(h.Name, name(t)) {
			t.Errorf("left after the batch's release: %s of %s (queued: %v)", h.Name, h.Owner, h.Queued)
		}
	}
}

func (s *suite) ownerGroup(t *testing.T) {
	ctx := s.ctx(t)
	a, other := s.client(t, nil), s.client(t, nil)
	owner := baton.NewOwner()
	ttl := s.d(5 * time.Second)
	names := []string{name(t, "a"), name(t, "b"), name(t, "c")}
	var ls []*baton.Lease
	for i, n := range names {
		ls = append(ls, mustTry(t, ctx, a, n, &baton.LockOptions{Owner: owner, TTL: ttl, Shared: i == 1}))
	}
	unrelated := mustTry(t, ctx, other, name(t, "d"), nil)
	renewed, err := other.RenewOwner(ctx, owner, 2*ttl)
	if err != nil || len(renewed) != 3 {
		t.Fatalf("RenewOwner = %d holds, %v; want 3", len(renewed), err)
	}
	for _, h := range renewed {
		if h.TTL != 2*ttl || h.Owner != owner {
			t.Errorf("renewed hold %+v, want TTL %v", h, 2*ttl)
		}
	}
	released, err := a.ReleaseOwner(ctx, owner)
	if err != nil || len(released) != 3 {
		t.Fatalf("ReleaseOwner = %d holds, %v; want 3", len(released), err)
	}
	for _, l := range ls {
		if !errors.Is(l.Err(), baton.ErrReleased) {
			t.Errorf("lease %q after ReleaseOwner: Err %v, want ErrReleased", l.Name(), l.Err())
		}
	}
	for _, n := range names {
		release(t, ctx, mustTry(t, ctx, other, n, nil))
	}
	if err := unrelated.Renew(ctx); err != nil {
		t.Errorf("another owner's hold was touched: %v", err)
	}
	release(t, ctx, unrelated)
	if got, err := a.ReleaseOwner(ctx, owner); err != nil || len(got) != 0 {
		t.Errorf("ReleaseOwner of an owner with nothing = %v, %v", got, err)
	}
}

func (s *suite) statusFilters(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t, nil)
	prefix := name(t) + "/"
	short, long := s.d(2*time.Second), s.d(60*time.Second)
	owner := baton.NewOwner()
	before := time.Now()
	l1 := mustTry(t, ctx, a, prefix+"one", &baton.LockOptions{TTL: short, Owner: owner, Meta: map[string]string{"job": "x"}})
	l2 := mustTry(t, ctx, a, prefix+"two", &baton.LockOptions{TTL: long, Shared: true})
	l3 := mustTry(t, ctx, a, prefix+"two", &baton.LockOptions{TTL: long, Shared: true})
	defer func() {
		for _, l := range []*baton.Lease{l1, l2, l3} {
			l.Release(ctx)
		}
	}()
	count := func(f *baton.Filter) int {
		t.Helper()
		hs, err := a.Status(ctx, f)
		if err != nil {
			t.Fatalf("Status(%+v): %v", f, err)
		}
		return len(hs)
	}
	check := func(what string, f *baton.Filter, want int) {
		t.Helper()
		if got := count(f); got != want {
			t.Errorf("Status %s: %d holds, want %d", what, got, want)
		}
	}
	check("by prefix", &baton.Filter{Prefix: prefix}, 3)
	check("by name", &baton.Filter{Name: prefix + "two"}, 2)
	check("by owner", &baton.Filter{Prefix: prefix, Owner: owner}, 1)
	check("by unknown owner", &baton.Filter{Prefix: prefix, Owner: "nobody"}, 0)
	if s.cfg.SessionBound {
		// Session holds have no time of their own: never "below", always
		// "at least".
		check("left below", &baton.Filter{Prefix: prefix, LeftBelow: s.d(10 * time.Second)}, 0)
		check("left at least", &baton.Filter{Prefix: prefix, LeftAtLeast: s.d(10 * time.Second)}, 3)
	} else {
		check("left below", &baton.Filter{Prefix: prefix, LeftBelow: s.d(10 * time.Second)}, 1)
		check("left at least", &baton.Filter{Prefix: prefix, LeftAtLeast: s.d(10 * time.Second)}, 2)
	}
	check("created after (a minute ago)", &baton.Filter{Prefix: prefix, CreatedAfter: before.Add(-time.Minute)}, 3)
	check("created before (a minute ago)", &baton.Filter{Prefix: prefix, CreatedBefore: before.Add(-time.Minute)}, 0)
	hs, err := a.Status(ctx, &baton.Filter{Name: prefix + "one"})
	if err != nil || len(hs) != 1 {
		t.Fatalf("Status one: %v %v", hs, err)
	}
	h := hs[0]
	if h.Owner != owner || h.Token != l1.Token() || h.Mode != baton.Exclusive || h.Meta["job"] != "x" ||
		h.Host == "" || h.Queued {
		t.Errorf("Status entry %+v does not describe the hold", h)
	}
	if s.cfg.SessionBound {
		if !h.Expires.IsZero() || h.Left != 0 {
			t.Errorf("session hold listed with Expires %v, Left %v; want zero (it lives as long as its session)", h.Expires, h.Left)
		}
	} else if h.TTL != short || h.Left <= 0 || h.Left > short {
		t.Errorf("Status entry TTL %v, Left %v; want TTL %v and 0 < Left ≤ TTL", h.TTL, h.Left, short)
	}
	if d := h.Created.Sub(before); d < -time.Minute || d > time.Minute {
		t.Errorf("Created %v is %v away from this machine's clock", h.Created, d)
	}
}

func (s *suite) purge(t *testing.T) {
	ctx := s.ctx(t)
	raw := s.cfg.Open(t)
	defer raw.Close()
	a := s.client(t, nil)
	n := name(t)
	ttl := s.d(200 * time.Millisecond)
	g, err := raw.Acquire(ctx, &driver.Request{Name: n, Owner: baton.NewOwner(), Mode: driver.Exclusive, TTL: ttl, Host: "crashed"})
	if err != nil {
		t.Fatalf("driver Acquire: %v", err)
	}
	if s.cfg.SessionBound {
		// The hold vanishes with its session: nothing is left to purge.
		crash(t, raw)
		release(t, ctx, mustLock(t, ctx, a, n, nil))
		if _, err := a.Purge(ctx); err != nil {
			t.Errorf("Purge: %v", err)
		}
		if hs, _ := a.Status(ctx, &baton.Filter{Name: n, Expired: true}); len(hs) != 0 {
			t.Errorf("after the session ended, Status shows %+v", hs)
		}
		return
	}
	time.Sleep(ttl + s.d(100*time.Millisecond))
	if hs, _ := a.Status(ctx, &baton.Filter{Name: n}); len(hs) != 0 {
		t.Errorf("Status shows an expired hold: %+v", hs)
	}
	if hs, _ := a.Status(ctx, &baton.Filter{Name: n, Expired: true}); len(hs) != 1 {
		t.Errorf("Status with Expired shows %d holds, want 1 (the expired one)", len(hs))
	}
	purged, err := a.Purge(ctx)
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	found := false
	for _, h := range purged {
		found = found || h.Name == n
	}
	if !found {
		t.Errorf("Purge did not return the expired hold of %q", n)
	}
	if hs, _ := a.Status(ctx, &baton.Filter{Name: n, Expired: true}); len(hs) != 0 {
		t.Errorf("after Purge, Status shows %+v", hs)
	}
	l := mustTry(t, ctx, a, n, nil)
	if l.Token() <= g.Token {
		t.Errorf("token after purge %d not above %d: the counter must survive purges", l.Token(), g.Token)
	}
	release(t, ctx, l)
}

func (s *suite) do(t *testing.T) {
	ctx := s.ctx(t)
	a, fa := s.faulty(t, nil)
	b := s.client(t, nil)
	n := name(t)
	ran := false
	err := a.Do(ctx, n, nil, func(ctx context.Context, l *baton.Lease) error {
		ran = true
		mustBeLocked(t, ctx, b, n, nil)
		return errors.New("job failed")
	})
	if !ran || err == nil || err.Error() != "job failed" {
		t.Errorf("Do = %v (ran %v), want the function's error", err, ran)
	}
	release(t, ctx, mustTry(t, ctx, b, n, nil)) // Do released it
	// The function's context ends when the lease may be lost.
	ttl := s.d(300 * time.Millisecond)
	err = a.Do(ctx, n, &baton.LockOptions{TTL: ttl}, func(ctx context.Context, l *baton.Lease) error {
		fa.SetDown(true)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * ttl):
			return errors.New("context not cancelled on lease loss")
		}
	})
	fa.SetDown(false)
	if !errors.Is(err, baton.ErrLeaseLost) || !errors.Is(err, context.Canceled) {
		t.Errorf("Do with a lost lease = %v, want ErrLeaseLost and the function's context.Canceled", err)
	}
}

func (s *suite) election(t *testing.T) {
	ctx := s.ctx(t)
	n := name(t)
	ttl := s.d(time.Second)
	var es []*baton.Election
	for i := 0; i < 3; i++ {
		e, err := s.client(t, nil).Election(n, &baton.ElectionOptions{TTL: ttl, Value: fmt.Sprint("candidate-", i)})
		if err != nil {
			t.Fatalf("Election: %v", err)
		}
		es = append(es, e)
	}
	observer, err := s.client(t, nil).Election(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	seen := observer.Observe(octx, s.d(20*time.Millisecond))
	if l := <-seen; l != nil {
		t.Errorf("Observe: first leader %+v, want nil", l)
	}
	type won struct {
		i int
		l *baton.Lease
	}
	wins := make(chan won, 3)
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	for i, e := range es {
		go func() {
			if l, err := e.Campaign(cctx); err == nil {
				wins <- won{i, l}
			}
		}()
	}
	var tokens []uint64
	for round := 0; round < 3; round++ {
		w := <-wins
		leaders := 0
		for _, e := range es {
			if ok, tok := e.IsLeader(); ok {
				leaders++
				if tok != w.l.Token() {
					t.Errorf("IsLeader token %d, lease token %d", tok, w.l.Token())
				}
			}
		}
		if leaders != 1 {
			t.Errorf("round %d: %d candidates lead", round, leaders)
		}
		ld, err := observer.Leader(ctx)
		if err != nil || ld.Token != w.l.Token() || ld.Value != fmt.Sprint("candidate-", w.i) {
			t.Errorf("Leader() = %+v, %v; want candidate-%d with token %d", ld, err, w.i, w.l.Token())
		}
		for l := range seen {
			if l != nil && l.Token == w.l.Token() {
				break
			}
		}
		if round == 0 {
			if err := es[w.i].Proclaim(ctx, "proclaimed"); err != nil {
				t.Errorf("Proclaim: %v", err)
			}
			if ld, _ := observer.Leader(ctx); ld == nil || ld.Value != "proclaimed" || ld.Token != w.l.Token() {
				t.Errorf("after Proclaim, Leader() = %+v", ld)
			}
		}
		tokens = append(tokens, w.l.Token())
		if err := es[w.i].Resign(ctx); err != nil {
			t.Errorf("Resign: %v", err)
		}
		if ok, _ := es[w.i].IsLeader(); ok {
			t.Errorf("still leader after Resign")
		}
		if err := es[w.i].Proclaim(ctx, "x"); !errors.Is(err, baton.ErrNotLeader) {
			t.Errorf("Proclaim after Resign: %v, want ErrNotLeader", err)
		}
	}
	if !(tokens[0] < tokens[1] && tokens[1] < tokens[2]) {
		t.Errorf("leader tokens %v not increasing", tokens)
	}
	if _, err := observer.Leader(ctx); !errors.Is(err, baton.ErrNoLeader) {
		t.Errorf("Leader() with nobody leading: %v, want ErrNoLeader", err)
	}

	// Run: a leader loop hands over when its holder loses the store.
	c1, f1 := s.faulty(t, nil)
	c2 := s.client(t, nil)
	e1, _ := c1.Election(n, &baton.ElectionOptions{TTL: ttl, Value: "run-1"})
	e2, _ := c2.Election(n, &baton.ElectionOptions{TTL: ttl, Value: "run-2"})
	led := make(chan uint64, 4)
	rctx, rcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, e := range []*baton.Election{e1, e2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.Run(rctx, func(ctx context.Context, l *baton.Lease) error {
				led <- l.Token()
				<-ctx.Done()
				return nil
			})
		}()
	}
	first := <-led
	leader := e1
	if ok, _ := e2.IsLeader(); ok {
		leader = e2
	}
	if leader == e1 {
		f1.SetDown(true)
	} else {
		leader.Resign(ctx)
	}
	select {
	case second := <-led:
		if second <= first {
			t.Errorf("new leader's token %d not above %d", second, first)
		}
	case <-time.After(5 * ttl):
		t.Error("leadership did not move")
	}
	f1.SetDown(false)
	rcancel()
	wg.Wait()
}

// contend runs workers that take the lock repeatedly and records their
// critical sections; opts picks each attempt's options.
func (s *suite) contend(t *testing.T, clients, rounds int, opts func(client, round int) *baton.LockOptions,
	lose func(client, round int) bool) *History {
	ctx := s.ctx(t)
	n := name(t)
	h := &History{}
	var wg sync.WaitGroup
	var active atomic.Int32 // exclusive sections now running, seen by the clients
	for i := 0; i < clients; i++ {
		c, f := s.faulty(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				o := opts(i, r)
				call := time.Now()
				l, err := c.Lock(ctx, n, o)
				if err != nil {
					t.Errorf("client %d: Lock: %v", i, err)
					return
				}
				granted := time.Now()
				excl := l.Mode() == baton.Exclusive
				if excl && active.Add(1) != 1 {
					t.Errorf("client %d saw another exclusive section running", i)
				}
				var end time.Time
				if lose != nil && lose(i, r) {
					// The holder loses the store and stops working. Its
					// section ends, for History, at its deadline, when Done
					// fires; the real-time counter cannot wait for that, as
					// a timer may fire late on a loaded machine.
					if excl {
						active.Add(-1)
					}
					f.SetDown(true)
					<-l.Done()
					if end = l.Deadline(); end.IsZero() {
						t.Errorf("client %d: a lost lease has no deadline: a session-bound store must implement driver.SessionDeadline", i)
						end = time.Now()
					}
					f.SetDown(false)
				} else {
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					end = End(l)
					if excl {
						active.Add(-1)
					}
					if err := l.Release(ctx); err != nil {
						t.Errorf("client %d: Release: %v", i, err)
					}
				}
				h.Add(Section{Client: i, Mode: l.Mode(), Limit: l.Limit(), Token: l.Token(), Call: call, Granted: granted, End: end})
			}
		}()
	}
	wg.Wait()
	for _, err := range h.Check() {
		t.Error(err)
	}
	return h
}

func (s *suite) contentionExclusive(t *testing.T) {
	h := s.contend(t, s.cfg.Contenders, 25, func(int, int) *baton.LockOptions { return nil }, nil)
	if want := s.cfg.Contenders * 25; h.Len() != want {
		t.Errorf("%d sections, want %d", h.Len(), want)
	}
}

func (s *suite) contentionMixed(t *testing.T) {
	s.contend(t, s.cfg.Contenders, 20, func(c, r int) *baton.LockOptions {
		switch (c + r) % 3 {
		case 0:
			return nil
		case 1:
			return &baton.LockOptions{Limit: 2}
		}
		return &baton.LockOptions{Limit: 2, Shared: true}
	}, nil)
}

func (s *suite) contentionLost(t *testing.T) {
	ttl := s.d(250 * time.Millisecond)
	s.contend(t, 4, 6, func(int, int) *baton.LockOptions { return &baton.LockOptions{TTL: ttl} },
		func(c, r int) bool { return (c+r)%3 == 0 })
}

func (s *suite) tokensSurviveReopen(t *testing.T) {
	ctx := s.ctx(t)
	n := name(t)
	var last uint64
	for i := 0; i < 3; i++ {
		c, err := baton.New(s.cfg.Open(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		l := mustTry(t, ctx, c, n, nil)
		if l.Token() <= last {
			t.Errorf("token %d after reopening not above %d", l.Token(), last)
		}
		last = l.Token()
		release(t, ctx, l)
		c.Close()
	}
}

func (s *suite) badInput(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t, nil)
	n := name(t)
	for _, tc := range []struct {
		what string
		name string
		o    *baton.LockOptions
	}{
		{"empty name", "", nil},
		{"oversized name", strings.Repeat("x", baton.MaxNameLen+1), nil},
		{"invalid UTF-8", "a\xffb", nil},
		{"NUL in name", "a\x00b", nil},
		{"newline in name", "a\nb", nil},
		{"negative TTL", n, &baton.LockOptions{TTL: -time.Second}},
		{"TTL below minimum", n, &baton.LockOptions{TTL: time.Nanosecond}},
		{"negative limit", n, &baton.LockOptions{Limit: -2}},
		{"owner with a space", n, &baton.LockOptions{Owner: "a b"}},
		{"oversized owner", n, &baton.LockOptions{Owner: strings.Repeat("o", baton.MaxOwnerLen+1)}},
		{"oversized metadata", n, &baton.LockOptions{Meta: map[string]string{"k": strings.Repeat("v", baton.MaxMetaLen)}}},
		{"empty metadata key", n, &baton.LockOptions{Meta: map[string]string{"": "v"}}},
	} {
		for _, try := range []bool{true, false} {
			var err error
			if try {
				_, err = a.TryLock(ctx, tc.name, tc.o)
			} else {
				_, err = a.Lock(ctx, tc.name, tc.o)
			}
			if !errors.Is(err, baton.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", tc.what, err)
			} else if msg := err.Error(); !strings.HasPrefix(msg, "baton: invalid argument: ") || len(msg) > 200 {
				t.Errorf("%s: unclear error %q", tc.what, msg)
			}
		}
	}
	if _, err := a.Election("", nil); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("Election with an empty name: %v", err)
	}
	if _, err := a.RenewOwner(ctx, "", time.Second); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("RenewOwner with an empty owner: %v", err)
	}
	if _, err := a.RenewOwner(ctx, "x", -time.Second); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("RenewOwner with a negative TTL: %v", err)
	}
	if err := a.ForceRelease(ctx, "", "x"); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("ForceRelease with an empty name: %v", err)
	}
	// Nothing was written by the refused calls.
	if hs, err := a.Status(ctx, &baton.Filter{Prefix: n, Queued: true, Expired: true}); err != nil || len(hs) != 0 {
		t.Errorf("Status after refused calls = %+v, %v", hs, err)
	}
}

func (s *suite) oddNames(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t, nil), s.client(t, nil)
	base := name(t) + "/"
	odd := []string{
		"a/b", "../../etc/passwd", "/leading/slash/", "'; DROP TABLE baton_locks; --", `"quoted" \back\`,
		"名前 with spaces", "%2F%00%ZZ", "{braces}}{", "*?[glob]", "$(echo x)`id`", "emoji 🔒",
		"a:b:c", "#frag?q=1&x=y", "..", ".",
	}
	for _, o := range odd {
		n := base + o
		l := mustTry(t, ctx, a, n, nil)
		mustBeLocked(t, ctx, b, n, nil)
		hs, err := b.Status(ctx, &baton.Filter{Name: n})
		if err != nil || len(hs) != 1 || hs[0].Name != n {
			t.Errorf("Status(%q) = %+v, %v", n, hs, err)
		}
		release(t, ctx, l)
	}
	// Similar names do not collide.
	l1 := mustTry(t, ctx, a, base+"x", nil)
	l2 := mustTry(t, ctx, b, base+"X", nil)
	l3 := mustTry(t, ctx, b, base+"x ", nil)
	for _, l := range []*baton.Lease{l1, l2, l3} {
		release(t, ctx, l)
	}
	// The longest name allowed works, and prefix listing stays exact.
	long := base + strings.Repeat("n", baton.MaxNameLen-len(base))
	release(t, ctx, mustTry(t, ctx, a, long, nil))
	hs, err := a.Status(ctx, &baton.Filter{Prefix: base + "a/"})
	if err != nil || len(hs) != 0 {
		t.Errorf("Status(prefix) after releases = %+v, %v", hs, err)
	}
}

func (s *suite) noLeak(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	for _, f := range s.cfg.IgnoreGoroutines {
		opts = append(opts, goleak.IgnoreAnyFunction(f))
	}
	func() {
		ctx := s.ctx(t)
		a, err := baton.New(s.cfg.Open(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := baton.New(s.cfg.Open(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		n := name(t)
		l := mustLock(t, ctx, a, n, &baton.LockOptions{TTL: s.d(time.Second)})
		wctx, cancel := context.WithTimeout(ctx, s.d(100*time.Millisecond))
		b.Lock(wctx, n, nil) // a cancelled wait
		cancel()
		ch := goLock(ctx, b, n, nil)
		release(t, ctx, l)
		r := <-ch
		if r.err != nil {
			t.Fatal(r.err)
		}
		e, _ := a.Election(name(t, "e"), nil)
		e.Campaign(ctx)
		octx, ocancel := context.WithCancel(ctx)
		<-e.Observe(octx, time.Millisecond)
		ocancel()
		// A lease that follows asks and is asked, another that follows
		// them and is released, and an ask left standing.
		r.l.Asked()
		if _, err := a.Ask(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
		<-r.l.Asked()
		la := mustTry(t, ctx, a, name(t, "a"), nil)
		la.Asked()
		release(t, ctx, la)
		// Leave r.l and the election held: Close must release them.
		if err := a.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	goleak.VerifyNone(t, opts...)
}
