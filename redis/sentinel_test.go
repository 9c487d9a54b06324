package redis_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonredis "github.com/baton-go/baton/redis"
)

// startSentinel starts a master, a replica of it and one Sentinel watching
// them as "locks" (quorum 1), all of the test's own, and returns the
// Sentinel's address and the two servers'.
func startSentinel(t *testing.T) (sentinel, master, replica string) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	master, replica = startPair(t)
	// Sentinel rewrites its configuration file, so it gets one of its own.
	port := freePort(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	host, mport, _ := strings.Cut(master, ":")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
dir %s
logfile %s
sentinel monitor locks %s %s 1
sentinel down-after-milliseconds locks 1000
sentinel failover-timeout locks 10000
`, port, dir, filepath.Join(dir, "sentinel.log"), host, mport)), 0o644); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (run `scripts/servers up redis`): %v", err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	sentinel = fmt.Sprintf("127.0.0.1:%d", port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	t.Cleanup(func() { sc.Close() })
	drivertest.Eventually(t, 30*time.Second, "Sentinel to see the replica", func() bool {
		rs, err := sc.Replicas(ctx, "locks").Result()
		return err == nil && len(rs) == 1
	})
	return sentinel, master, replica
}

// rawClient is a plain client of addr, closed when the test ends.
func rawClient(t testing.TB, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

// The conformance suite through a Sentinel-backed FailoverClient, then a
// failover Sentinel carries out while a lock is held and another client
// waits for it: the replica was in sync, so the new master has the hold,
// its queue and the counter; the holder renews and releases it there, the
// waiter is handed the lock, and tokens keep growing. (A replica promoted
// while behind loses what it had not received: TestFailover shows that.)
func TestSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	sentinel, master, replica := startSentinel(t)
	newStore := func(t testing.TB) ownedStore {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "locks", SentinelAddrs: []string{sentinel},
			ContextTimeoutEnabled: true})
		s := ownedStore{mustNew(t, rdb, &batonredis.Options{Prefix: prefix}), rdb}
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("Conformance", func(t *testing.T) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return newStore(t) },
			// go-redis's FailoverClient watches Sentinel in a goroutine
			// that ends only once its subscription's channel closes, after
			// Close has returned; so do the subscription's reader and
			// health check (the store itself subscribes to nothing).
			IgnoreGoroutines: []string{
				"github.com/redis/go-redis/v9.(*sentinelFailover).listen",
				"github.com/redis/go-redis/v9.(*channel).initMsgChan.func1",
				"github.com/redis/go-redis/v9.(*channel).initHealthCheck.func1",
			},
		})
	})
	t.Run("Failover", func(t *testing.T) {
		ctx := ctxFor(t, 60*time.Second)
		holder, err := baton.New(newStore(t), &baton.Options{TTL: 20 * time.Second, MaxPoll: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close()
		waiter, err := baton.New(newStore(t), &baton.Options{TTL: 20 * time.Second, MaxPoll: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer waiter.Close()
		name := fmt.Sprint("sentinel-", time.Now().UnixNano())
		l, err := holder.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *baton.Lease, 1)
		go func() {
			w, err := waiter.Lock(ctx, name, nil)
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			got <- w
		}()
		time.Sleep(200 * time.Millisecond) // the waiter queues
		// Every write so far reached the replica, before Sentinel promotes it.
		mc, rc := rawClient(t, master), rawClient(t, replica)
		drivertest.Eventually(t, 30*time.Second, "the replica to catch up", func() bool {
			m, _ := mc.Info(ctx, "replication").Result()
			r, _ := rc.Info(ctx, "replication").Result()
			return offset(m, "master_repl_offset") > 0 && offset(m, "master_repl_offset") == offset(r, "slave_repl_offset")
		})
		sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
		defer sc.Close()
		if err := sc.Failover(ctx, "locks").Err(); err != nil {
			t.Fatalf("SENTINEL FAILOVER: %v", err)
		}
		drivertest.Eventually(t, 30*time.Second, "the replica to become master", func() bool {
			a, err := sc.GetMasterAddrByName(ctx, "locks").Result()
			return err == nil && a[0]+":"+a[1] == replica
		})
		// The holder's lease was not lost, and renews on the new master.
		drivertest.Eventually(t, 30*time.Second, "a renewal on the new master", func() bool { return l.Renew(ctx) == nil })
		if err := l.Err(); err != nil {
			t.Fatalf("lease after the failover: %v", err)
		}
		select {
		case <-got:
			t.Fatal("the waiter was granted while the lock was held")
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		w := <-got
		if w == nil {
			t.FailNow()
		}
		if w.Token() <= l.Token() {
			t.Errorf("waiter's token %d after the holder's %d", w.Token(), l.Token())
		}
		w.Release(ctx)
	})
}

// offset reads a replication offset from INFO replication.
func offset(info, field string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	return -1
}
