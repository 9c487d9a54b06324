package baton_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/mem"
)

// recorder is a mem store that records its Renew and Release calls.
type recorder struct {
	*mem.Store
	mu       sync.Mutex
	renews   []int                  // holds per Renew call
	releases []int                  // keys per Release call
	renewed  map[string][]time.Time // per name, when each renewal was sent
}

func newRecorder() *recorder { return &recorder{Store: mem.New(), renewed: map[string][]time.Time{}} }

func (r *recorder) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	now := time.Now()
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
	const ttl = 2400 * time.Millisecond
	r := newRecorder()
	c, err := baton.New(r, &baton.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// 2000 leases, 10 every 8ms: taken over 1.6s, two thirds of the TTL.
	start := time.Now()
	var ls []*baton.Lease
	for g := range 200 {
		for i := range 10 {
			l, err := c.TryLock(ctx, fmt.Sprintf("l%d-%d", g, i), nil)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		time.Sleep(8 * time.Millisecond)
	}
	hold := 4 * ttl / 3
	time.Sleep(time.Until(start.Add(hold))) // hold them a while
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
	const n, ttl = 2500, 1200 * time.Millisecond
	r := newRecorder()
	c, err := baton.New(r, &baton.Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := c.TryLock(ctx, "b"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.renewed)
		r.mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d leases renewed within 5s", got, n)
		}
		time.Sleep(20 * time.Millisecond)
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
	const short = 300 * time.Millisecond
	for _, how := range []string{"Lock", "RenewOwner"} {
		t.Run(how, func(t *testing.T) {
			c, err := baton.New(mem.New(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := &baton.LockOptions{Owner: baton.NewOwner(), TTL: 30 * time.Second}
			l, err := c.Lock(ctx, "x", o)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // keepalive sleeps until the lease's renew time, 10s
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
			time.Sleep(4 * short)
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
	c, err := baton.New(mem.New(), nil)
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
	time.Sleep(50 * time.Millisecond) // keepalive sleeps until the leases' renew time, 5s
	for _, l := range ls {
		l.Release(ctx)
	}
	goleak.VerifyNone(t, opts)

	l, err := c.Lock(ctx, "again", &baton.LockOptions{TTL: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond)
	if err := l.Err(); err != nil {
		t.Errorf("lease taken after keepalive stopped: %v", err)
	}
	c.Close()
	goleak.VerifyNone(t, opts)
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
