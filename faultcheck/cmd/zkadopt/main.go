// Command zkadopt reproduces a ZooKeeper store bug that faultcheck found
// (reports/zookeeper.md): a Lock whose client lost its session while it
// waited re-acquires ("adopts") its own queue node of the lost session,
// which the server still keeps; when the server expires that session the
// node goes and another client is granted the lock, while the first
// client's lease still reports itself held (Err nil, Done open).
//
//	BATON_SERVERS=$PWD/scripts/servers go run ./faultcheck/cmd/zkadopt
//
// It runs its own ZooKeeper (port 22191, /tmp/baton-zkadopt) and exits 1
// when it sees two holders, 0 if it did not. Since the zookeeper package's
// fix (a node of a session it gave up is never adopted), it does not.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/faultcheck"
)

func main() {
	if err := run(); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	st, _ := faultcheck.StoreNamed("zookeeper")
	st.Port = 22191
	dir, script := "/tmp/baton-zkadopt", os.Getenv("BATON_SERVERS")
	if err := faultcheck.Servers(ctx, script, dir, st, "up", st.Server); err != nil {
		return err
	}
	direct := fmt.Sprintf("127.0.0.1:%d", st.Port)
	proxy, err := faultcheck.NewProxy(direct)
	if err != nil {
		return err
	}
	defer proxy.Close()
	url := func(addr, timeout string) string { return "zk://" + addr + "/zkadopt?session_timeout=" + timeout }
	name := fmt.Sprintf("x-%d", time.Now().UnixNano())

	// B holds the lock, on a session that outlives a server restart.
	b, err := baton.Open(ctx, url(direct, "20s"), nil)
	if err != nil {
		return err
	}
	defer b.Close()
	lb, err := b.Lock(ctx, name, nil)
	if err != nil {
		return err
	}
	// A waits for it, behind its proxy, on a 3s session.
	a, err := baton.Open(ctx, url(proxy.Addr(), "3s"), nil)
	if err != nil {
		return err
	}
	defer a.Close()
	got := make(chan *baton.Lease, 1)
	go func() {
		l, err := a.Lock(ctx, name, nil)
		if err != nil {
			fmt.Println("A: lock:", err)
		}
		got <- l
	}()
	time.Sleep(time.Second)

	// A is cut off long enough to judge its session lost, while the
	// server restarts (and so restarts the timers of the sessions it keeps).
	cut := time.Now()
	proxy.SetMode(faultcheck.Blackhole)
	if err := faultcheck.Servers(ctx, script, dir, st, "restart", st.Server); err != nil {
		return err
	}
	restarted := time.Now()
	time.Sleep(max(0, 4*time.Second-time.Since(cut)))
	proxy.SetMode(faultcheck.Pass)
	fmt.Printf("A cut off for %v; server back %v ago\n", time.Since(cut).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))
	if err := lb.Release(ctx); err != nil {
		fmt.Println("B: release:", err)
	}
	var la *baton.Lease
	select {
	case la = <-got:
	case <-time.After(20 * time.Second):
		return fmt.Errorf("a was not granted the lock")
	}
	if la == nil {
		return fmt.Errorf("lock of a failed: not reproduced")
	}
	fmt.Printf("A granted token %d; its lease's deadline: %v (zero: none)\n", la.Token(), la.Deadline())
	// A's network is now merely slow: its lease must still end before
	// anyone else is granted, judged on its own clock.
	proxy.SetLatency(time.Second)

	// C tries until it gets the lock; A should have been told first.
	c, err := baton.Open(ctx, url(direct, "20s"), nil)
	if err != nil {
		return err
	}
	defer c.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		lc, err := c.TryLock(ctx, name, nil)
		if err != nil {
			continue
		}
		aErr := la.Err()
		fmt.Printf("C granted token %d; A's lease: Err %v\n", lc.Token(), aErr)
		lc.Release(ctx)
		if aErr == nil {
			return fmt.Errorf("BUG: two holders of %q at once (A token %d, C token %d)", name, la.Token(), lc.Token())
		}
		fmt.Println("not reproduced: A knew its lease was gone")
		return nil
	}
	fmt.Println("not reproduced: C was not granted")
	return nil
}
