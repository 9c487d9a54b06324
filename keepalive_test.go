package baton_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mem"
)

// recorder is a mem store that records its Renew and Release calls.
type recorder struct {
	*mem.Store
	now      func() time.Time // the client's clock
	mu       sync.Mutex
	renews   []int                  // holds per Renew call
	releases []int                  // keys per Release call
	renewed  map[string][]time.Time // per name, when each renewal was sent
}

func newRecorder(now func() time.Time) *recorder {
	return &recorder{Store: mem.New(), now: now, renewed: map[string][]time.Time{}}
}

func (r *recorder) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	now := r.now()
	r.mu.Lock()
	r.renews = append(r.renews, len(hs))
	for _, h := range hs {
		r.renewed[h.Name] = append(r.renewed[h.Name], now)
	}
	r.mu.Unlock()
	return r.Store.Renew(ctx, hs)
}

func (r *recorder) Release(ctx context.Context, ks []driver.Key) ([]bool, error) {
	r.mu.Lock()
	r.releases = append(r.releases, len(ks))
	r.mu.Unlock()
	return r.Store.Release(ctx, ks)
}

// calls returns the sizes of the Renew and the Release calls so far.
func (r *recorder) calls() (renews, releases []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.renews...), append([]int(nil), r.releases...)
}

// A process that keeps taking locks renews them in a few large rounds, not
// in a call per lock taken, and each lease every third of its TTL (after its
// first renewal) rather than every sixth.
func TestKeepaliveRenewsInRounds(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Hour
	k := baton.NewFakeClock()
	r := newRecorder(k.Now)
	c, err := baton.NewWithClock(r, &baton.Options{TTL: ttl}, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 2000 leases, 10 every 12s: taken over 40min, two thirds of the TTL.
	start := k.Now()
	var ls []*baton.Lease
	for g := range 200 {
		for i := range 10 {
			l, err := c.TryLock(ctx, fmt.Sprintf("l%d-%d", g, i), nil)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		k.Advance(ttl / 300)
	}
	hold := 4 * ttl / 3
	k.Advance(start.Add(hold).Sub(k.Now())) // hold them a while
	for _, l := range ls {
		if err := l.Err(); err != nil {
			t.Fatalf("lease %s ended: %v", l.Name(), err)
		}
	}
	renews, _ := r.calls()
	// Renew times fall on a grid of ttl/6: at most one round per step,
	// each of at most 2000 leases, so at most two calls.
	if most := 2 * (int(hold/(ttl/6)) + 1); len(renews) > most {
		t.Errorf("%d Renew calls in %v (sizes %v), want at most %d", len(renews), hold, renews, most)
	}
	t.Logf("Renew calls: %v", renews)
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, at := range r.renewed {
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < ttl/4 {
				t.Fatalf("lease %s renewed %v after its previous renewal, want about ttl/3 (%v)", name, gap, ttl/3)
			}
		}
	}
}

// No Renew call carries more than a thousand holds, nor does the Release of
// Close: a round over more leases makes several calls.
func TestBatchesAtMostAThousand(t *testing.T) {
	ctx := context.Background()
	const n, ttl = 2500, time.Minute
	k := baton.NewFakeClock()
	r := newRecorder(k.Now)
	c, err := baton.NewWithClock(r, &baton.Options{TTL: ttl}, k)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := c.TryLock(ctx, "b"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	k.Advance(ttl / 3) // every lease's first renew time
	r.mu.Lock()
	got := len(r.renewed)
	r.mu.Unlock()
	if got != n {
		t.Fatalf("%d of %d leases renewed within TTL/3", got, n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	renews, releases := r.calls()
	for _, k := range renews {
		if k > 1000 {
			t.Errorf("a Renew call of %d holds (calls: %v), want at most 1000", k, renews)
			break
		}
	}
	sum := 0
	for _, k := range releases {
		sum += k
		if k > 1000 {
			t.Errorf("Close made a Release call of %d keys (calls: %v), want at most 1000", k, releases)
			break
		}
	}
	if sum != n {
		t.Errorf("Close released %d keys (calls: %v), want %d", sum, releases, n)
	}
}

// A lease whose TTL shrinks (taken again by its owner with a shorter one, or
// renewed by RenewOwner) is renewed in time for the new TTL, although its
// next renewal was due much later.
func TestShorterTTLIsKeptAlive(t *testing.T) {
	ctx := context.Background()
	const short = 30 * time.Second
	for _, how := range []string{"Lock", "RenewOwner"} {
		t.Run(how, func(t *testing.T) {
			k := baton.NewFakeClock()
			c, err := baton.NewWithClock(mem.New(), nil, k)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := &baton.LockOptions{Owner: baton.NewOwner(), TTL: time.Hour}
			l, err := c.Lock(ctx, "x", o)
			if err != nil {
				t.Fatal(err)
			}
			k.Settle() // keepalive sleeps until the lease's renew time, 20min
			if how == "Lock" {
				o.TTL = short
				if _, err := c.Lock(ctx, "x", o); err != nil {
					t.Fatal(err)
				}
			} else if _, err := c.RenewOwner(ctx, o.Owner, short); err != nil {
				t.Fatal(err)
			}
			if got := l.TTL(); got != short {
				t.Fatalf("TTL %v after the change, want %v", got, short)
			}
			k.Advance(4 * short)
			if err := l.Err(); err != nil {
				t.Errorf("lease with a shortened TTL ended: %v", err)
			}
		})
	}
}

// The keepalive goroutine exits once the last lease it keeps alive ends,
// without waiting for that lease's renew time, and starts again with the
// next lease.
func TestKeepaliveStopsWithItsLastLease(t *testing.T) {
	ctx := context.Background()
	opts := goleak.IgnoreCurrent()
	k := baton.NewFakeClock()
	c, err := baton.NewWithClock(mem.New(), nil, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ls []*baton.Lease
	for i := range 3 {
		l, err := c.Lock(ctx, "s"+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	k.Settle() // keepalive sleeps until the leases' renew time, 5s
	for _, l := range ls {
		l.Release(ctx)
	}
	goleak.VerifyNone(t, opts)

	l, err := c.Lock(ctx, "again", &baton.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k.Advance(3 * time.Minute)
	if err := l.Err(); err != nil {
		t.Errorf("lease taken after keepalive stopped: %v", err)
	}
	c.Close()
	goleak.VerifyNone(t, opts)
}

// A lease of an hour, on a fake clock: keepalive renews it every third of
// its TTL; once the store stops answering, it retries every second, and the
// lease ends exactly at its deadline (an hour, less the 1% margin, after the
// last renewal that got through), not a microsecond sooner or later.
func TestHourLeaseEndsExactlyAtItsDeadline(t *testing.T) {
	ctx := context.Background()
	const ttl = time.Hour
	k := baton.NewFakeClock()
	r := newRecorder(k.Now)
	f := drivertest.NewFaulty(r)
	var ev events
	c, err := baton.NewWithClock(f, &baton.Options{TTL: ttl, OnEvent: ev.add}, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := k.Now()
	l, err := c.Lock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	k.Advance(ttl)
	r.mu.Lock()
	renewed := r.renewed["x"]
	r.mu.Unlock()
	want := []time.Time{start.Add(ttl / 3), start.Add(2 * ttl / 3), start.Add(ttl)}
	if fmt.Sprint(renewed) != fmt.Sprint(want) {
		t.Fatalf("renewed at %v, want %v", renewed, want)
	}
	for _, e := range ev.of(baton.EventRenewed) {
		if e.Left != ttl-ttl/100-ttl/3 {
			t.Errorf("renewed with %v left, want %v", e.Left, ttl-ttl/100-ttl/3)
		}
	}

	f.SetDown(true)
	deadline := start.Add(ttl + ttl - ttl/100)
	if got := l.Deadline(); !got.Equal(deadline) {
		t.Fatalf("deadline %v, want %v", got, deadline)
	}
	k.Advance(deadline.Sub(k.Now()) - time.Microsecond)
	select {
	case <-l.Done():
		t.Fatalf("lease ended a microsecond before its deadline: %v", l.Err())
	default:
	}
	if err := l.Err(); err != nil {
		t.Fatalf("Err a microsecond before the deadline: %v", err)
	}
	k.Advance(time.Microsecond)
	select {
	case <-l.Done():
	default:
		t.Fatal("lease still held at its deadline")
	}
	if !errors.Is(l.Err(), baton.ErrLeaseLost) {
		t.Errorf("lease ended with %v, want ErrLeaseLost", l.Err())
	}
	// Failed renewals from the renew time after the last success until the
	// deadline, one a second.
	firstFail := start.Add(ttl + ttl/3)
	if n, want := len(ev.of(baton.EventRenewFailed)), int(deadline.Sub(firstFail)/time.Second); n != want {
		t.Errorf("%d failed renewals, want %d", n, want)
	}
	if lost := ev.of(baton.EventLost); len(lost) != 1 || lost[0].Held != deadline.Sub(start) {
		t.Errorf("lost events %+v, want one, held %v", lost, deadline.Sub(start))
	}
}

// BenchmarkHoldMany takes b.N locks in one client and holds them: the cost
// per lock must not grow with the locks held (run with -benchtime 20000x,
// then 100000x). close-ms is the time Close takes to release them all.
func BenchmarkHoldMany(b *testing.B) {
	ctx := context.Background()
	c, err := baton.New(mem.New(), &baton.Options{TTL: 15 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := c.TryLock(ctx, "hold-"+strconv.Itoa(i), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	start := time.Now()
	if err := c.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(time.Since(start))/float64(time.Millisecond), "close-ms")
}

// Between renewals nothing runs for keepalive: a timer waits for the first
// renew time, and a goroutine renews only when it fires.
func TestKeepaliveIdleBetweenRenewals(t *testing.T) {
	ctx := context.Background()
	opts := goleak.IgnoreCurrent()
	k := baton.NewFakeClock()
	r := newRecorder(k.Now)
	c, err := baton.NewWithClock(r, nil, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "idle", &baton.LockOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	k.Settle()
	goleak.VerifyNone(t, opts)
	k.Advance(3 * time.Minute)
	if err := l.Err(); err != nil {
		t.Fatalf("lease ended: %v", err)
	}
	if renews, _ := r.calls(); len(renews) < 8 {
		t.Errorf("%d renewals in 3 minutes of a 1-minute lease, want at least 8", len(renews))
	}
	goleak.VerifyNone(t, opts)
}

// releaseChecker is a mem store whose Release checks that each key's lease
// has ended in the client before the store lets it go.
type releaseChecker struct {
	*mem.Store
	mu       sync.Mutex
	leases   map[string]*baton.Lease
	released int
	early    []string
}

func (r *releaseChecker) Release(ctx context.Context, ks []driver.Key) ([]bool, error) {
	r.mu.Lock()
	for _, k := range ks {
		r.released++
		if l := r.leases[k.Name]; l != nil && l.Err() == nil {
			r.early = append(r.early, k.Name)
		}
	}
	r.mu.Unlock()
	return r.Store.Release(ctx, ks)
}

// Close tells each holder its lease ended before the lock is released in
// the store, though it releases many leases in several calls at once.
func TestCloseEndsLeasesBeforeReleasing(t *testing.T) {
	ctx := context.Background()
	const n = 4500
	r := &releaseChecker{Store: mem.New(), leases: map[string]*baton.Lease{}}
	c, err := baton.New(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		name := "c" + strconv.Itoa(i)
		l, err := c.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.mu.Lock()
		r.leases[name] = l
		r.mu.Unlock()
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if r.released != n || len(r.early) > 0 {
		t.Errorf("Close released %d of %d keys; %d while their lease was live here (%.5q)", r.released, n, len(r.early), r.early)
	}
}

// slowReleases is a store whose Release calls take delay each, and fail
// from the failAt-th on (0: never).
type slowReleases struct {
	*mem.Store
	delay  time.Duration
	failAt int
	mu     sync.Mutex
	calls  int
}

func (s *slowReleases) Release(ctx context.Context, ks []driver.Key) ([]bool, error) {
	s.mu.Lock()
	s.calls++
	n := s.calls
	s.mu.Unlock()
	if s.failAt > 0 && n >= s.failAt {
		return nil, errors.New("store down")
	}
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.Release(ctx, ks)
}

// Close releases every hold even when that takes longer than one call's
// bound in all (a store with many holds, such as SQLite with 100,000);
// after a call that fails, it sends no more.
func TestCloseReleasesAllOfASlowStore(t *testing.T) {
	ctx := context.Background()
	const n = 16000 // 16 calls, 4 at a time: 4 rounds of 300ms, past the 1s bound of each
	for _, failAt := range []int{0, 2} {
		st := &slowReleases{Store: mem.New(), delay: 300 * time.Millisecond, failAt: failAt}
		c, err := baton.New(st, &baton.Options{TTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := c.TryLock(ctx, "c"+strconv.Itoa(i), &baton.LockOptions{TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		c.Close()
		hs, err := st.Store.List(ctx, &driver.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case failAt == 0 && len(hs) != 0:
			t.Errorf("Close left %d of %d holds in a slow store", len(hs), n)
		case failAt > 0 && st.calls > failAt+closeCallsForTest:
			t.Errorf("Close sent %d release calls to a store that failed the call %d", st.calls, failAt)
		}
	}
}

// quietStore counts the keys released through each form of release.
type quietStore struct {
	*mem.Store
	loud, quiet atomic.Int64
}

func (s *quietStore) Release(ctx context.Context, ks []driver.Key) ([]bool, error) {
	s.loud.Add(int64(len(ks)))
	return s.Store.Release(ctx, ks)
}

func (s *quietStore) ReleaseQuiet(ctx context.Context, ks []driver.Key) error {
	s.quiet.Add(int64(len(ks)))
	_, err := s.Store.Release(ctx, ks)
	return err
}

// Close, which reports nothing of what it released, releases through a
// store's quiet release when it has one; a lease's own Release does not.
func TestCloseReleasesQuietly(t *testing.T) {
	ctx := context.Background()
	st := &quietStore{Store: mem.New()}
	c, err := baton.New(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "own", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ReleaseStrict(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 2500
	for i := range n {
		if _, err := c.TryLock(ctx, "q"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if quiet, loud := st.quiet.Load(), st.loud.Load(); quiet != n || loud != 1 {
		t.Errorf("keys released quietly %d, with a report %d; want %d and 1", quiet, loud, n)
	}
	if hs, err := st.Store.List(ctx, &driver.Filter{}); err != nil || len(hs) != 0 {
		t.Errorf("left after Close: %d holds, %v", len(hs), err)
	}
}

// closeCallsForTest is Client's closeCalls: the calls that may be in
// flight when one fails.
const closeCallsForTest = 4

// Leases with one deadline share one timer: 2,000 leases taken at one
// instant, and renewed in two calls, keep a handful of timers pending, not
// one per lease.
func TestDeadlineTimersPerCall(t *testing.T) {
	ctx := context.Background()
	k := baton.NewFakeClock()
	c, err := baton.NewWithClock(mem.New(), &baton.Options{TTL: time.Minute}, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var ls []*baton.Lease
	for i := range 2000 {
		l, err := c.TryLock(ctx, "t"+strconv.Itoa(i), nil)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	k.Settle()
	if n := k.Pending(); n > 3 {
		t.Errorf("%d timers pending for 2000 leases taken at once, want at most 3", n)
	}
	before := ls[0].Deadline()
	k.Advance(time.Minute / 3)
	k.Settle()
	for _, l := range ls {
		if !l.Deadline().After(before) {
			t.Fatalf("%s not renewed", l.Name())
		}
	}
	if n := k.Pending(); n > 3 {
		t.Errorf("%d timers pending after a round of renewals, want at most 3", n)
	}
}

// blockingRelease is a mem store whose Release waits for unblock.
type blockingRelease struct {
	*mem.Store
	unblock chan struct{}
	mu      sync.Mutex
	calls   [][]driver.Key
}

func (s *blockingRelease) Release(ctx context.Context, ks []driver.Key) ([]bool, error) {
	s.mu.Lock()
	s.calls = append(s.calls, ks)
	s.mu.Unlock()
	<-s.unblock
	return s.Store.Release(ctx, ks)
}

// Leases that expire together all end at their deadline, before the store
// is asked to release their holds, in one call: a store that is slow to
// answer (it often is, when leases are lost) delays no lease's end.
func TestExpiryEndsAllThenReleases(t *testing.T) {
	ctx := context.Background()
	k := baton.NewFakeClock()
	s := &blockingRelease{Store: mem.New(), unblock: make(chan struct{})}
	c, err := baton.NewWithClock(s, nil, k)
	if err != nil {
		t.Fatal(err)
	}
	var ls []*baton.Lease
	for i := range 3 {
		l, err := c.TryLock(ctx, "x"+strconv.Itoa(i), &baton.LockOptions{TTL: time.Minute, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	advanced := make(chan struct{})
	go func() {
		defer close(advanced)
		k.Advance(time.Minute)
	}()
	for _, l := range ls {
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not end at its deadline while the store's Release blocked", l.Name())
		}
		if !errors.Is(l.Err(), baton.ErrExpired) {
			t.Errorf("%s: %v, want ErrExpired", l.Name(), l.Err())
		}
	}
	close(s.unblock)
	<-advanced
	s.mu.Lock()
	calls := s.calls
	s.mu.Unlock()
	if len(calls) != 1 || len(calls[0]) != 3 {
		t.Errorf("Release calls %v, want one of the 3 holds", calls)
	}
	c.Close()
}

// A lease taken within a thousandth of the TTL after another shares its
// timer, and its deadline moves back to the other's: it ends that little
// earlier, never later. One taken later has a timer of its own.
func TestBurstSharesDeadline(t *testing.T) {
	ctx := context.Background()
	k := baton.NewFakeClock()
	c, err := baton.NewWithClock(mem.New(), nil, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	o := &baton.LockOptions{TTL: time.Minute, NoKeepAlive: true} // a thousandth: 60ms
	a, err := c.TryLock(ctx, "a", o)
	if err != nil {
		t.Fatal(err)
	}
	k.Advance(50 * time.Millisecond)
	b, err := c.TryLock(ctx, "b", o)
	if err != nil {
		t.Fatal(err)
	}
	k.Advance(20 * time.Millisecond)
	d, err := c.TryLock(ctx, "d", o)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Deadline().Equal(a.Deadline()) {
		t.Errorf("b's deadline %v, want a's %v", b.Deadline().Sub(a.Deadline()), 0)
	}
	if got := d.Deadline().Sub(a.Deadline()); got != 70*time.Millisecond {
		t.Errorf("d's deadline is %v after a's, want 70ms", got)
	}
	if n := k.Pending(); n != 2 {
		t.Errorf("%d timers pending, want 2", n)
	}
	k.Advance(a.Deadline().Sub(k.Now()))
	if !errors.Is(a.Err(), baton.ErrExpired) || !errors.Is(b.Err(), baton.ErrExpired) || d.Err() != nil {
		t.Errorf("at a's deadline: a %v, b %v, d %v; want a and b expired, d held", a.Err(), b.Err(), d.Err())
	}
	select {
	case <-b.Done():
	default:
		t.Error("b's Done not closed at its deadline")
	}
}
