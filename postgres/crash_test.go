package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// TestCrash crashes the server (an immediate stop: no checkpoint, no WAL
// flush) right after grants that did not wait for the disk. Whatever the
// crash forgot: a holder whose grant was forgotten is told its lease is
// lost before anyone else is granted the name; nobody is granted anything
// before the grace period (the longest TTL, 2s here) has run from the
// restart; and every token after the crash is above every token before.
func TestCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 90*time.Second)
		tb := freshTable(t)
		a := client(t, open(t, tb), nil)
		ttl := 2 * time.Second
		o := &baton.LockOptions{TTL: ttl}

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
		servers(t, "crash")
		// The grace period starts with the first call the new incarnation
		// serves: a's keepalive may make it before "up" returns.
		crashed := time.Now()
		servers(t, "up")
		restarted := time.Now()

		b := client(t, open(t, tb), nil)
		bctx, bcancel := context.WithTimeout(ctx, 15*time.Second)
		lb, err := b.Lock(bctx, "crash/held", o)
		bcancel()
		if err != nil && la.Err() == nil {
			// a's grant was flushed before the crash (a loaded machine
			// is slow to crash the server): the new incarnation remembers
			// it, so a keeps renewing it, as it should, and b waits.
			t.Logf("a's grant outlived the crash; b waits until a releases")
			la.Release(ctx)
			lb, err = b.Lock(ctx, "crash/held", o)
		}
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
	})
}

// TestReclaim: the rows of idle names go, and a name used again never
// gets a token it had before.
func TestReclaim(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		c := client(t, s, nil)
		tokens := map[string]uint64{}
		for i := range 50 {
			n := fmt.Sprintf("reclaim/%d", i)
			l, err := c.Lock(ctx, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			tokens[n] = l.Token()
			if i > 0 { // reclaim/0 stays held
				l.Release(ctx)
			}
		}
		rows := func() int {
			var n int
			if err := pool(t).QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{tb}.Sanitize()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := rows(); n != 50 {
			t.Fatalf("%d rows before reclaiming, want 50", n)
		}
		if n, err := postgres.Reclaim(ctx, s, 0); err != nil || n != 49 {
			t.Fatalf("Reclaim = %d, %v; want the 49 idle names", n, err)
		}
		if n := rows(); n != 1 {
			t.Errorf("%d rows after reclaiming, want the held name's alone", n)
		}
		if n, err := postgres.Reclaim(ctx, s, time.Hour); err != nil || n != -1 {
			t.Errorf("Reclaim right after another = %d, %v; want -1 (did not run)", n, err)
		}
		for i := range 5 {
			n := fmt.Sprintf("reclaim/%d", i)
			l, err := c.TryLock(ctx, n, nil)
			if i == 0 {
				if !errors.Is(err, baton.ErrLocked) {
					t.Errorf("TryLock of the held name after reclaiming: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Token() <= tokens[n] {
				t.Errorf("%s reclaimed and used again: token %#x, not above its last, %#x", n, l.Token(), tokens[n])
			}
			l.Release(ctx)
		}
	})
}

// TestPlansAfterEmptyTable: plans cached while the tables were empty and
// analyzed as such do not scan whole tables once they are large.
func TestPlansAfterEmptyTable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s, err := postgres.Open(ctx, dsn(t, "pool_max_conns=1"), &postgres.Options{Table: tb})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c := client(t, s, nil)
		p := pool(t)
		for _, suffix := range []string{"", "_holds"} {
			if _, err := p.Exec(ctx, "VACUUM ANALYZE "+pgx.Identifier{tb + suffix}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
		// Enough calls on the one connection for its plans to be cached,
		// on every path: fast, queued, contended.
		for i := range 20 {
			l, err := c.Lock(ctx, "warm", nil)
			if err != nil {
				t.Fatal(err)
			}
			l2, err := c.TryLock(ctx, "warm", &baton.LockOptions{Owner: baton.NewOwner(), Shared: i%2 == 0})
			if err == nil {
				l2.Release(ctx)
			}
			l.Release(ctx)
		}
		if _, err := p.Exec(ctx, "INSERT INTO "+pgx.Identifier{tb}.Sanitize()+" (name) SELECT 'filler/' || i FROM generate_series(1, 20000) i"); err != nil {
			t.Fatal(err)
		}
		scans := func() int64 {
			var n int64
			err := p.QueryRow(ctx, "SELECT coalesce(sum(seq_scan), 0) FROM pg_stat_user_tables WHERE relname IN ($1, $2)", tb, tb+"_holds").Scan(&n)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		// A backend reports its statistics when it goes idle at least a
		// second after its last report: a call after a pause reports the
		// store's connection's.
		flush := func() {
			time.Sleep(1100 * time.Millisecond)
			l, err := c.Lock(ctx, "warm", nil)
			if err != nil {
				t.Fatal(err)
			}
			l.Release(ctx)
			time.Sleep(100 * time.Millisecond)
		}
		flush()
		before := scans()
		for i := range 50 {
			l, err := c.Lock(ctx, fmt.Sprintf("filler/%d", i+1), nil)
			if err != nil {
				t.Fatal(err)
			}
			l.Release(ctx)
		}
		flush()
		if n := scans() - before; n > 0 {
			t.Errorf("%d sequential scans of the lock tables for 50 locks", n)
		}
	})
}
