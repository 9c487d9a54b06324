package faultcheck_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/faultcheck"
)

// TestZooKeeperAdopt replays what a soak found (README: "What the harness
// found"): a waiting Lock whose client judged its session lost, while the
// server restarted and so kept that session alive a while longer, must not
// adopt its queue node of the old session: when the server expires that
// session, the node goes and the next waiter is granted, while the adopter
// would still think it holds. It runs its own ZooKeeper (port 22191,
// /tmp/baton-zkadopt).
func TestZooKeeperAdopt(t *testing.T) {
	ctx := context.Background()
	script := os.Getenv("BATON_SERVERS")
	if script == "" {
		t.Fatal("BATON_SERVERS is not set: run scripts/test")
	}
	st, _ := faultcheck.StoreNamed("zookeeper38")
	st.Port = 22191
	dir := "/tmp/baton-zkadopt"
	if err := faultcheck.Servers(ctx, script, dir, st, "up", st.Server); err != nil {
		t.Fatal(err)
	}
	direct := fmt.Sprintf("127.0.0.1:%d", st.Port)
	proxy, err := faultcheck.NewProxy(direct)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	url := func(addr, timeout string) string { return "zk://" + addr + "/zkadopt?session_timeout=" + timeout }
	name := fmt.Sprintf("x-%d", time.Now().UnixNano())

	// B holds the lock, on a session that outlives a server restart.
	b, err := baton.Open(ctx, url(direct, "20s"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lb, err := b.Lock(ctx, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A waits for it, behind its proxy, on a 3s session.
	a, err := baton.Open(ctx, url(proxy.Addr(), "3s"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	got := make(chan *baton.Lease, 1)
	go func() {
		l, err := a.Lock(ctx, name, nil)
		if err != nil {
			t.Log("A: lock:", err)
		}
		got <- l
	}()
	time.Sleep(time.Second)

	// A is cut off long enough to judge its session lost, while the
	// server restarts (and so restarts the timers of the sessions it keeps).
	cut := time.Now()
	proxy.SetMode(faultcheck.Blackhole)
	if err := faultcheck.Servers(ctx, script, dir, st, "restart", st.Server); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	time.Sleep(max(0, 4*time.Second-time.Since(cut)))
	proxy.SetMode(faultcheck.Pass)
	t.Logf("A cut off for %v; server back %v ago\n", time.Since(cut).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	if err := lb.Release(ctx); err != nil {
		t.Log("B: release:", err)
	}
	var la *baton.Lease
	select {
	case la = <-got:
	case <-time.After(20 * time.Second):
		t.Fatalf("a was not granted the lock")
	}
	if la == nil {
		t.Fatalf("lock of a failed: not reproduced")
	}
	t.Logf("A granted token %d; its lease's deadline: %v (zero: none)\n", la.Token(), la.Deadline())
	// A's network is now merely slow: its lease must still end before
	// anyone else is granted, judged on its own clock.
	proxy.SetLatency(time.Second)

	// C tries until it gets the lock; A should have been told first.
	c, err := baton.Open(ctx, url(direct, "20s"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lc, err := c.TryLock(ctx, name, nil)
		if err != nil {
			continue
		}
		aErr := la.Err()
		t.Logf("C granted token %d; A's lease: Err %v\n", lc.Token(), aErr)
		lc.Release(ctx)
		if aErr == nil {
			t.Fatalf("BUG: two holders of %q at once (A token %d, C token %d)", name, la.Token(), lc.Token())
		}
		t.Log("not reproduced: A knew its lease was gone")
		return
	}
	t.Fatal("C was never granted the lock")
}
