package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestNewNameWritesNoRow: a fast table's grant of a new name inserts no
// InnoDB row (a durable table's counters row, whose commit waits for a log
// flush): the name's decisions serialize on its stripe, made with the
// table, and its counters are in T_state.
func TestNewNameWritesNoRow(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		const n = 50
		for i := range n {
			name := fmt.Sprint("new/", i)
			if _, err := s.Acquire(ctx, &driver.Request{Name: name, Owner: "o", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Release(ctx, []driver.Key{{Name: name, Owner: "o"}}); err != nil {
				t.Fatal(err)
			}
		}
		db := rawDB(t)
		var rows, counters int
		if err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM "+tb+"), (SELECT COUNT(*) FROM "+tb+"_state WHERE name <> '')").
			Scan(&rows, &counters); err != nil {
			t.Fatal(err)
		}
		if rows != 0 || counters != n {
			t.Errorf("after %d new names: %d rows in %s, %d counters in %s_state; want 0 and %d", n, rows, tb, counters, tb, n)
		}
	})
}

// TestInLockedTxSparesItsStripe: while a transaction of InLockedTx holds
// a name of a fast table, a name on the same stripe is granted at once, and
// an acquire of the held name that waits in the server (a second at most)
// is granted once the transaction ends.
func TestInLockedTxSparesItsStripe(t *testing.T) {
	const a = "stripe/a"
	b := onStripeOf(a, "stripe/b", 1)[0]
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s, other := open(t, tb), open(t, tb)
		type result struct {
			g   *driver.Grant
			err error
		}
		waited := make(chan result, 1)
		var txToken uint64
		err := s.InLockedTx(ctx, a, func(ctx context.Context, tx *sql.Tx, token uint64) error {
			txToken = token
			if _, err := other.Acquire(ctx, &driver.Request{Name: b, Owner: "b", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
				return fmt.Errorf("Acquire of %q, on the stripe of %q, during InLockedTx: %w", b, a, err)
			}
			if _, err := other.Release(ctx, []driver.Key{{Name: b, Owner: "b"}}); err != nil {
				return err
			}
			go func() {
				g, err := other.Acquire(ctx, &driver.Request{Name: a, Owner: "w", Mode: driver.Exclusive, TTL: time.Minute})
				waited <- result{g, err}
			}()
			time.Sleep(300 * time.Millisecond) // the acquire waits for the transaction
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		r := <-waited
		if r.err != nil {
			if errors.Is(r.err, driver.ErrNotGranted) {
				t.Fatalf("an acquire of %q that waited for InLockedTx was refused after the transaction ended", a)
			}
			t.Fatal(r.err)
		}
		if r.g.Token <= txToken {
			t.Errorf("token %d after InLockedTx's %d", r.g.Token, txToken)
		}
	})
}

// TestStripesUnderLoad: batches of renewals and releases, acquires and
// reclaims on names that share a few stripes, in every order, all succeed:
// no two calls wait for each other in a cycle (a deadlock that outlasted
// the store's retries would fail a call).
func TestStripesUnderLoad(t *testing.T) {
	// 24 names on 3 stripes.
	var names []string
	for _, first := range []string{"load/a", "load/b", "load/c"} {
		names = append(append(names, first), onStripeOf(first, first, 7)...)
	}
	longMeta := map[string]string{"k": strings.Repeat("m", 300)}
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, durable := range []bool{false, true} {
			t.Run(map[bool]string{false: "fast", true: "durable"}[durable], func(t *testing.T) {
				ctx := ctxFor(t, time.Minute)
				tb := freshTable(t)
				db := rawDB(t)
				before := deadlocks(t, db)
				stop := time.Now().Add(2 * time.Second)
				var wg sync.WaitGroup
				var calls atomic.Int64
				for w := range 3 {
					s := openWith(t, &mysql.Options{Table: tb, Durable: durable})
					wg.Add(1)
					go func() {
						defer wg.Done()
						owner := fmt.Sprint("w", w)
						r := rand.New(rand.NewPCG(uint64(w), 1))
						for time.Now().Before(stop) {
							var holds []driver.Hold
							var keys []driver.Key
							for i, n := range names {
								var meta map[string]string
								if i%3 == 0 {
									meta = longMeta // a fast table's release takes these one by one, locking
								}
								_, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: owner, Mode: driver.Shared, TTL: 2 * time.Second, Meta: meta})
								if errors.Is(err, driver.ErrNotGranted) {
									continue // the exclusive holder below
								}
								if err != nil {
									t.Errorf("Acquire %s: %v", n, err)
									return
								}
								holds = append(holds, driver.Hold{Name: n, Owner: owner, TTL: 2 * time.Second})
								keys = append(keys, driver.Key{Name: n, Owner: owner})
							}
							r.Shuffle(len(holds), func(i, j int) { holds[i], holds[j] = holds[j], holds[i] })
							gs, err := s.Renew(ctx, holds)
							if err != nil {
								t.Errorf("Renew: %v", err)
								return
							}
							for i, g := range gs {
								if g == nil {
									t.Errorf("Renew of %s: not renewed", holds[i].Name)
								}
							}
							r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
							if _, err := s.Release(ctx, keys); err != nil {
								t.Errorf("Release: %v", err)
								return
							}
							calls.Add(int64(len(names)) + 2)
						}
					}()
				}
				s := openWith(t, &mysql.Options{Table: tb, Durable: durable})
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; time.Now().Before(stop); i++ {
						n := names[i%len(names)]
						_, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "x", Mode: driver.Exclusive, TTL: time.Second})
						if err == nil {
							_, err = s.Release(ctx, []driver.Key{{Name: n, Owner: "x"}})
						}
						if err != nil && !errors.Is(err, driver.ErrNotGranted) {
							t.Errorf("exclusive %s: %v", n, err)
							return
						}
						if i%16 == 0 {
							if _, err := mysql.Reclaim(ctx, s, 0); err != nil {
								t.Errorf("Reclaim: %v", err)
								return
							}
						}
						calls.Add(1)
					}
				}()
				wg.Wait()
				t.Logf("%d calls", calls.Load())
				// The store retries a call that met a deadlock, so the
				// server's count is what shows one.
				if n := deadlocks(t, db) - before; n != 0 {
					t.Errorf("%d deadlocks", n)
				}
			})
		}
	})
}

// deadlocks returns how many deadlocks InnoDB has met since the server
// started (the tests' user has the PROCESS privilege, see
// scripts/servers.d/mysql.sh).
func deadlocks(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n) // MariaDB
	if errors.Is(err, sql.ErrNoRows) {
		err = db.QueryRow("SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'").Scan(&n)
	}
	if err != nil {
		t.Fatalf("reading InnoDB's count of deadlocks: %v", err)
	}
	return n
}

// BenchmarkNewNames measures grants of names never used before, one at a
// time (hold-many's and a per-entity lock's case), and reports the log
// flushes the server made per grant (fsyncs/op: Innodb_os_log_fsyncs, or
// MariaDB's Innodb_data_fsyncs; server-wide).
func BenchmarkNewNames(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			ctx := ctxFor(b, 10*time.Minute)
			s := open(b, freshTable(b))
			db := rawDB(b)
			fsyncs := func() int64 {
				var name string
				var n int64
				err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_os_log_fsyncs'").Scan(&name, &n)
				if errors.Is(err, sql.ErrNoRows) { // MariaDB
					err = db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_data_fsyncs'").Scan(&name, &n)
				}
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
			// The table's first use (a new incarnation) is not counted.
			if _, err := s.Acquire(ctx, &driver.Request{Name: "first", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
			before := fsyncs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := s.Acquire(ctx, &driver.Request{Name: fmt.Sprint("new/", i), Owner: "o", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(fsyncs()-before)/float64(b.N), "fsyncs/op")
		})
	}
}

// TestBindWithoutRow: a transaction of InLockedTx from a process of a
// version before stripes, which calls T_bind without T_txrow, still keeps
// every grant of its name out on a fast table (and with it the grants of
// the other names on its stripe) until it ends.
func TestBindWithoutRow(t *testing.T) {
	const a = "bind/a"
	b := onStripeOf(a, "bind/b", 1)[0]
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		tb := freshTable(t)
		s, other := open(t, tb), open(t, tb)
		req := func(name, owner string) *driver.Request {
			return &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute}
		}
		g, err := s.Acquire(ctx, req(a, "tx-old"))
		if err != nil {
			t.Fatal(err)
		}
		tx, err := rawDB(t).BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var ok int
		if err := tx.QueryRowContext(ctx, "CALL "+tb+"_bind(?, ?, ?)", a, "tx-old", g.Token).Scan(&ok); err != nil || ok != 1 {
			t.Fatalf("bind = %d, %v; want 1", ok, err)
		}
		for _, n := range []string{a, b} {
			if _, err := other.Acquire(ctx, req(n, "x")); !errors.Is(err, driver.ErrNotGranted) {
				t.Errorf("Acquire of %s during the transaction: %v, want ErrNotGranted", n, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{a, b} {
			g2, err := other.Acquire(ctx, req(n, "x"))
			if err != nil {
				t.Fatalf("Acquire of %s after the transaction: %v", n, err)
			}
			if n == a && g2.Token <= g.Token {
				t.Errorf("token %d after the transaction's %d", g2.Token, g.Token)
			}
		}
	})
}

// onStripeOf returns n names made of prefix and a number that share
// name's stripe (a fast table's serializer: CRC32(name) & 65535).
func onStripeOf(name, prefix string, n int) []string {
	stripe := func(name string) uint32 { return crc32.ChecksumIEEE([]byte(name)) & 0xffff }
	var out []string
	for i := 0; len(out) < n; i++ {
		if c := fmt.Sprint(prefix, i); stripe(c) == stripe(name) {
			out = append(out, c)
		}
	}
	return out
}
