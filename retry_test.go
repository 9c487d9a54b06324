package baton_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/mem"
)

// flaky fails its first n Acquire calls, after doing them (as when the
// reply is lost), and counts Renew calls.
type flaky struct {
	*mem.Store
	fails  atomic.Int32
	owners []string
	renews atomic.Int32
	down   atomic.Bool
}

var errFlaky = errors.New("connection reset")

func (f *flaky) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	f.owners = append(f.owners, req.Owner)
	g, err := f.Store.Acquire(ctx, req)
	if f.fails.Add(-1) >= 0 {
		return nil, errFlaky
	}
	return g, err
}

func (f *flaky) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	f.renews.Add(1)
	if f.down.Load() {
		return nil, errFlaky
	}
	return f.Store.Renew(ctx, hs)
}

func TestLockRetriesStoreErrorsWithTheSameOwner(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: mem.New()}
	f.fails.Store(2)
	k := baton.NewFakeClock()
	c, _ := baton.NewWithClock(f, nil, k)
	defer c.Close()
	type result struct {
		l   *baton.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, "x", nil)
		got <- result{l, err}
	}()
	for range 2 { // each failed call, then a backoff
		k.BlockUntil(1)
		k.AdvanceToNext()
	}
	res := <-got
	l, err := res.l, res.err
	if err != nil {
		t.Fatalf("Lock after two failed calls: %v", err)
	}
	if len(f.owners) != 3 || f.owners[0] != f.owners[2] || l.Owner() != f.owners[0] {
		t.Errorf("retries used owners %v, lease owner %s: want one owner throughout", f.owners, l.Owner())
	}
	l.Release(ctx)

	f2 := &flaky{Store: mem.New()}
	f2.fails.Store(1)
	c2, _ := baton.New(f2, &baton.Options{Retries: -1})
	defer c2.Close()
	if _, err := c2.TryLock(ctx, "x", nil); !errors.Is(err, errFlaky) {
		t.Errorf("TryLock with retries off: %v, want the store's error", err)
	}
	// The failed attempt's grant was undone: the lock is free.
	if _, err := c2.TryLock(ctx, "x", nil); err != nil {
		t.Errorf("TryLock after an undone attempt: %v", err)
	}
}

func TestKeepaliveBacksOffAfterFailures(t *testing.T) {
	ctx := context.Background()
	f := &flaky{Store: mem.New()}
	k := baton.NewFakeClock()
	c, _ := baton.NewWithClock(f, nil, k)
	defer c.Close()
	ttl := 500 * time.Millisecond
	l, err := c.Lock(ctx, "x", &baton.LockOptions{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	f.down.Store(true)
	k.Advance(ttl)
	select {
	case <-l.Done():
	default:
		t.Fatal("lease still held a TTL after renewals began to fail")
	}
	// Renewals start at TTL/3 and retry every TTL/10 until the deadline:
	// about 7 calls, not a spin.
	if n := f.renews.Load(); n > 20 {
		t.Errorf("%d renewals before the lease ended: keepalive spins on failure", n)
	}
}

// A contended Lock on a store whose watch replays what it missed makes two
// attempts: the refused one and the granted one, with no extra attempt
// right after the watch starts.
func TestContendedLockSkipsAttemptWhenWatchReplays(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := &flaky{Store: mem.New()}
	k := baton.NewFakeClock()
	c, _ := baton.NewWithClock(f, nil, k)
	defer c.Close()
	holder, err := c.Lock(ctx, "replay", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.owners = nil
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, "replay", nil)
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	k.BlockUntil(3) // the waiter waits: its wait's timer, the holder's deadline and keepalive
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := len(f.owners); n != 2 {
		t.Errorf("contended Lock made %d attempts, want 2", n)
	}
}

// slowFirst answers its first Acquire only after the lease it grants has
// run out, as when the answer is held up in the network.
type slowFirst struct {
	*mem.Store
	calls atomic.Int32
	delay time.Duration
	clock *baton.FakeClock
}

func (s *slowFirst) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	g, err := s.Store.Acquire(ctx, req)
	if s.calls.Add(1) == 1 {
		s.clock.Advance(s.delay)
	}
	return g, err
}

// A grant whose answer arrives after its TTL ran out is no grant: another
// may hold the name by then. Lock asks again instead of returning a lease
// that ended before its holder saw it.
func TestLockRefusesGrantThatArrivesAfterItsTTL(t *testing.T) {
	ctx := context.Background()
	ttl := 100 * time.Millisecond
	k := baton.NewFakeClock()
	s := &slowFirst{Store: mem.New(), delay: 2 * ttl, clock: k}
	c, _ := baton.NewWithClock(s, nil, k)
	defer c.Close()
	type result struct {
		l   *baton.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Lock(ctx, "x", &baton.LockOptions{TTL: ttl, NoKeepAlive: true})
		got <- result{l, err}
	}()
	k.BlockUntil(1) // the backoff after the late answer
	k.AdvanceToNext()
	res := <-got
	l, err := res.l, res.err
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer l.Release(ctx)
	if err := l.Err(); err != nil {
		t.Fatalf("Lock returned a lease that had already ended: %v", err)
	}
	if n := s.calls.Load(); n != 2 {
		t.Errorf("%d Acquire calls, want 2 (the late one and a fresh one)", n)
	}

	// With retries off, the late grant is an error, and undone.
	k2 := baton.NewFakeClock()
	s2 := &slowFirst{Store: mem.New(), delay: 2 * ttl, clock: k2}
	c2, _ := baton.NewWithClock(s2, &baton.Options{Retries: -1}, k2)
	defer c2.Close()
	if _, err := c2.TryLock(ctx, "x", &baton.LockOptions{TTL: ttl}); !errors.Is(err, baton.ErrLeaseLost) {
		t.Errorf("TryLock with a late answer and retries off: %v, want ErrLeaseLost", err)
	}
}

// closedStore answers every Acquire as a store closed under the client.
type closedStore struct {
	*mem.Store
	calls atomic.Int32
}

func (s *closedStore) Acquire(context.Context, *driver.Request) (*driver.Grant, error) {
	s.calls.Add(1)
	return nil, fmt.Errorf("somestore: %w", driver.ErrClosed)
}

// A store that says it is closed is not asked again.
func TestLockDoesNotRetryAClosedStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &closedStore{Store: mem.New()}
	c, _ := baton.New(s, nil)
	defer c.Close()
	if _, err := c.Lock(ctx, "x", nil); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Lock on a closed store: %v, want driver.ErrClosed", err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("%d Acquire calls to a closed store, want 1", n)
	}
}
