package mysql_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestSessions runs drivertest's checks of a store's sessions.
func TestSessions(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		drivertest.Sessions(t, drivertest.SessionsConfig{
			Open: func(t testing.TB) driver.Store { return mysql.Faulty{Store: open(t, tb)} },
			Count: func(t testing.TB) (n int) {
				if err := rawDB(t).QueryRow("SELECT COUNT(*) FROM " + tb + "_sessions").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
			Slow: 2,
			// Kept in T_meta: Close releases it through T_release.
			CloseMeta: map[string]string{"m": strings.Repeat("m", 400)},
			AfterClose: func(t testing.TB, prefix string) {
				var bound, metas int
				err := rawDB(t).QueryRow("SELECT (SELECT COUNT(*) FROM "+tb+"_holds WHERE name LIKE CONCAT(?, '%') AND sid <> ''), "+
					"(SELECT COUNT(*) FROM "+tb+"_meta WHERE name LIKE CONCAT(?, '%'))", prefix, prefix).Scan(&bound, &metas)
				if err != nil || bound != 0 || metas != 0 {
					t.Fatalf("after Close: %d holds in a session and %d rows of metadata, %v; want none", bound, metas, err)
				}
			},
		})
	})
}

// TestSessionRenewalWaitsForJudgment: a session's renewal that waits for
// the holds table while a statement holds it past the session's expiry
// (as a call judging the session's holds expired would) renews nothing:
// neither the session nor its hold. It judges liveness when it runs, not
// when it was sent.
func TestSessionRenewalWaitsForJudgment(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		open(t, tb).Close() // the schema
		db := rawDB(t)
		var n int64
		if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(?, -1)", int64(mysql.DefaultMaxGrace)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		const ttl = 2 * time.Second
		if err := db.QueryRowContext(ctx, "CALL "+tb+"_session('s1', ?, 1)", int64(ttl)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("making the session: %d, %v", n, err)
		}
		var status, flags int8
		var y any
		err := db.QueryRowContext(ctx, "CALL "+tb+"_grant('n', 'o', 1, 0, ?, 0, 0, 'h', NULL, 0, '', 's1')", int64(ttl)).
			Scan(&status, &y, &y, &y, &y, &y, &y, &y, &y, &flags)
		if err != nil || status != 0 || flags&2 == 0 {
			t.Fatalf("grant: status %d flags %d, %v", status, flags, err)
		}
		held := make(chan error, 1)
		go func() {
			_, err := db.ExecContext(ctx, "UPDATE "+tb+"_holds SET flags = flags WHERE SLEEP(2.3) = 0")
			held <- err
		}()
		// The renewal is sent while the session is live, and runs once
		// it has expired.
		time.Sleep(1500 * time.Millisecond)
		start := time.Now()
		if err := db.QueryRowContext(ctx, "CALL "+tb+"_session('s1', ?, 0)", int64(ttl)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 400*time.Millisecond {
			t.Fatalf("the renewal took %v: it did not wait for the table", waited)
		}
		if err := <-held; err != nil {
			t.Fatal(err)
		}
		var live int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tb+"_holds WHERE expires > UTC_TIMESTAMP(6)").Scan(&live); err != nil {
			t.Fatal(err)
		}
		if n != 0 || live != 0 {
			t.Fatalf("a renewal sent before the session expired and run after: renewed %d, live holds %d; want 0 and 0", n, live)
		}
	})
}

// TestSessionCrash kills the server (SIGKILL) while only their session
// keeps two holds (see drivertest.SessionCrash). The restart empties the
// MEMORY tables, the sessions with them.
func TestSessionCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		drivertest.SessionCrash(t, drivertest.SessionCrashConfig{
			Env:  serversEnv,
			Open: func(t testing.TB) driver.Store { return open(t, tb) },
			Bound: func(t testing.TB, names []string) (n int) {
				err := rawDB(t).QueryRow("SELECT COUNT(*) FROM "+tb+"_holds WHERE name IN (?, ?) AND sid <> ''", names[0], names[1]).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				return n
			},
		})
	})
}

// TestSessionNotRevived: see drivertest.SessionNotRevived; and a durable
// table makes no session.
func TestSessionNotRevived(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.SessionNotRevived(t, open(t, freshTable(t)), mysql.DefaultMaxGrace)
		durable := openWith(t, &mysql.Options{Table: freshTable(t), Durable: true})
		if ok, err := durable.KeepSession(ctxFor(t, 10*time.Second), "s4", time.Second, true); ok || err != nil {
			t.Errorf("create a session on a durable table: %v, %v; want false", ok, err)
		}
	})
}

// TestEarlierAcquire: the processes of a version before sessions, which
// run while the procedures are replaced, call T_acquire as they did; it
// grants as before and binds nothing.
func TestEarlierAcquire(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		open(t, tb).Close()
		db := rawDB(t)
		var n int64
		if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(?, -1)", int64(mysql.DefaultMaxGrace)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		call := func(owner string) (status, held int8) {
			var token uint64
			var y any
			err := db.QueryRowContext(ctx, "CALL "+tb+"_acquire('n', ?, 1, 0, 1000000000, 0, 0, 'h', NULL, 0, '')", owner).
				Scan(&status, &token, &y, &y, &y, &y, &y, &y, &y, &held)
			if err != nil {
				t.Fatal(err)
			}
			return status, held
		}
		if status, held := call("o1"); status != 0 || held != 0 {
			t.Fatalf("the earlier versions' acquire: status %d, held %d; want 0, 0", status, held)
		}
		if status, _ := call("o2"); status != 2 {
			t.Fatalf("another owner's acquire: status %d, want 2 (not granted)", status)
		}
		var sid string
		if err := db.QueryRowContext(ctx, "SELECT sid FROM "+tb+"_holds WHERE name = 'n'").Scan(&sid); err != nil || sid != "" {
			t.Fatalf("the hold's session: %q, %v; want none", sid, err)
		}
	})
}

// TestUpgradeAddsSessions: a table made before sessions (no sid column,
// no T_session) is upgraded in place when a store of this version opens
// it, and its holds stay.
func TestUpgradeAddsSessions(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		a := client(t, open(t, tb), nil)
		l, err := a.TryLock(ctx, "u/held", &baton.LockOptions{TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		db := rawDB(t)
		for _, q := range []string{
			"ALTER TABLE " + tb + "_holds DROP KEY sid_ix, DROP COLUMN sid",
			"DROP TABLE " + tb + "_sessions",
			"DROP PROCEDURE " + tb + "_session",
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		st := open(t, tb)
		b := client(t, st, nil)
		if _, err := b.TryLock(ctx, "u/held", nil); !errors.Is(err, baton.ErrLocked) {
			t.Fatalf("TryLock of a name held before the upgrade: %v, want ErrLocked", err)
		}
		drivertest.WaitSession(t, ctx, st, 15*time.Second)
	})
}

// BenchmarkSessionRenewal times a renewal of a session that keeps 1,000
// or 100,000 holds: the session's holds are extended in one statement, for
// which the holds table is locked.
func BenchmarkSessionRenewal(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		for _, holds := range []int{1000, 100_000} {
			b.Run(fmt.Sprintf("%s/%d", srv.Name, holds), func(b *testing.B) {
				ctx := ctxFor(b, 5*time.Minute)
				tb := freshTable(b)
				open(b, tb).Close()
				db := rawDB(b)
				var n int64
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(?, -1)", int64(mysql.DefaultMaxGrace)).Scan(&n); err != nil {
					b.Fatal(err)
				}
				const ttl = 15 * time.Second
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_session('s', ?, 1)", int64(ttl)).Scan(&n); err != nil || n != 1 {
					b.Fatal(n, err)
				}
				_, err := db.ExecContext(ctx, "INSERT INTO "+tb+"_holds (name, owner, queued, mode, lim, token, host, ttl_ns, created, renewed, expires, sid) "+
					"SELECT CONCAT('b/', s.id, '/', k.k), 'o', 0, 1, 0, 1, 'h', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 15 SECOND, 's' "+
					"FROM "+tb+"_stripes s CROSS JOIN (SELECT 0 k UNION ALL SELECT 1) k LIMIT ?", int64(ttl), holds)
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					if err := db.QueryRowContext(ctx, "CALL "+tb+"_session('s', ?, 0)", int64(ttl)).Scan(&n); err != nil || n != 1 {
						b.Fatal(n, err)
					}
				}
			})
		}
	}
}
