package redis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonredis "github.com/baton-go/baton/redis"
)

func uniqueName(what string) string { return fmt.Sprint(what, "-", time.Now().UnixNano()) }

func queued(name, owner string, mode driver.Mode, limit int) *driver.Request {
	return &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: 30 * time.Second,
		Queue: true, QueueTTL: 30 * time.Second}
}

// mustQueue makes req wait in the queue.
func mustQueue(t *testing.T, ctx context.Context, s *batonredis.Store, req *driver.Request) {
	t.Helper()
	if _, err := s.Acquire(ctx, req); !errors.Is(err, driver.ErrNotGranted) {
		t.Fatalf("Acquire(%s): %v, want ErrNotGranted", req.Owner, err)
	}
}

// tokens reports which owners have a wake-up in their mailbox.
func tokens(t *testing.T, ctx context.Context, s *batonredis.Store, name string, owners ...string) []string {
	t.Helper()
	var got []string
	for _, o := range owners {
		if n, err := s.Client().LLen(ctx, s.Mailbox(name, o)).Result(); err != nil {
			t.Fatal(err)
		} else if n > 0 {
			got = append(got, o)
		}
	}
	return got
}

// Only the waiters that may now be granted are woken: the exclusive head,
// or the run of shared waiters at the head that fit their limits.
func TestWakeOnlyGrantable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, nil)
		n := uniqueName("wake")
		if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "x", Mode: driver.Exclusive, TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		// Behind the exclusive holder: three shared requests for a
		// semaphore of 2 (the third does not fit), an exclusive one, and
		// a shared one behind it.
		for _, r := range []*driver.Request{
			queued(n, "s1", driver.Shared, 2), queued(n, "s2", driver.Shared, 2), queued(n, "s3", driver.Shared, 2),
			queued(n, "e4", driver.Exclusive, 0), queued(n, "s5", driver.Shared, 2),
		} {
			mustQueue(t, ctx, s, r)
		}
		all := []string{"s1", "s2", "s3", "e4", "s5"}
		if got := tokens(t, ctx, s, n, all...); len(got) != 0 {
			t.Fatalf("woken before any release: %v", got)
		}
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "x"}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		if got, want := tokens(t, ctx, s, n, all...), []string{"s1", "s2"}; !slices.Equal(got, want) {
			t.Errorf("woken after the release: %v, want %v", got, want)
		}
		// The woken waiters are granted; the others stay queued.
		for _, o := range []string{"s1", "s2"} {
			if _, err := s.Acquire(ctx, queued(n, o, driver.Shared, 2)); err != nil {
				t.Errorf("woken %s: %v", o, err)
			}
		}
		mustQueue(t, ctx, s, queued(n, "s3", driver.Shared, 2))
		s.Client().Del(ctx, s.Mailbox(n, "s1"), s.Mailbox(n, "s2"))
		// The exclusive waiter leaves: s5 still waits behind s3, which
		// does not fit; a holder leaves: s3 is handed the slot, s5 not.
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "e4"}}); err != nil || held[0] {
			t.Fatalf("Release of a queue entry = %v, %v", held, err)
		}
		if got := tokens(t, ctx, s, n, all...); len(got) != 0 {
			t.Errorf("woken after the exclusive waiter left: %v, want none", got)
		}
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "s1"}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		if got, want := tokens(t, ctx, s, n, all...), []string{"s3"}; !slices.Equal(got, want) {
			t.Errorf("woken after a holder left: %v, want %v", got, want)
		}
		// A request for another limit is refused, not queued.
		if _, err := s.Acquire(ctx, queued(n, "s6", driver.Shared, 3)); !errors.Is(err, driver.ErrLimitConflict) {
			t.Errorf("a request for a semaphore of 3: %v, want ErrLimitConflict", err)
		}
		s.Release(ctx, []driver.Key{{Name: n, Owner: "s2"}, {Name: n, Owner: "s3"}, {Name: n, Owner: "s5"}, {Name: n, Owner: "s6"}})
	})
}

// A wake-up that comes between an attempt and the next Wait is not lost,
// and a Wait that ends on its deadline leaves its BLPOP to the next one.
func TestWaitKeepsWakeups(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, nil)
		n := uniqueName("keep")
		holder := &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 30 * time.Second}
		if _, err := s.Acquire(ctx, holder); err != nil {
			t.Fatal(err)
		}
		w := queued(n, "w", driver.Exclusive, 0)
		mustQueue(t, ctx, s, w)
		watch, err := s.Watch(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		defer watch.Close()
		wait := func(d time.Duration) error {
			wctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return watch.Wait(wctx)
		}
		// Nothing happens: the wait ends with its context.
		if err := wait(100 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait with nothing to wake it: %v", err)
		}
		// The release comes while nobody is in Wait.
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		if err := wait(10 * time.Second); err != nil {
			t.Fatalf("Wait after a release: %v", err)
		}
		g, err := s.Acquire(ctx, w)
		if err != nil {
			t.Fatalf("Acquire after the wake-up: %v", err)
		}
		if g.Extended {
			t.Errorf("grant %+v is marked extended", g)
		}
		hs, err := s.List(ctx, &driver.Filter{Name: n})
		if err != nil || len(hs) != 1 || hs[0].Owner != "w" || hs[0].Token != g.Token {
			t.Fatalf("List = %+v, %v; want w holding token %d", hs, err, g.Token)
		}
		s.Release(ctx, []driver.Key{{Name: n, Owner: "w"}})
	})
}

// A waiter whose Lock ended (it gave up) is taken out of the queue when its
// watch closes, and the attempt sent with its BLPOP changes nothing.
func TestClosedWatchChangesNothing(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, nil)
		n := uniqueName("closed")
		if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		w := queued(n, "w", driver.Exclusive, 0)
		mustQueue(t, ctx, s, w)
		watch, err := s.Watch(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		watch.Wait(wctx) // leaves its BLPOP blocked
		cancel()
		watch.Close()
		for deadline := time.Now().Add(5 * time.Second); ; {
			hs, err := s.List(ctx, &driver.Filter{Name: n, Queued: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) == 1 && hs[0].Owner == "h" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the watch closed: %+v, want only the holder", hs)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.Release(ctx, []driver.Key{{Name: n, Owner: "h"}})
		time.Sleep(50 * time.Millisecond)
		if hs, _ := s.List(ctx, &driver.Filter{Name: n, Queued: true}); len(hs) != 0 {
			t.Errorf("after the release: %+v, want nothing", hs)
		}
	})
}

// With the fallback poll an hour away, waiting Locks are woken by the
// releases alone; and more waiters than MaxWaiters all get their turn.
func TestWokenByStore(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		n := uniqueName("woken")
		u := serverURL(t)
		s, err := batonredis.Open(ctx, u+"?read_timeout=1s", &batonredis.Options{Prefix: prefix, MaxWaiters: 1})
		if err != nil {
			t.Fatal(err)
		}
		c, err := baton.New(s, &baton.Options{MaxPoll: time.Hour, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		first, err := c.Lock(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan int, 3)
		for i := range 3 {
			go func() {
				l, err := c.Lock(ctx, n, nil)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					got <- -1
					return
				}
				time.Sleep(10 * time.Millisecond)
				l.Release(ctx)
				got <- i
			}()
		}
		time.Sleep(100 * time.Millisecond)
		first.Release(ctx)
		for range 3 {
			<-got
		}
	})
}

// A store over a client the caller owns stops its goroutines on Close,
// BLPOPs included, and leaves the client open.
func TestNewCloseUnblocks(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		opts := goleak.IgnoreCurrent()
		o, err := redis.ParseURL(serverURL(t))
		if err != nil {
			t.Fatal(err)
		}
		rdb := redis.NewClient(o)
		ctx := ctxFor(t, 30*time.Second)
		s := mustNew(t, rdb, &batonredis.Options{Prefix: prefix})
		n := uniqueName("close")
		if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		w := queued(n, "w", driver.Exclusive, 0)
		mustQueue(t, ctx, s, w)
		watch, _ := s.Watch(ctx, w)
		done := make(chan error, 1)
		go func() { done <- watch.Wait(ctx) }()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err == nil {
			t.Errorf("Wait returned nil after Close")
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Close took %v", d)
		}
		if _, err := s.Acquire(ctx, w); !errors.Is(err, batonredis.ErrClosed) {
			t.Errorf("Acquire after Close: %v, want ErrClosed", err)
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Errorf("the caller's client was closed: %v", err)
		}
		s2 := mustNew(t, rdb, &batonredis.Options{Prefix: prefix})
		s2.Release(ctx, []driver.Key{{Name: n, Owner: "h"}, {Name: n, Owner: "w"}})
		s2.Close()
		rdb.Close()
		goleak.VerifyNone(t, opts)
	})
}
