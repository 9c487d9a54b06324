package baton_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// fakeSession is a store session whose deadline a test sets.
type fakeSession struct {
	mu       sync.Mutex
	deadline time.Time
	done     chan struct{}
}

func (s *fakeSession) Done() <-chan struct{} { return s.done }
func (s *fakeSession) Err() error            { return errors.New("session ended") }
func (s *fakeSession) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// sessionStore binds the holds a client keeps alive to one session, as
// package records does, and records the requests it sees.
type sessionStore struct {
	*recorder
	s    *fakeSession
	mu   sync.Mutex
	reqs []driver.Request
}

// last returns the last request the store saw.
func (st *sessionStore) last() driver.Request {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.reqs[len(st.reqs)-1]
}

func (st *sessionStore) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	st.mu.Lock()
	st.reqs = append(st.reqs, *req)
	st.mu.Unlock()
	g, err := st.recorder.Acquire(ctx, req)
	if err == nil && req.KeepAlive {
		g.Session = st.s
	}
	return g, err
}

// sessionClient returns a client of TTL ttl on a fake clock, whose store
// binds the holds it keeps alive to one session, live for 3*ttl.
func sessionClient(t *testing.T, ttl time.Duration) (*baton.Client, *sessionStore, *baton.FakeClock) {
	t.Helper()
	k := baton.NewFakeClock()
	st := &sessionStore{recorder: newRecorder(k.Now), s: &fakeSession{deadline: k.Now().Add(3 * ttl), done: make(chan struct{})}}
	c, err := baton.NewWithClock(st, &baton.Options{TTL: ttl}, k)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, st, k
}

// A lease whose hold a store keeps in its session lasts as long as the
// session, past its own TTL, without a renewal of its own; its deadline
// is the later of the two; it ends when the session does. Leases that
// must outlive their TTL in the store (a lock-delay, a minimum hold), that
// the client does not keep alive, or that it holds alone are not offered
// to the session.
func TestLeaseInStoreSession(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	c, st, k := sessionClient(t, ttl)
	// A client that holds one lock at a time keeps it alive on its own.
	first, err := c.TryLock(ctx, "first", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.last().KeepAlive {
		t.Error("a client's only lease is offered to a session")
	}
	defer first.Release(ctx)
	l, err := c.TryLock(ctx, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !st.last().KeepAlive {
		t.Error("a lease taken while the client holds another is not offered to a session")
	}
	if !l.Deadline().Equal(st.s.Deadline()) {
		t.Errorf("Deadline %v, want the session's %v", l.Deadline(), st.s.Deadline())
	}
	k.Advance(2 * ttl)
	if err := l.Err(); err != nil {
		t.Fatalf("past its own TTL, within its session's: %v", err)
	}
	st.recorder.mu.Lock()
	if n := len(st.recorder.renewed["s"]); n != 0 {
		t.Errorf("%d renewals of a lease the session keeps, want none", n)
	}
	st.recorder.mu.Unlock()
	// A re-acquire moves the deadline of its own TTL past the session's.
	if _, err := c.TryLock(ctx, "s", &baton.LockOptions{Owner: l.Owner(), TTL: 2 * ttl}); err != nil {
		t.Fatal(err)
	}
	if own := k.Now().Add(2 * ttl).Add(-driver.Margin(2 * ttl)); !l.Deadline().Equal(own) {
		t.Errorf("Deadline after a re-acquire %v, want its own %v", l.Deadline(), own)
	}
	k.Advance(3 * ttl)
	if !errors.Is(l.Err(), baton.ErrLeaseLost) {
		t.Errorf("past both deadlines: Err = %v, want ErrLeaseLost", l.Err())
	}

	l2, err := c.TryLock(ctx, "s2", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Health judges a lease in a session by what the session has left,
	// once its own TTL ran out.
	st.s.mu.Lock()
	st.s.deadline = k.Now().Add(3 * ttl)
	st.s.mu.Unlock()
	k.Advance(ttl)
	st.s.mu.Lock()
	st.s.deadline = k.Now().Add(ttl / 10)
	st.s.mu.Unlock()
	if err := c.Health(1.0 / 3); err == nil {
		t.Error("Health: nil with a tenth of the TTL left in the session")
	}
	st.s.mu.Lock()
	st.s.deadline = k.Now().Add(ttl)
	st.s.mu.Unlock()
	if err := c.Health(1.0 / 3); err != nil {
		t.Errorf("Health with the session's TTL left: %v", err)
	}
	close(st.s.done)
	select {
	case <-l2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session ended, the lease did not")
	}
	if !errors.Is(l2.Err(), baton.ErrLeaseLost) {
		t.Errorf("Err = %v, want ErrLeaseLost", l2.Err())
	}

	for _, o := range []*baton.LockOptions{{NoKeepAlive: true}, {LockDelay: time.Second}, {MinHold: time.Second}} {
		if _, err := c.TryLock(ctx, "o", o); err != nil {
			t.Fatal(err)
		}
		req := st.last()
		if req.KeepAlive {
			t.Errorf("%+v: the request offers the hold to a session", o)
		}
		if _, err := c.ReleaseOwner(ctx, req.Owner); err != nil {
			t.Fatal(err)
		}
	}
}

// Leases kept alive in a session set no timer each: the session's end
// ends them. A client holding many locks is then not woken once per batch
// of grants a TTL after it, only to find each lease still held.
func TestLeasesInSessionSetNoTimers(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Minute
	c, st, k := sessionClient(t, ttl)
	if _, err := c.TryLock(ctx, "first", nil); err != nil { // held alone: no session
		t.Fatal(err)
	}
	k.Settle()
	before := k.Pending()
	var ls []*baton.Lease
	for i := range 100 {
		l, err := c.TryLock(ctx, fmt.Sprint("s", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		k.Advance(ttl / 100) // each lease's deadline apart from the others'
	}
	if n := k.Pending() - before; n > 0 {
		t.Errorf("100 leases in a session set %d timers, want none", n)
	}
	k.Advance(ttl / 2) // past the first ones' own TTL, within the session's
	for _, l := range ls {
		if err := l.Err(); err != nil {
			t.Fatalf("%s: %v", l.Name(), err)
		}
	}
	close(st.s.done)
	for _, l := range ls {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the session ended, the lease did not", l.Name())
		}
	}
}
