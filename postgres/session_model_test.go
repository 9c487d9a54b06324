package postgres_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// TestSessionModel runs drivertest.SessionModel on the table's functions.
// Time passes by moving every time the tables hold back, which is what the
// server's clock moving on looks like to them. After every step the names'
// busy and bound flags must also agree with their entries.
func TestSessionModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 3*time.Minute)
		tb := freshTable(t)
		open(t, tb).Close() // the schema
		p := pool(t)
		id := func(suffix string) string { return pgx.Identifier{tb + suffix}.Sanitize() }
		maxGrace := int64(postgres.DefaultMaxGrace)
		drivertest.SessionModel(t, drivertest.SessionModelConfig{
			Acquire: func(t testing.TB, req *driver.Request, sid string) (*driver.Grant, bool, error) {
				var status int16
				var token int64
				var bound bool
				var psid *string
				if sid != "" {
					psid = &sid
				}
				err := p.QueryRow(ctx, "SELECT o_status, o_token, o_bound FROM "+id("_acquire")+"($1, $2, $3, $4, $5, false, 0, 'h', NULL, $6, $7)",
					req.Name, req.Owner, int16(req.Mode), int32(req.Limit), int64(req.TTL), maxGrace, psid).Scan(&status, &token, &bound)
				if err != nil {
					t.Fatal(err)
				}
				g, err := drivertest.AcquireStatus(int(status), uint64(token))
				return g, bound, err
			},
			Renew: func(t testing.TB, names []string, owner string, ttl time.Duration) []bool {
				owners, ttls := make([]string, len(names)), make([]int64, len(names))
				for i := range names {
					owners[i], ttls[i] = owner, int64(ttl)
				}
				rows, err := p.Query(ctx, "SELECT o_i FROM "+id("_renew")+"($1, $2, $3, $4)", names, owners, ttls, maxGrace)
				if err != nil {
					t.Fatal(err)
				}
				renewed := make([]bool, len(names))
				for rows.Next() {
					var i int
					if err := rows.Scan(&i); err != nil {
						t.Fatal(err)
					}
					renewed[i-1] = true
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatal(rows.Err())
				}
				return renewed
			},
			Release: func(t testing.TB, name, owner string) (held bool) {
				rows, err := p.Query(ctx, "SELECT o_held FROM "+id("_release")+"($1, $2)", []string{name}, []string{owner})
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var h bool
					if err := rows.Scan(&h); err != nil {
						t.Fatal(err)
					}
					held = held || h
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatal(rows.Err())
				}
				return held
			},
			KeepSession: func(t testing.TB, sid string, ttl time.Duration, create bool) (ok bool) {
				if err := p.QueryRow(ctx, "SELECT "+id("_session")+"($1, $2, $3, $4)", sid, int64(ttl), create, maxGrace).Scan(&ok); err != nil {
					t.Fatal(err)
				}
				return ok
			},
			Pass: func(t testing.TB, d time.Duration) {
				for _, q := range []string{
					"UPDATE " + id("") + " SET xc = xc - $1::interval, xr = xr - $1::interval, xe = xe - $1::interval WHERE xe IS NOT NULL",
					"UPDATE " + id("_holds") + " SET created = created - $1::interval, renewed = renewed - $1::interval, expires = expires - $1::interval",
					"UPDATE " + id("_sessions") + " SET expires = expires - $1::interval",
					"UPDATE " + id("_incarnation") + " SET grace = grace - $1::interval",
				} {
					if _, err := p.Exec(ctx, q, d); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			},
			Live: func(t testing.TB, name string) map[string]time.Duration {
				got := map[string]time.Duration{}
				rows, err := p.Query(ctx, "SELECT o_owner, o_mode, o_lim, o_queued, o_expires - o_now FROM "+id("_list")+"($1, '', '')", name)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var o string
					var mode int16
					var lim int32
					var queued bool
					var left time.Duration
					if err := rows.Scan(&o, &mode, &lim, &queued, &left); err != nil {
						t.Fatal(err)
					}
					if !queued && left > 0 {
						got[fmt.Sprintf("%s %d %d", o, mode, lim)] = left
					}
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatal(rows.Err())
				}
				return got
			},
			AfterStep: func(t testing.TB, step int, what string, names []string) {
				for _, n := range names {
					var busy, bound, entries, bindings bool
					err := p.QueryRow(ctx, "SELECT k.busy, k.bound, EXISTS (SELECT 1 FROM "+id("_holds")+" e WHERE e.name = k.name), "+
						"EXISTS (SELECT 1 FROM "+id("_holds")+" e WHERE e.name = k.name AND e.sid IS NOT NULL) FROM "+id("")+" k WHERE k.name = $1", n).
						Scan(&busy, &bound, &entries, &bindings)
					if err != nil && !errors.Is(err, pgx.ErrNoRows) {
						t.Fatal(err)
					}
					if busy != entries || bindings && !bound {
						t.Fatalf("step %d (%s): %s busy %v with entries %v, bound %v with entries in sessions %v", step, what, n, busy, entries, bound, bindings)
					}
				}
			},
		})
	})
}
