package mysql_test

import (
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestBlockers checks the entry T_grant names for a refused exclusive
// request to wait for (whose bell it rings): for a request that joins the
// queue, the queue's tail, or the oldest holder when nobody waits; for the
// head of the queue asking again, the oldest holder; for a request further
// back, the entry just ahead. So each departure wakes one waiter, the one
// it may let in. (A lighter aggregate decides the first two; a request
// that waits for an entry behind it would be woken late, not wrongly, so
// only this test sees a wrong blocker.)
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
				grant := func(owner string) outcome {
					t.Helper()
					var (
						o                                   outcome
						token, created, now, expires, after int64
						bowner                              sql.NullString
						btoken                              uint64
						flags                               int
					)
					err := db.QueryRowContext(ctx, "CALL "+tb+"_grant('n', ?, 1, 0, 15000000000, 1, 15000000000, 'h', NULL, 0, '', '')", owner).
						Scan(&o.status, &token, &created, &now, &expires, &after, &bowner, &o.queued, &btoken, &flags)
					if err != nil {
						t.Fatalf("grant to %s: %v", owner, err)
					}
					o.blocker = bowner.String
					return o
				}
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
				release("h")
				want("w2", outcome{2, "w1", 1}) // not the head yet
				want("w1", outcome{status: 0})  // the head, let in
				want("w2", outcome{2, "w1", 0}) // now the head, behind the holder
				want("h", outcome{2, "w3", 1})  // joins behind the tail
			})
		}
	})
}
