package redis_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonredis "github.com/baton-go/baton/redis"
)

// startPair starts a master and a replica of it, of the test's own, and
// returns once the replica is in sync.
func startPair(t testing.TB) (master, replica string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	master = startServer(t, "--repl-diskless-sync-delay", "0")
	replica = startServer(t, "--replicaof", strings.Replace(master, ":", " ", 1))
	r := rawClient(t, replica)
	drivertest.Eventually(t, 30*time.Second, "the replica to sync", func() bool {
		info, _ := r.Info(ctx, "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	return master, replica
}

func storeOn(t testing.TB, addr string) *batonredis.Store {
	t.Helper()
	s, err := batonredis.Open(context.Background(), "redis://"+addr+"/0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// What the package documentation says of failovers, shown: a replica
// promoted with every write of the master keeps holds and counters; one
// promoted while behind forgets them, and grants the lock again at once,
// but with a larger token than the lost grant's (its clock has moved on).
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	ctx := ctxFor(t, 30*time.Second)
	master, replica := startPair(t)
	r := rawClient(t, replica)
	m := storeOn(t, master)
	req := func(name, owner string) *driver.Request {
		return &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute}
	}
	// Replicated before the failover: the replica has the hold.
	kept, err := m.Acquire(ctx, req("kept", "a"))
	if err != nil {
		t.Fatal(err)
	}
	for r.Exists(ctx, m.StateKey("kept")).Val() == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the hold did not reach the replica")
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The replica is cut off (promoted) before the next grants reach it.
	if err := r.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	lost, err := m.Acquire(ctx, req("lost", "b"))
	if err != nil {
		t.Fatal(err)
	}

	p := storeOn(t, replica)
	if _, err := p.Acquire(ctx, req("kept", "c")); !errors.Is(err, driver.ErrNotGranted) {
		t.Errorf("after the failover, the replicated hold was forgotten: %v", err)
	}
	g, err := p.Acquire(ctx, req("lost", "d"))
	if err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	if g.Token <= lost.Token {
		t.Errorf("token after losing a grant: %d, not above the lost grant's %d", g.Token, lost.Token)
	}
	t.Logf("a grant lost in the failover: owner b had token %d on the old master, owner d got %d from the new one, while b may still think it holds the lock", lost.Token, g.Token)
	if v, err := r.Get(ctx, p.CounterKey("kept")).Int64(); err != nil || uint64(v) != kept.Token {
		t.Errorf("replicated counter = %d, %v; want %d", v, err, kept.Token)
	}
	p.Release(ctx, []driver.Key{{Name: "kept", Owner: "a"}, {Name: "lost", Owner: "d"}})
}

// The EVALSHA calls fall back to EVAL when the server's script cache was
// flushed, the one behind a waiter's BLPOP included.
func TestScriptCacheFlushed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	ctx := ctxFor(t, 30*time.Second)
	addr := startServer(t)
	opts := &baton.Options{MaxPoll: time.Hour, TTL: time.Minute}
	a, err := baton.New(storeOn(t, addr), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := baton.New(storeOn(t, addr), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	flush := func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	la, err := a.Lock(ctx, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	flush()
	ch := make(chan error, 1)
	go func() {
		lb, err := b.Lock(ctx, "n", nil)
		if err == nil {
			err = lb.Release(ctx)
		}
		ch <- err
	}()
	time.Sleep(100 * time.Millisecond) // b waits, its attempt queued behind BLPOP
	flush()
	if err := la.Renew(ctx); err != nil {
		t.Errorf("Renew after a flush: %v", err)
	}
	flush()
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-ch; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	flush()
	if hs, err := a.Status(ctx, &baton.Filter{Queued: true}); err != nil || len(hs) != 0 {
		t.Errorf("Status = %+v, %v", hs, err)
	}
}

// The conformance suite through a Ring of two servers: batches are split
// per name, List and Purge scan every shard.
func TestRing(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	addrs := map[string]string{"a": startServer(t), "b": startServer(t)}
	drivertest.Run(t, drivertest.Config{
		Open: func(t testing.TB) driver.Store {
			rdb := redis.NewRing(&redis.RingOptions{Addrs: addrs, ContextTimeoutEnabled: true})
			s := ownedStore{mustNew(t, rdb, &batonredis.Options{Prefix: prefix}), rdb}
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}
