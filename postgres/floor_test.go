package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
)

// BenchmarkServerFloor measures what bounds an uncontended lock on each
// test server, whatever its design; ns/op is one acquire and release, each
// one round trip, on one connection, with commits that do not wait for the
// disk (synchronous_commit = off, as baton's), and p50-µs its median, the
// bench's statistic:
//   - advisory: pg_advisory_lock and pg_advisory_unlock (the bare
//     primitive: no TTL, no token, gone with the connection);
//   - upsert: the least lease with a token, by the server's clock: an
//     upsert that takes a free or expired row and bumps its token,
//     returning it, then a delete of the owner's row;
//   - upsert-function: the same statements, each in a one-statement
//     PL/pgSQL function;
//   - functions: the store's acquire and release functions, called on the
//     bare connection (the store's server work, without its client);
//   - baton: the store's Acquire and Release of one name.
//
// docs/benchmarks-history.md quotes it.
func BenchmarkServerFloor(b *testing.B) {
	for _, s := range drivertest.Servers(serversEnv) {
		b.Run(s.Name, func(b *testing.B) {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, dsn(b))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close(ctx)
			must := func(q string) {
				if _, err := conn.Exec(ctx, q); err != nil {
					b.Fatal(q, ": ", err)
				}
			}
			tb := fmt.Sprintf("baton_floor_%d", time.Now().UnixNano())
			must("SET synchronous_commit = off")
			must("CREATE TABLE " + tb + " (name text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL, expires timestamptz NOT NULL)")
			defer conn.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb)
			defer conn.Exec(context.Background(), "DROP FUNCTION IF EXISTS "+tb+"_take, "+tb+"_drop")
			take := "INSERT INTO " + tb + " AS t (name, owner, token, expires) VALUES ($1, $2, 1, clock_timestamp() + interval '15 seconds')" +
				" ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = t.token + 1, expires = excluded.expires" +
				" WHERE t.expires <= clock_timestamp() OR t.owner = excluded.owner RETURNING token"
			drop := "DELETE FROM " + tb + " WHERE name = $1 AND owner = $2"
			must("CREATE FUNCTION " + tb + "_take(p_name text, p_owner text) RETURNS bigint LANGUAGE plpgsql AS $$ DECLARE v bigint; BEGIN " +
				take2(take) + " INTO v; RETURN v; END $$")
			must("CREATE FUNCTION " + tb + "_drop(p_name text, p_owner text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN " +
				"DELETE FROM " + tb + " WHERE name = p_name AND owner = p_owner; RETURN FOUND; END $$")

			b.Run("advisory", func(b *testing.B) {
				var p p50
				for b.Loop() {
					t0 := time.Now()
					if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(42)"); err != nil {
						b.Fatal(err)
					}
					if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock(42)"); err != nil {
						b.Fatal(err)
					}
					p.add(t0)
				}
				p.report(b)
			})
			pair := func(b *testing.B, acquire, release string) {
				var token int64
				var p p50
				for b.Loop() {
					t0 := time.Now()
					if err := conn.QueryRow(ctx, acquire, "x", "own1").Scan(&token); err != nil {
						b.Fatal(err)
					}
					if _, err := conn.Exec(ctx, release, "x", "own1"); err != nil {
						b.Fatal(err)
					}
					p.add(t0)
				}
				p.report(b)
			}
			b.Run("upsert", func(b *testing.B) { pair(b, take, drop) })
			b.Run("upsert-function", func(b *testing.B) {
				pair(b, "SELECT "+tb+"_take($1, $2)", "SELECT "+tb+"_drop($1, $2)")
			})
			st := open(b, tb+"_baton")
			defer dropTables(dsn(b), tb+"_baton")
			req := &driver.Request{Name: "x", Owner: "own1", Mode: driver.Exclusive, TTL: 15 * time.Second}
			b.Run("functions", func(b *testing.B) {
				// As the store calls them: 15 s leases within a 60 s grace bound.
				acquire := "SELECT o_status FROM " + tb + "_baton_acquire($1, $2, 1::smallint, 0, 15000000000, false, 0, 'h', NULL, 60000000000, NULL)"
				release := "SELECT o_held FROM " + tb + "_baton_release(ARRAY[$1], ARRAY[$2])"
				var p p50
				for b.Loop() {
					t0 := time.Now()
					var status int16
					var held bool
					if err := conn.QueryRow(ctx, acquire, "x", "own1").Scan(&status); err != nil || status != 0 {
						b.Fatal(err, status)
					}
					if err := conn.QueryRow(ctx, release, "x", "own1").Scan(&held); err != nil || !held {
						b.Fatal(err, held)
					}
					p.add(t0)
				}
				p.report(b)
			})
			b.Run("baton", func(b *testing.B) {
				var p p50
				for b.Loop() {
					t0 := time.Now()
					if _, err := st.Acquire(ctx, req); err != nil {
						b.Fatal(err)
					}
					if ok, err := st.Release(ctx, []driver.Key{{Name: "x", Owner: "own1"}}); err != nil || !ok[0] {
						b.Fatal(err, ok)
					}
					p.add(t0)
				}
				p.report(b)
			})
		})
	}
}

// p50 collects the times of one acquire and release, for their median,
// the statistic the bench reports.
type p50 []time.Duration

func (p *p50) add(t0 time.Time) { *p = append(*p, time.Since(t0)) }

func (p p50) report(b *testing.B) {
	slices.Sort(p)
	b.ReportMetric(float64(p[len(p)/2].Microseconds()), "p50-µs")
}

// take2 is the upsert with the function's parameters.
func take2(q string) string { return strings.NewReplacer("$1", "p_name", "$2", "p_owner").Replace(q) }
