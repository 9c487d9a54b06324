package mysql_test

import (
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestGrantMissedDeletes: an owner whose expired hold outlives the
// deletion of the name's expired entries (as on a MariaDB MEMORY table:
// see TestSessionModelMissedDeletes) is granted the name again.
func TestGrantMissedDeletes(t *testing.T) {
	mysql.MissDeletes(t)
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		tb := freshTable(t)
		s := open(t, tb)
		shareAll(t, s, "n", "a", "b") // the deletion removes only a's
		if _, err := rawDB(t).ExecContext(ctx, "UPDATE "+tb+"_holds SET expires = expires - INTERVAL 1 MINUTE"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "b", Mode: driver.Exclusive, TTL: 30 * time.Second}); err != nil {
			t.Fatalf("b's acquire after its hold expired: %v", err)
		}
	})
}

// TestRenewPastExpiryMissedDeletes: a renewal that waits for its name's
// lock while the hold expires does not renew it, even when the deletion
// of expired entries it runs first misses the hold (as a MariaDB MEMORY
// table's can: see TestSessionModelMissedDeletes). One hold goes through
// T_renew's single path, two through its batch path.
func TestRenewPastExpiryMissedDeletes(t *testing.T) {
	mysql.MissDeletes(t)
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, names := range [][]string{{"n"}, {"n", "m"}} {
			t.Run(strconv.Itoa(len(names)), func(t *testing.T) {
				ctx := ctxFor(t, time.Minute)
				tb := freshTable(t)
				s := open(t, tb)
				db := rawDB(t)
				var holds []driver.Hold
				for _, n := range names {
					// "a" first in the name's rows: the deletion that
					// removes only its first row removes a's.
					shareAll(t, s, n, "a", "b")
					holds = append(holds, driver.Hold{Name: n, Owner: "b", TTL: 30 * time.Second})
				}
				// Hold the names' stripes, so that the renewal waits.
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				for _, n := range names {
					if _, err := tx.ExecContext(ctx, "SELECT id FROM "+tb+"_stripes WHERE id = CRC32(?) & 65535 FOR UPDATE", n); err != nil {
						t.Fatal(err)
					}
				}
				type result struct {
					gs  []*driver.Grant
					err error
				}
				done := make(chan result, 1)
				go func() {
					gs, err := s.Renew(ctx, holds)
					done <- result{gs, err}
				}()
				// Once it waits, every hold expires; then the stripes go.
				for {
					var waiting int
					if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND COMMAND <> 'Sleep' AND INFO LIKE ?",
						"%"+tb+"\\_stripes%").Scan(&waiting); err != nil {
						t.Fatal(err)
					}
					if waiting > 0 {
						break
					}
					select {
					case r := <-done:
						t.Fatalf("the renewal did not wait: %v, %v", r.gs, r.err)
					case <-time.After(5 * time.Millisecond):
					}
				}
				if _, err := db.ExecContext(ctx, "UPDATE "+tb+"_holds SET created = created - INTERVAL 1 MINUTE, renewed = renewed - INTERVAL 1 MINUTE, expires = expires - INTERVAL 1 MINUTE"); err != nil {
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
				r := <-done
				if r.err != nil {
					t.Fatal(r.err)
				}
				for i, g := range r.gs {
					if g != nil {
						t.Errorf("%s renewed after it expired: %+v", names[i], g)
					}
				}
				if n := liveHolds(t, db, tb); n != 0 {
					t.Errorf("%d live holds, want none", n)
				}
			})
		}
	})
}

// TestReleaseMissedDeletes: a release that takes the general path (here a
// long lease's) removes its entry even when the name has expired entries
// before it and a deletion removes only the first row it finds (as a
// MariaDB MEMORY table's can: see TestSessionModelMissedDeletes).
func TestReleaseMissedDeletes(t *testing.T) {
	mysql.MissDeletes(t)
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		tb := freshTable(t)
		s := openWith(t, &mysql.Options{Table: tb, MaxGrace: 3 * time.Second})
		db := rawDB(t)
		shareAll(t, s, "n", "a", "b") // a's row comes first
		if _, err := db.ExecContext(ctx, "UPDATE "+tb+"_holds SET expires = expires - INTERVAL 1 MINUTE WHERE owner = 'a'"); err != nil {
			t.Fatal(err)
		}
		held, err := s.Release(ctx, []driver.Key{{Name: "n", Owner: "b"}})
		if err != nil || !held[0] {
			t.Fatalf("release: %v, %v", held, err)
		}
		if n := liveHolds(t, db, tb); n != 0 {
			t.Errorf("%d live holds after the release, want none", n)
		}
	})
}

// TestPurgeMissedDeletes: a purge deletes every expired entry of a name it
// returns, even when a deletion removes only the first row it finds, so
// that the next purge does not return them again.
func TestPurgeMissedDeletes(t *testing.T) {
	mysql.MissDeletes(t)
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		tb := freshTable(t)
		s := open(t, tb)
		db := rawDB(t)
		shareAll(t, s, "n", "a", "b", "c")
		if _, err := db.ExecContext(ctx, "UPDATE "+tb+"_holds SET expires = expires - INTERVAL 1 MINUTE"); err != nil {
			t.Fatal(err)
		}
		for i, want := range []int{3, 0} {
			hs, err := s.Purge(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != want {
				t.Fatalf("purge %d returned %d holders, want %d", i+1, len(hs), want)
			}
		}
	})
}

// shareAll takes name in shared mode for each owner, for 30 s.
func shareAll(t testing.TB, s *mysql.Store, name string, owners ...string) {
	t.Helper()
	for _, o := range owners {
		if _, err := s.Acquire(ctxFor(t, time.Minute), &driver.Request{Name: name, Owner: o, Mode: driver.Shared, TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
}

// liveHolds counts the live entries of table tb.
func liveHolds(t testing.TB, db *sql.DB, tb string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctxFor(t, time.Minute), "SELECT COUNT(*) FROM "+tb+"_holds WHERE expires > UTC_TIMESTAMP(6)").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
