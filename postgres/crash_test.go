package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// TestCrash crashes the server (an immediate stop: no checkpoint, no WAL
// flush) right after grants that did not wait for the disk; see
// drivertest.Crash for what must hold.
func TestCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		drivertest.Crash(t, drivertest.CrashConfig{
			Env:  serversEnv,
			Open: func(t testing.TB) driver.Store { return open(t, tb) },
		})
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
