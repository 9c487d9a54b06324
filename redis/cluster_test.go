package redis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// freePort returns a port on 127.0.0.1 that is free, and whose cluster bus
// port (+10000) is free too.
func freePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p+10000 > 65535 {
			continue
		}
		if l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p+10000)); err == nil {
			l2.Close()
			return p
		}
	}
	t.Fatal("no free port pair")
	return 0
}

// startServer starts a redis-server of the test's own on a free port, with
// extra arguments, and stops it (by its pid) when the test ends.
func startServer(t testing.TB, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found (run `scripts/servers up redis`): %v", err)
	}
	port := freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if rdb.Ping(context.Background()).Err() == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startCluster starts a three-master Redis Cluster of the test's own.
func startCluster(t testing.TB) []string {
	t.Helper()
	addrs := make([]string, 3)
	for i := range addrs {
		addrs[i] = startServer(t, "--cluster-enabled", "yes", "--cluster-node-timeout", "5000")
	}
	ctx := ctxFor(t, 30*time.Second)
	nodes := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		nodes[i] = redis.NewClient(&redis.Options{Addr: a})
		defer nodes[i].Close()
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, n := range nodes {
		if err := n.ClusterAddSlotsRange(ctx, ranges[i][0], ranges[i][1]).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	}
	for _, a := range addrs[1:] {
		host, port, _ := strings.Cut(a, ":")
		if err := nodes[0].ClusterMeet(ctx, host, port).Err(); err != nil {
			t.Fatalf("CLUSTER MEET: %v", err)
		}
	}
	for {
		ok := 0
		for _, n := range nodes {
			if info, _ := n.ClusterInfo(ctx).Result(); strings.Contains(info, "cluster_state:ok") {
				ok++
			}
		}
		if ok == len(nodes) {
			return addrs
		}
		select {
		case <-ctx.Done():
			t.Fatal("the cluster did not come up")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ownedStore closes its caller-owned go-redis client with the store.
type ownedStore struct {
	*batonredis.Store
	rdb redis.UniversalClient
}

// mustNew is batonredis.New, failing t on an error.
func mustNew(t testing.TB, rdb redis.UniversalClient, o *batonredis.Options) *batonredis.Store {
	t.Helper()
	s, err := batonredis.New(rdb, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s ownedStore) Close() error {
	err := s.Store.Close()
	return errors.Join(err, s.rdb.Close())
}

// The conformance suite through a ClusterClient: names spread over three
// masters, batches split per slot and pipelined, List and Purge scan every
// master, and scripts write mailboxes they did not declare.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	addrs := startCluster(t)
	newStore := func(t testing.TB) ownedStore {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		s := ownedStore{mustNew(t, rdb, &batonredis.Options{Prefix: prefix}), rdb}
		t.Cleanup(func() { s.Close() })
		return s
	}
	t.Run("Conformance", func(t *testing.T) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return newStore(t) },
		})
	})
	t.Run("Batches", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		s := newStore(t)
		var keys []driver.Key
		slots := map[int]bool{}
		for i := range 30 {
			n := fmt.Sprint("cluster-batch/", i)
			if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "o", Mode: driver.Exclusive, TTL: 10 * time.Second}); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, driver.Key{Name: n, Owner: "o"})
			slots[batonredis.Slot(s.StateKey(n))] = true
		}
		if len(slots) < 10 {
			t.Fatalf("30 names in %d slots", len(slots))
		}
		// A flushed script cache makes the pipelined EVALSHAs fail: they are
		// sent again with EVAL.
		for _, a := range addrs {
			n := redis.NewClient(&redis.Options{Addr: a})
			n.ScriptFlush(ctx)
			n.Close()
		}
		hs := make([]driver.Hold, len(keys))
		for i, k := range keys {
			hs[i] = driver.Hold{Name: k.Name, Owner: k.Owner, TTL: 20 * time.Second}
		}
		gs, err := s.Renew(ctx, hs)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range gs {
			if g == nil || g.Expires.Sub(g.Renewed) != 20*time.Second {
				t.Errorf("renew %d: %+v", i, g)
			}
		}
		listed, err := s.List(ctx, &driver.Filter{Prefix: "cluster-batch/"})
		if err != nil || len(listed) != len(keys) {
			t.Errorf("List = %d holders, %v; want %d", len(listed), err, len(keys))
		}
		held, err := s.Release(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range held {
			if !h {
				t.Errorf("release %d: not held", i)
			}
		}
	})
	t.Run("Wake", func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		a, err := baton.New(newStore(t), &baton.Options{MaxPoll: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := baton.New(newStore(t), &baton.Options{MaxPoll: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		for i := range 5 {
			n := fmt.Sprint("cluster-wake/", i)
			la, err := a.Lock(ctx, n, &baton.LockOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			ch := make(chan error, 1)
			go func() {
				lb, err := b.Lock(ctx, n, &baton.LockOptions{TTL: time.Minute})
				if err == nil {
					err = lb.Release(ctx)
				}
				ch <- err
			}()
			time.Sleep(20 * time.Millisecond)
			la.Release(ctx)
			if err := <-ch; err != nil {
				t.Fatalf("waiter: %v", err)
			}
		}
	})
}
