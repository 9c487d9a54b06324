package mysql_test

import (
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestBlockers checks the entry T_grant (and T_take's join) names for a
// refused exclusive request to wait for (whose bell it rings): for a
// request that joins the queue, the queue's tail, or the oldest holder
// when nobody waits; for the head of the queue asking again, the oldest
// holder; for a request further back, the entry just ahead. So each
// departure wakes one waiter, the one it may let in, or the one a release
// handed the name to. (A lighter aggregate decides the first two; a
// request that waits for an entry behind it would be woken late, not
// wrongly, so only this test sees a wrong blocker.)
func TestBlockers(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, durable := range []bool{false, true} {
			name := map[bool]string{false: "fast", true: "durable"}[durable]
			t.Run(name, func(t *testing.T) {
				ctx := ctxFor(t, 30*time.Second)
				tb := freshTable(t)
				openWith(t, &mysql.Options{Table: tb, Durable: durable}).Close()
				db := rawDB(t)
				if !durable {
					// The grace period covers the TTL (else T_grant asks for this).
					var maxTTL sql.NullInt64
					if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(15000000000, -1)").Scan(&maxTTL); err != nil {
						t.Fatal(err)
					}
				}
				type outcome struct {
					status  int
					blocker string
					queued  int
				}
				// call asks proc (queue: its p_queue) for owner's exclusive
				// hold of name.
				call := func(proc, name, owner string, queue int) outcome {
					t.Helper()
					var (
						o                                   outcome
						token, created, now, expires, after int64
						bowner                              sql.NullString
						btoken                              uint64
						flags                               int
					)
					err := db.QueryRowContext(ctx, "CALL "+tb+proc+"(?, ?, 1, 0, 15000000000, ?, 15000000000, 'h', NULL, 0, '', '')", name, owner, queue).
						Scan(&o.status, &token, &created, &now, &expires, &after, &bowner, &o.queued, &btoken, &flags)
					if err != nil {
						t.Fatalf("%s to %s: %v", proc, owner, err)
					}
					o.blocker = bowner.String
					return o
				}
				grant := func(owner string) outcome { t.Helper(); return call("_grant", "n", owner, 1) }
				release := func(owner string) {
					t.Helper()
					var res string
					keys := `[["` + hex.EncodeToString([]byte("n")) + `","` + hex.EncodeToString([]byte(owner)) + `",""]]`
					if err := db.QueryRowContext(ctx, "CALL "+tb+"_release(?)", keys).Scan(&res); err != nil || res != "1,1;" {
						t.Fatalf("release by %s: %q, %v", owner, res, err)
					}
				}
				want := func(owner string, w outcome) {
					t.Helper()
					if got := grant(owner); got != w {
						t.Errorf("grant to %s: %+v, want %+v", owner, got, w)
					}
				}

				want("h", outcome{status: 0})
				want("w1", outcome{2, "h", 0})  // joins behind the holder
				want("w2", outcome{2, "w1", 1}) // joins behind the tail
				want("w3", outcome{2, "w2", 1})
				want("w1", outcome{2, "h", 0})  // the head, asking again
				want("w3", outcome{2, "w2", 1}) // further back, asking again
				release("h")                    // hands the name to w1, the head
				want("w2", outcome{2, "w1", 0}) // now the head, behind the holder
				want("w1", outcome{status: 1})  // finds the name its own
				want("h", outcome{2, "w3", 1})  // joins behind the tail

				// T_take's join without the stripe (a fast table's) names
				// the same entries: the tail, or the oldest holder.
				if !durable {
					if got, w := call("_take", "n", "w4", 2), (outcome{2, "h", 1}); got != w {
						t.Errorf("join of w4: %+v, want %+v", got, w)
					}
					call("_take", "m", "x", 1)
					if got, w := call("_take", "m", "y", 2), (outcome{2, "x", 0}); got != w {
						t.Errorf("join of y: %+v, want %+v", got, w)
					}
				}
			})
		}
	})
}
