package mysql_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// servers runs scripts/servers with args and the name of t's server.
func servers(t *testing.T, args ...string) {
	t.Helper()
	script := os.Getenv("BATON_SERVERS")
	if script == "" {
		script = "../scripts/servers"
	}
	srv := drivertest.ServerOf(t, serversEnv).Name
	out, err := exec.Command(script, append(args, srv)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s %s: %v\n%s", script, strings.Join(args, " "), srv, err, out)
	}
}

// TestCrash kills the server (SIGKILL) during holds of a fast table,
// whose MEMORY tables the restart empties. A holder whose hold was lost is
// told its lease is lost before anyone else is granted the name; nobody is
// granted anything before the grace period (the longest TTL granted
// without a flush, 2s here) has run from the restart; every token after
// the crash is above every token before; and a lease longer than MaxGrace,
// kept durably, survives: its holder keeps renewing it and nobody else is
// granted its name.
func TestCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 120*time.Second)
		tb := freshTable(t)
		a := client(t, open(t, tb), nil)
		ttl := 2 * time.Second
		o := &baton.LockOptions{TTL: ttl}
		ls, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb, MaxGrace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ls.Close() })
		long := client(t, ls, nil)

		// Tokens handed out on one name, up to the crash.
		var last uint64
		for range 30 {
			l, err := a.Lock(ctx, "crash/burst", o)
			if err != nil {
				t.Fatal(err)
			}
			last = l.Token()
			l.Release(ctx)
		}
		la, err := a.Lock(ctx, "crash/held", o)
		if err != nil {
			t.Fatal(err)
		}
		ll, err := long.Lock(ctx, "crash/long", &baton.LockOptions{TTL: 6 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		servers(t, "crash")
		crashed := time.Now()
		servers(t, "up")
		restarted := time.Now()

		b := client(t, open(t, tb), nil)
		bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
		lb, err := b.Lock(bctx, "crash/held", o)
		bcancel()
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		t.Logf("b granted %v after the restart; a's lease: %v", granted.Sub(restarted), la.Err())
		select {
		case <-la.Done():
		default:
			t.Fatalf("b was granted while a still held: a's Err %v", la.Err())
		}
		if d := granted.Sub(crashed); d < ttl {
			t.Errorf("b was granted %v after the crash, within the grace period (%v)", d, ttl)
		}
		if lb.Token() <= la.Token() {
			t.Errorf("b's token %#x is not above a's %#x", lb.Token(), la.Token())
		}
		lb.Release(ctx)
		l, err := b.Lock(ctx, "crash/burst", o)
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() <= last {
			t.Errorf("token %#x after the crash is not above the last one before it, %#x", l.Token(), last)
		}
		l.Release(ctx)

		// The long lease came back: b cannot take its name, and it is
		// still held after more than its TTL since the crash.
		if _, err := b.TryLock(ctx, "crash/long", o); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("TryLock of the long lease's name after the crash: %v", err)
		}
		if d := 7*time.Second - time.Since(crashed); d > 0 {
			time.Sleep(d)
		}
		if err := ll.Err(); err != nil {
			t.Fatalf("the long lease was lost: %v", err)
		}
		if _, err := b.TryLock(ctx, "crash/long", o); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("TryLock of the long lease's name, its TTL after the crash: %v", err)
		}
		if err := ll.Release(ctx); err != nil {
			t.Errorf("releasing the long lease: %v", err)
		}
		l, err = b.TryLock(ctx, "crash/long", o)
		if err != nil {
			t.Fatalf("TryLock after the long lease's release: %v", err)
		}
		if l.Token() <= ll.Token() {
			t.Errorf("token %#x after the long lease is not above its %#x", l.Token(), ll.Token())
		}
		l.Release(ctx)
	})
}
