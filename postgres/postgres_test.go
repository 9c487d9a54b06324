package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// table is this run's lock table, dropped when the run ends, so that runs
// do not see each other's locks.
var table = fmt.Sprintf("baton_t_%08x", rand.Uint32())

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range drivertest.Servers(serversEnv) {
		dropTables(s.URL, table)
	}
	os.Exit(code)
}

// serversEnv lists the servers the tests run on (scripts/servers env).
const serversEnv = "BATON_TEST_POSTGRES"

// dsn is the URL of the server t runs on, with extra "key=value" parameters.
func dsn(t testing.TB, params ...string) string {
	t.Helper()
	u := drivertest.ServerOf(t, serversEnv).URL
	for _, p := range params {
		if strings.Contains(u, "?") {
			u += "&" + p
		} else {
			u += "?" + p
		}
	}
	return u
}

func dropTables(u string, tables ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dropping test tables: %v\n", err)
		return
	}
	defer conn.Close(ctx)
	for _, tb := range tables {
		if _, err := conn.Exec(ctx, postgres.DropSQL("", tb)); err != nil {
			fmt.Fprintf(os.Stderr, "dropping test table %s: %v\n", tb, err)
		}
	}
}

// tables numbers the tables freshTable names.
var tables atomic.Uint32

// freshTable returns a table name of its own for t, dropped at its end.
func freshTable(t testing.TB) string {
	// Numbered, not drawn at random: two tests of a run must not share a
	// table, or each would see the other's locks.
	tb := fmt.Sprintf("%s_%04x", table, tables.Add(1))
	u := dsn(t)
	t.Cleanup(func() { dropTables(u, tb) })
	return tb
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// open returns a new store of table with a small pool of its own.
func open(t testing.TB, tb string) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(ctxFor(t, 30*time.Second), dsn(t, "pool_max_conns=4"), &postgres.Options{Table: tb})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func client(t testing.TB, s driver.Store, o *baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(ctxFor(t, 30*time.Second), dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return postgres.Faulty{Store: open(t, table)} },
			// Room for the suite's 300ms TTLs on a loaded machine (CI runs
			// the fault harness and other stores' suites beside it).
			Slow: 1.5,
		})
	})
}

func TestBasic(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		a := client(t, open(t, table), nil)
		b := client(t, open(t, table), nil)
		n := "basic/" + t.Name()
		before := time.Now()
		la, err := a.TryLock(ctx, n, &baton.LockOptions{TTL: 1500 * time.Millisecond, Meta: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		st, err := b.Status(ctx, &baton.Filter{Name: n})
		if err != nil || len(st) != 1 {
			t.Fatalf("Status = %+v, %v", st, err)
		}
		h := st[0]
		if h.Owner != la.Owner() || h.Token != la.Token() || h.Meta["k"] != "v" || h.TTL != 1500*time.Millisecond {
			t.Errorf("Status entry %+v", h)
		}
		if d := h.Expires.Sub(h.Renewed); d != 1500*time.Millisecond {
			t.Errorf("Expires-Renewed = %v, want the TTL", d)
		}
		if d := h.Created.Sub(before); d < -time.Minute || d > time.Minute {
			t.Errorf("Created %v is %v away from this machine's clock", h.Created, d)
		}
		// A TTL below PostgreSQL's microsecond is rounded up, never down.
		raw := open(t, table)
		g, err := raw.Acquire(ctx, &driver.Request{Name: n + "/odd", Owner: "o", Mode: driver.Exclusive, TTL: time.Second + 1, Host: "h"})
		if err != nil {
			t.Fatal(err)
		}
		if d := g.Expires.Sub(g.Renewed); d != time.Second+time.Microsecond {
			t.Errorf("TTL 1s+1ns gave an expiry %v after the grant, want 1.000001s", d)
		}
		if _, err := raw.Release(ctx, []driver.Key{{Name: n + "/odd", Owner: "o"}}); err != nil {
			t.Fatal(err)
		}
		// A refused request says when the first holder expires.
		_, err = raw.Acquire(ctx, &driver.Request{Name: n, Owner: "other", Mode: driver.Exclusive, TTL: time.Second})
		var busy *driver.Busy
		if !errors.As(err, &busy) || busy.After <= 0 || busy.After > 1500*time.Millisecond {
			t.Errorf("Acquire of a held name: %v (%+v), want Busy with After in (0, 1.5s]", err, busy)
		}
		// Re-acquire by the owner extends; in another mode it is refused.
		g2, err := raw.Acquire(ctx, &driver.Request{Name: n, Owner: la.Owner(), Mode: driver.Exclusive, TTL: time.Second})
		if err != nil || !g2.Extended || g2.Token != la.Token() || !g2.Created.Equal(h.Created) {
			t.Errorf("re-acquire = %+v, %v; want Extended with token %d", g2, err, la.Token())
		}
		if _, err := raw.Acquire(ctx, &driver.Request{Name: n, Owner: la.Owner(), Mode: driver.Shared, TTL: time.Second}); !errors.Is(err, driver.ErrModeConflict) {
			t.Errorf("re-acquire in shared mode: %v, want ErrModeConflict", err)
		}
		// Empty batches are fine, and a batch answers per key, in order.
		if gs, err := raw.Renew(ctx, nil); err != nil || len(gs) != 0 {
			t.Errorf("Renew(nil) = %v, %v", gs, err)
		}
		gs, err := raw.Renew(ctx, []driver.Hold{{Name: n, Owner: "nobody", TTL: time.Second}, {Name: n, Owner: la.Owner(), TTL: 2 * time.Second}})
		if err != nil || len(gs) != 2 || gs[0] != nil || gs[1] == nil || gs[1].Token != la.Token() {
			t.Errorf("Renew batch = %+v, %v", gs, err)
		}
		held, err := raw.Release(ctx, []driver.Key{{Name: n, Owner: "nobody"}, {Name: n, Owner: la.Owner()}, {Name: n, Owner: la.Owner()}})
		if err != nil || len(held) != 3 || held[0] || !held[1] || held[2] {
			t.Errorf("Release batch = %v, %v; want [false true false]", held, err)
		}
	})
}

// A store made by New over the caller's pool sets itself up on first use
// and leaves the pool open when closed.
func TestNewWithPool(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		p := pool(t)
		s, err := postgres.New(p, &postgres.Options{Table: freshTable(t)})
		if err != nil {
			t.Fatal(err)
		}
		c := client(t, s, nil)
		l, err := c.TryLock(ctx, "new", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: "x", Owner: "o", Mode: driver.Exclusive, TTL: time.Second}); !errors.Is(err, postgres.ErrClosed) {
			t.Errorf("Acquire after Close: %v, want ErrClosed", err)
		}
		if err := p.Ping(ctx); err != nil {
			t.Errorf("the caller's pool was closed: %v", err)
		}
		if _, err := postgres.New(nil, nil); err == nil {
			t.Error("New(nil) did not fail")
		}
	})
}

func TestConcurrentCreate(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		stores := make([]*postgres.Store, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stores[i], errs[i] = postgres.Open(ctx, dsn(t, "pool_max_conns=2"), &postgres.Options{Table: tb})
			}()
		}
		wg.Wait()
		for i, s := range stores {
			if errs[i] != nil {
				t.Errorf("Open %d: %v", i, errs[i])
				continue
			}
			defer s.Close()
		}
		if t.Failed() {
			return
		}
		var last uint64
		for i, s := range stores {
			g, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: fmt.Sprint("o", i), Mode: driver.Exclusive, TTL: time.Minute})
			if err != nil {
				t.Fatalf("store %d: Acquire: %v", i, err)
			}
			if g.Token <= last {
				t.Errorf("store %d: token %d after %d", i, g.Token, last)
			}
			last = g.Token
			if _, err := s.Release(ctx, []driver.Key{{Name: "n", Owner: fmt.Sprint("o", i)}}); err != nil {
				t.Fatal(err)
			}
		}
		// Reopening an up-to-date table runs no DDL; running the DDL again is
		// harmless.
		script, err := postgres.DDL(&postgres.Options{Table: tb})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool(t).Exec(ctx, script); err != nil {
			t.Errorf("running the DDL again: %v", err)
		}
	})
}

func TestInvalidOptions(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		for _, tb := range []string{"Locks", "1locks", "locks-x", "locks;drop table x", strings.Repeat("a", 42), "locks\"", "a b"} {
			_, err := postgres.Open(ctx, dsn(t), &postgres.Options{Table: tb})
			if err == nil || !strings.Contains(err.Error(), "invalid table name") {
				t.Errorf("Open with table %q: %v, want an invalid table name error", tb, err)
			}
			if _, err := postgres.DDL(&postgres.Options{Table: tb}); err == nil {
				t.Errorf("DDL with table %q did not fail", tb)
			}
			if _, err := postgres.New(pool(t), &postgres.Options{Table: tb}); err == nil {
				t.Errorf("New with table %q did not fail", tb)
			}
		}
		if _, err := postgres.Open(ctx, dsn(t), &postgres.Options{Schema: "Public"}); err == nil || !strings.Contains(err.Error(), "invalid schema name") {
			t.Errorf("Open with schema Public: %v", err)
		}
		if _, err := postgres.Open(ctx, "postgres://%zz", nil); err == nil {
			t.Error("Open with a bad connection string did not fail")
		}
	})
}

func TestURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		for _, tc := range []struct {
			in, out string
			opts    postgres.Options
			bad     bool
		}{
			{in: "postgres://u@h/db?sslmode=disable&baton_table=t1", out: "postgres://u@h/db?sslmode=disable", opts: postgres.Options{Table: "t1"}},
			{in: "postgresql://u:p%40ss@h:5433/db?baton_schema=s&baton_nocreate=1&application_name=x",
				out: "postgresql://u:p%40ss@h:5433/db?application_name=x", opts: postgres.Options{Schema: "s", NoCreate: true}},
			{in: "postgres://h/db", out: "postgres://h/db"},
			{in: "postgres://h/db?baton_tabel=x", bad: true},
			{in: "postgres://h/db?baton_nocreate=maybe", bad: true},
		} {
			u, err := url.Parse(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			out, o, err := postgres.ParseURL(u)
			if tc.bad {
				if err == nil {
					t.Errorf("ParseURL(%s) did not fail", tc.in)
				}
				continue
			}
			if err != nil || out != tc.out || *o != tc.opts {
				t.Errorf("ParseURL(%s) = %s, %+v, %v; want %s, %+v", tc.in, out, o, err, tc.out, tc.opts)
			}
		}

		// Through baton.Open: the table parameter picks the table and does not
		// reach the server (which would refuse an unknown parameter).
		tb := freshTable(t)
		c, err := baton.Open(ctx, dsn(t, "baton_table="+tb), nil)
		if err != nil {
			t.Fatalf("baton.Open: %v", err)
		}
		defer c.Close()
		l, err := c.TryLock(ctx, "via-url", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		var n int
		if err := pool(t).QueryRow(ctx, holdsSQL(pgx.Identifier{tb}.Sanitize(), pgx.Identifier{tb + "_holds"}.Sanitize(), "via-url")).Scan(&n); err != nil || n != 1 {
			t.Errorf("holds in table %s: %d, %v; want 1", tb, n, err)
		}
		c2, err := baton.Open(ctx, strings.Replace(dsn(t, "baton_table="+tb), "postgres://", "postgresql://", 1), nil)
		if err != nil {
			t.Fatalf("baton.Open(postgresql://): %v", err)
		}
		defer c2.Close()
		if _, err := c2.TryLock(ctx, "via-url", nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("postgresql:// URL does not see the same lock: %v", err)
		}
	})
}

func TestNoCreate(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		_, err := postgres.Open(ctx, dsn(t), &postgres.Options{Table: tb, NoCreate: true})
		if err == nil || !strings.Contains(err.Error(), "is missing") || !strings.Contains(err.Error(), "postgres.DDL") {
			t.Fatalf("Open with NoCreate on a missing table: %v, want a clear error", err)
		}
		// The lazy store of New reports the same on first use.
		s, err := postgres.New(pool(t), &postgres.Options{Table: tb, NoCreate: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.List(ctx, &driver.Filter{}); err == nil || !strings.Contains(err.Error(), "is missing") {
			t.Errorf("first use of a New store with NoCreate on a missing table: %v", err)
		}
		script, err := postgres.DDL(&postgres.Options{Table: tb})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pool(t).Exec(ctx, script); err != nil {
			t.Fatalf("running the DDL: %v", err)
		}
		s2, err := postgres.Open(ctx, dsn(t), &postgres.Options{Table: tb, NoCreate: true})
		if err != nil {
			t.Fatalf("Open with NoCreate after the DDL: %v", err)
		}
		defer s2.Close()
		if _, err := s2.Acquire(ctx, &driver.Request{Name: "n", Owner: "o", Mode: driver.Exclusive, TTL: time.Second}); err != nil {
			t.Errorf("Acquire: %v", err)
		}
		if _, err := s.List(ctx, &driver.Filter{}); err != nil {
			t.Errorf("the New store after the DDL: %v", err)
		}
		// An outdated table is refused too.
		if _, err := pool(t).Exec(ctx, "COMMENT ON TABLE "+pgx.Identifier{tb}.Sanitize()+" IS 'baton postgres store, schema 0'"); err != nil {
			t.Fatal(err)
		}
		if _, err := postgres.Open(ctx, dsn(t), &postgres.Options{Table: tb, NoCreate: true}); err == nil || !strings.Contains(err.Error(), "schema 0") {
			t.Errorf("Open with NoCreate on an outdated table: %v", err)
		}
		// Without NoCreate, it is brought up to date.
		s3, err := postgres.Open(ctx, dsn(t), &postgres.Options{Table: tb})
		if err != nil {
			t.Fatalf("Open of an outdated table: %v", err)
		}
		s3.Close()
	})
}

// A schema other than the current one.
func TestSchema(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		schema := table + "_s"
		p := pool(t)
		if _, err := p.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if _, err := p.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
				t.Error(err)
			}
		})
		s, err := postgres.Open(ctx, dsn(t), &postgres.Options{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		c := client(t, s, nil)
		l, err := c.TryLock(ctx, "in-schema", nil)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := p.QueryRow(ctx, holdsSQL(schema+".baton_locks", schema+".baton_locks_holds", "in-schema")).Scan(&n); err != nil || n != 1 {
			t.Errorf("holds in %s.baton_locks_holds: %d, %v", schema, n, err)
		}
		l.Release(ctx)
	})
}

// holdsSQL counts the holds of name in a lock table: in the holds table,
// or inline in the name's row.
func holdsSQL(counters, holds, name string) string {
	return "SELECT (SELECT count(*) FROM " + holds + " WHERE name = '" + name + "' AND NOT queued) + " +
		"(SELECT count(*) FROM " + counters + " WHERE name = '" + name + "' AND xo IS NOT NULL)"
}

// counterTable creates a table for InLockedTx's functions to write to.
func counterTable(t *testing.T, p *pgxpool.Pool) string {
	t.Helper()
	name := pgx.Identifier{freshTable(t) + "_counter"}.Sanitize()
	if _, err := p.Exec(ctxFor(t, 10*time.Second), "CREATE TABLE "+name+" (id int PRIMARY KEY, n int NOT NULL); INSERT INTO "+name+" VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Exec(context.Background(), "DROP TABLE "+name) })
	return name
}

// InLockedTx excludes leases and other transactions on the name, and its
// tokens interleave with the leases' in one increasing sequence.
func TestInLockedTxExcludes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		p := pool(t)
		counter := counterTable(t, p)
		n := "tx/" + t.Name()
		var h drivertest.History
		var inside sync.Mutex // TryLock fails if another section runs
		overlap := func(who string) func() {
			if !inside.TryLock() {
				t.Errorf("%s entered while another section ran", who)
				return func() {}
			}
			return inside.Unlock
		}
		const workers, rounds = 3, 8
		var wg sync.WaitGroup
		for i := 0; i < workers; i++ {
			c := client(t, open(t, table), nil)
			wg.Add(1)
			go func() { // lease holders
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					call := time.Now()
					l, err := c.Lock(ctx, n, nil)
					if err != nil {
						t.Errorf("Lock: %v", err)
						return
					}
					granted := time.Now()
					done := overlap("a lease")
					time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
					end := drivertest.End(l)
					done()
					l.Release(ctx)
					h.Add(drivertest.Section{Client: i, Mode: baton.Exclusive, Token: l.Token(), Call: call, Granted: granted, End: end})
				}
			}()
			s := open(t, table)
			wg.Add(1)
			go func() { // transactions
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					call := time.Now()
					err := s.InLockedTx(ctx, n, func(ctx context.Context, tx pgx.Tx, token uint64) error {
						granted := time.Now()
						done := overlap("a transaction")
						defer done()
						var v int
						if err := tx.QueryRow(ctx, "SELECT n FROM "+counter+" WHERE id = 1").Scan(&v); err != nil {
							return err
						}
						time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
						if _, err := tx.Exec(ctx, "UPDATE "+counter+" SET n = $1 WHERE id = 1", v+1); err != nil {
							return err
						}
						h.Add(drivertest.Section{Client: workers + i, Mode: baton.Exclusive, Token: token, Call: call, Granted: granted, End: time.Now()})
						return nil
					})
					if err != nil {
						t.Errorf("InLockedTx: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range h.Check() {
			t.Error(err)
		}
		if h.Len() != 2*workers*rounds {
			t.Errorf("%d sections, want %d", h.Len(), 2*workers*rounds)
		}
		var v int
		if err := p.QueryRow(ctx, "SELECT n FROM "+counter+" WHERE id = 1").Scan(&v); err != nil || v != workers*rounds {
			t.Errorf("counter = %d, %v; want %d (a lost update means two transactions overlapped)", v, err, workers*rounds)
		}
	})
}

// InLockedTx waits for a lease holder, keeps leases out while it runs,
// and frees the name when it rolls back.
func TestInLockedTxWaitsAndRollsBack(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		p := pool(t)
		counter := counterTable(t, p)
		s := open(t, table)
		a := client(t, open(t, table), nil)
		n := "tx/" + t.Name()

		la, err := a.Lock(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan uint64, 1)
		result := make(chan error, 1)
		go func() {
			result <- s.InLockedTx(ctx, n, func(ctx context.Context, tx pgx.Tx, token uint64) error {
				started <- token
				// No lease is granted while the transaction runs: TryLock waits
				// in the database for the row lock, until its context ends.
				tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				if l, err := a.TryLock(tctx, n, nil); err == nil {
					l.Release(ctx)
					t.Errorf("a lease was granted (token %d) during the transaction", l.Token())
				}
				_, err := tx.Exec(ctx, "UPDATE "+counter+" SET n = 1")
				return err
			})
		}()
		select {
		case tok := <-started:
			t.Fatalf("the transaction started (token %d) while a lease held the name", tok)
		case <-time.After(300 * time.Millisecond):
		}
		if hs, err := a.Status(ctx, &baton.Filter{Name: n, Queued: true}); err != nil || len(hs) != 2 || !hs[1].Queued || !strings.HasPrefix(hs[1].Owner, "tx-") {
			t.Errorf("Status while the transaction waits = %+v, %v; want the lease and a queued tx-…", hs, err)
		}
		la.Release(ctx)
		tok := <-started
		if tok <= la.Token() {
			t.Errorf("transaction token %d not above the lease's %d", tok, la.Token())
		}
		if err := <-result; err != nil {
			t.Fatalf("InLockedTx: %v", err)
		}
		lb, err := a.TryLock(ctx, n, nil)
		if err != nil {
			t.Fatalf("TryLock after the transaction: %v", err)
		}
		if lb.Token() <= tok {
			t.Errorf("lease token %d not above the transaction's %d", lb.Token(), tok)
		}
		lb.Release(ctx)

		// A failing function rolls back; its token is not handed out again and
		// the name is free at once.
		boom := errors.New("boom")
		var rolled uint64
		err = s.InLockedTx(ctx, n, func(ctx context.Context, tx pgx.Tx, token uint64) error {
			rolled = token
			if _, err := tx.Exec(ctx, "UPDATE "+counter+" SET n = 100"); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("InLockedTx with a failing function: %v, want its error", err)
		}
		var v int
		if err := p.QueryRow(ctx, "SELECT n FROM "+counter).Scan(&v); err != nil || v != 1 {
			t.Errorf("counter = %d, %v; want 1 (the failed transaction rolled back)", v, err)
		}
		if hs, err := a.Status(ctx, &baton.Filter{Name: n, Queued: true, Expired: true}); err != nil || len(hs) != 0 {
			t.Errorf("Status after a rolled back transaction = %+v, %v; want nothing", hs, err)
		}
		lc, err := a.TryLock(ctx, n, nil)
		if err != nil {
			t.Fatalf("TryLock after a rolled back transaction: %v", err)
		}
		if lc.Token() <= rolled || rolled <= lb.Token() {
			t.Errorf("tokens %d (lease), %d (rolled back), %d (lease) not increasing", lb.Token(), rolled, lc.Token())
		}
		lc.Release(ctx)

		// A cancelled wait leaves the queue.
		ld, err := a.Lock(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = s.InLockedTx(wctx, n, func(context.Context, pgx.Tx, uint64) error { return nil })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("InLockedTx with an expiring context: %v", err)
		}
		if hs, err := a.Status(ctx, &baton.Filter{Name: n, Queued: true}); err != nil || len(hs) != 1 {
			t.Errorf("Status after a cancelled InLockedTx = %+v, %v; want the lease alone", hs, err)
		}
		ld.Release(ctx)

		if err := s.InLockedTx(ctx, "", func(context.Context, pgx.Tx, uint64) error { return nil }); err == nil {
			t.Error("InLockedTx with an empty name did not fail")
		}
		if err := s.InLockedTx(ctx, "a\nb", func(context.Context, pgx.Tx, uint64) error { return nil }); err == nil {
			t.Error("InLockedTx with a newline in the name did not fail")
		}
	})
}

// restartServer restarts PostgreSQL through the project's server script.
func restartServer(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	servers(t, "restart")
	return time.Since(start)
}

// servers runs scripts/servers with args and the name of t's server.
func servers(t *testing.T, args ...string) {
	t.Helper()
	drivertest.ServerCommand(t, serversEnv, args...)
}

// TestRestart restarts the server during holds: a lease whose TTL is
// shorter than the outage is reported lost before anyone else is granted
// the name; a lease whose TTL is longer survives, its keepalive retrying
// until the pool reconnects; the listener reconnects too.
func TestRestart(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		t.Run("ShortTTL", func(t *testing.T) {
			ctx := ctxFor(t, 60*time.Second)
			var events sync.Map
			a := client(t, open(t, table), &baton.Options{OnEvent: func(e baton.Event) { events.Store(e.Kind, e) }})
			b := client(t, open(t, table), nil)
			n := "restart/" + t.Name()
			call := time.Now()
			la, err := a.Lock(ctx, n, &baton.LockOptions{TTL: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			grantedA := time.Now()
			lostAt := make(chan time.Time, 1)
			go func() {
				<-la.Done()
				lostAt <- time.Now()
			}()
			type res struct {
				l             *baton.Lease
				call, granted time.Time
				errs          int
			}
			bres := make(chan res, 1)
			go func() { // b waits through the restart, retrying when the store fails
				var r res
				// One owner for every attempt: a failed attempt could not leave
				// the queue while the server was down, and the next attempt takes
				// its place back instead of queueing behind it.
				o := &baton.LockOptions{Owner: baton.NewOwner()}
				for ctx.Err() == nil {
					r.call = time.Now()
					l, err := b.Lock(ctx, n, o)
					if err == nil {
						r.l, r.granted = l, time.Now()
						break
					}
					r.errs++
					time.Sleep(20 * time.Millisecond)
				}
				bres <- r
			}()
			time.Sleep(50 * time.Millisecond) // b is waiting
			took := restartServer(t)
			rb := <-bres
			if rb.l == nil {
				t.Fatal("b was never granted the lock")
			}
			t.Logf("restart took %v; b's Lock failed %d times during it; b granted %v after a's Lock", took, rb.errs, rb.granted.Sub(call))
			var lost time.Time
			select {
			case lost = <-lostAt:
			default:
				t.Fatalf("b was granted at %v while a's lease (TTL 100ms) had not ended: Err %v", rb.granted, la.Err())
			}
			if !errors.Is(la.Err(), baton.ErrLeaseLost) {
				t.Errorf("a's Err = %v, want ErrLeaseLost", la.Err())
			}
			if _, ok := events.Load(baton.EventLost); !ok {
				t.Error("no lost event for a")
			}
			if !lost.Before(rb.granted) {
				t.Errorf("a was told at %v that its lease was lost, after b was granted at %v", lost, rb.granted)
			}
			if rb.l.Token() <= la.Token() {
				t.Errorf("b's token %d not above a's %d", rb.l.Token(), la.Token())
			}
			var h drivertest.History
			h.Add(drivertest.Section{Client: 0, Mode: baton.Exclusive, Token: la.Token(), Call: call, Granted: grantedA, End: la.Deadline()})
			h.Add(drivertest.Section{Client: 1, Mode: baton.Exclusive, Token: rb.l.Token(), Call: rb.call, Granted: rb.granted, End: drivertest.End(rb.l)})
			for _, err := range h.Check() {
				t.Error(err)
			}
			if err := rb.l.Release(ctx); err != nil {
				t.Errorf("b's Release after the restart: %v", err)
			}
		})

		t.Run("LongTTL", func(t *testing.T) {
			ctx := ctxFor(t, 60*time.Second)
			var failures atomic.Int32
			renewed := make(chan struct{}, 1)
			a := client(t, open(t, table), &baton.Options{OnEvent: func(e baton.Event) {
				switch e.Kind {
				case baton.EventRenewFailed:
					failures.Add(1)
				case baton.EventRenewed:
					select {
					case renewed <- struct{}{}:
					default:
					}
				}
			}})
			sb := open(t, table)
			b := client(t, sb, nil)
			n := "restart/" + t.Name()
			ttl := 3 * time.Second // renewed every second
			la, err := a.Lock(ctx, n, &baton.LockOptions{TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			// b's listener runs before the restart.
			w, err := sb.Watch(ctx, &driver.Request{Name: n, Owner: "w"})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			drivertest.Eventually(t, 10*time.Second, "b's listener", func() bool { return postgres.Listens(sb) >= 1 })

			// Restart shortly before a renewal is due, so that it meets the outage.
			select {
			case <-renewed:
			default:
			}
			<-renewed
			time.Sleep(ttl/3 - 200*time.Millisecond)
			took := restartServer(t)
			time.Sleep(ttl + ttl/2) // long enough for the lease to end if keepalive had given up
			if err := la.Err(); err != nil {
				t.Fatalf("a's lease (TTL %v) did not survive a restart of %v: %v", ttl, took, err)
			}
			// A renewal that meets the outage fails and keepalive tries again; a
			// short outage may also be hidden by the store's own retries (on
			// "shutting down" and "starting up"), so failures are not required.
			t.Logf("restart took %v; %d failed renewals", took, failures.Load())
			if _, err := b.TryLock(ctx, n, nil); !errors.Is(err, baton.ErrLocked) {
				t.Errorf("b's TryLock after the restart: %v, want ErrLocked", err)
			}

			// The listener reconnected, and notifications reach b again.
			drivertest.Eventually(t, 20*time.Second, "b's listener to reconnect", func() bool { return postgres.Listens(sb) >= 2 })
			dctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			w.Wait(dctx) // the reconnection woke every waiter
			cancel()
			req := &driver.Request{Name: n, Owner: "w", Mode: driver.Exclusive, TTL: time.Minute, Queue: true, QueueTTL: time.Minute}
			if _, err := sb.Acquire(ctx, req); !errors.Is(err, driver.ErrNotGranted) {
				t.Fatalf("b's Acquire while a holds: %v", err)
			}
			if err := la.Release(ctx); err != nil {
				t.Fatalf("a's Release after the restart: %v", err)
			}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := w.Wait(wctx); err != nil {
				t.Fatalf("b's watch was not woken by a's release after the restart: %v", err)
			}
			g, err := sb.Acquire(ctx, req)
			if err != nil {
				t.Fatalf("b's Acquire after a's release: %v", err)
			}
			if g.Token <= la.Token() {
				t.Errorf("b's token %d not above a's %d", g.Token, la.Token())
			}
			sb.Release(ctx, []driver.Key{{Name: n, Owner: "w"}})
		})
	})
}

// TestModel checks the store's PL/pgSQL rules against lockstate's, with
// the hand-off to queued requests (lockstate.Promote) that every call
// letting an entry go does. After each step, a name's row must be busy
// exactly when the name has entries in the holds table: the fast path
// grants a name that is not busy without looking there.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		p := pool(t)
		q := fmt.Sprintf("SELECT k.busy, EXISTS (SELECT 1 FROM %s_holds e WHERE e.name = k.name) FROM %s k WHERE k.name = $1", tb, tb)
		drivertest.Model(t, drivertest.ModelConfig{
			Open:     func(t testing.TB) driver.Store { return open(t, tb) },
			HandsOff: true,
			AfterStep: func(t *testing.T, step int, name string, _ map[string]uint64) {
				var busy, entries bool
				if err := p.QueryRow(context.Background(), q, name).Scan(&busy, &entries); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					t.Fatal(err)
				}
				if busy != entries {
					t.Fatalf("step %d: %s is busy %v, has entries %v", step, name, busy, entries)
				}
			},
		})
	})
}

// An acquire whose context ends while the server runs it returns the
// server's outcome rather than the context's error: the statement commits
// all the same, and a grant nobody learned of would block the name.
func TestAcquireOutlivesItsContext(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, freshTable(t))
		n := "outlive/" + t.Name()
		locked, done := make(chan struct{}), make(chan error, 1)
		go func() {
			done <- s.InLockedTx(ctx, n, func(ctx context.Context, tx pgx.Tx, token uint64) error {
				close(locked)
				time.Sleep(400 * time.Millisecond) // the name's row stays locked past actx's end
				return nil
			})
		}()
		<-locked
		actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		g, err := s.Acquire(actx, &driver.Request{Name: n, Owner: "outlive", Mode: driver.Exclusive, TTL: 10 * time.Second})
		if err != nil {
			t.Fatalf("Acquire = %v, want the grant made once the row was free", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "outlive"}})
		if err != nil || !held[0] {
			t.Fatalf("Release of the grant (token %d) = %v, %v", g.Token, held, err)
		}
	})
}

// queryCounter counts the queries of a pool's connections while counting
// is set.
type queryCounter struct {
	counting atomic.Bool
	n        atomic.Int64
}

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if c.counting.Load() {
		c.n.Add(1)
	}
	return ctx
}

func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestHandOffWithoutAsking: the release of a name somebody waits for hands
// it over in the server, and the waiter, told so by the notification,
// takes the hold without a call of its own, with the next token.
func TestHandOffWithoutAsking(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		holder := open(t, tb)
		cfg, err := pgxpool.ParseConfig(dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		var qc queryCounter
		cfg.ConnConfig.Tracer = &qc
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		ws, err := postgres.New(p, &postgres.Options{Table: tb})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		waiter := client(t, ws, &baton.Options{TTL: 10 * time.Second})
		n := "handoff/" + t.Name()
		g, err := holder.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := lockBehind(ctx, t, holder, waiter, n)
		time.Sleep(50 * time.Millisecond) // the waiter blocks in its wait
		qc.counting.Store(true)
		if ok, err := holder.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !ok[0] {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		l := <-got
		qc.counting.Store(false)
		if l == nil {
			return
		}
		defer l.Release(ctx)
		if l.Token() != g.Token+1 {
			t.Errorf("waiter's token %d, want %d", l.Token(), g.Token+1)
		}
		if c := qc.n.Load(); c != 0 {
			t.Errorf("the waiter sent %d queries after the release, want 0", c)
		}
	})
}

// TestVacuumsAfterQueuedRequests: a Store that queues requests looks at
// the holds table's dead rows now and then, and vacuums the table once
// they pile up, so that a contended name's dead queue entries do not
// slow its lookups until autovacuum comes by.
func TestVacuumsAfterQueuedRequests(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		defer postgres.SetVacuum(10, 10)()
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		n := "vacuum/" + t.Name()
		if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		p := pool(t)
		vacuums := func() int64 {
			var c int64
			err := p.QueryRow(ctx, "SELECT pg_stat_clear_snapshot() IS NULL, vacuum_count FROM pg_stat_user_tables WHERE relid = $1::regclass",
				tb+"_holds").Scan(new(bool), &c)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		before := vacuums()
		// Queue entries that leave again: dead rows. (The server's
		// statistics count them within a second or so.)
		for i := 0; vacuums() == before; i++ {
			if ctx.Err() != nil {
				t.Fatal("the holds table was not vacuumed")
			}
			w := fmt.Sprintf("w%d", i)
			_, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: w, Mode: driver.Exclusive,
				TTL: time.Minute, Queue: true, QueueTTL: time.Minute})
			if !errors.Is(err, driver.ErrNotGranted) {
				t.Fatalf("Acquire = %v, want ErrNotGranted", err)
			}
			if _, err := s.Release(ctx, []driver.Key{{Name: n, Owner: w}}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// TestHandedHoldReleasedIsNotTaken: a hold the server handed over to a
// waiter that released it before taking it (an abandoned wait) is not
// taken later by a request of the same owner, from the notification
// remembered, while another owner holds the name.
func TestHandedHoldReleasedIsNotTaken(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		holder, waiter := open(t, tb), open(t, tb)
		n := "handoff/" + t.Name()
		req := func(owner string) *driver.Request {
			return &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: 10 * time.Second,
				Queue: true, QueueTTL: 10 * time.Second}
		}
		if _, err := holder.Acquire(ctx, req("h")); err != nil {
			t.Fatal(err)
		}
		w, err := waiter.Watch(ctx, req("w"))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := waiter.Acquire(ctx, req("w")); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("waiter's Acquire = %v, want ErrNotGranted", err)
		}
		if err := w.Wait(ctx); err != nil { // the listener is up: a wake-up for all
			t.Fatal(err)
		}
		if _, err := holder.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ctx); err != nil { // the hand-off's notification
			t.Fatal(err)
		}
		if _, err := waiter.Release(ctx, []driver.Key{{Name: n, Owner: "w"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Acquire(ctx, req("h2")); err != nil {
			t.Fatal(err)
		}
		if g, err := waiter.Acquire(ctx, req("w")); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("waiter's Acquire while h2 holds = %+v, %v; want ErrNotGranted", g, err)
		}
	})
}

// Release reports a hold whose TTL has run out as not held, whether it
// is its name's only entry (inline in the name's row) or in the holds
// table (a waiter queued behind it), released alone or in a batch.
func TestReleaseOfExpiredHold(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, freshTable(t))
		ttl := 50 * time.Millisecond
		take := func(n, owner string, queue bool) {
			t.Helper()
			_, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: ttl,
				Queue: queue, QueueTTL: 10 * time.Second})
			if queue && errors.Is(err, driver.ErrNotGranted) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, batch := range []bool{false, true} {
			inline, queued := fmt.Sprintf("expired/%v/inline", batch), fmt.Sprintf("expired/%v/queued", batch)
			take(inline, "h", false)
			take(queued, "h", false)
			take(queued, "w", true) // moves h's hold to the holds table
			time.Sleep(3 * ttl)
			keys := [][]driver.Key{{{Name: inline, Owner: "h"}}, {{Name: queued, Owner: "h"}}}
			if batch {
				keys = [][]driver.Key{{{Name: inline, Owner: "h"}, {Name: queued, Owner: "h"}}}
			}
			for _, ks := range keys {
				held, err := s.Release(ctx, ks)
				if err != nil {
					t.Fatal(err)
				}
				for i, h := range held {
					if h {
						t.Errorf("Release of %v, expired: held[%d] = true", ks, i)
					}
				}
			}
		}
	})
}

// lockBehind starts c.Lock of n, whose one holder is there already, and
// returns once the request waits in the queue (as s lists it); the
// channel receives the lease, or nil if Lock failed.
func lockBehind(ctx context.Context, t *testing.T, s driver.Store, c *baton.Client, n string) <-chan *baton.Lease {
	t.Helper()
	got := make(chan *baton.Lease, 1)
	go func() {
		l, err := c.Lock(ctx, n, nil)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for {
		hs, err := s.List(ctx, &driver.Filter{Name: n, Queued: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) == 2 {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A hand-off is told to the Store that queued the request, on its own
// channel, not to every listener of the table: a Store whose waiter waits
// for another name hears nothing of it. A request queued by an earlier
// version of this package (through the acquire without a channel) is told
// on the table's channel, which those versions listen to.
func TestHandOffToItsStoreOnly(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		a, b := open(t, tb), open(t, tb)
		// b listens, for a waiter of another name.
		wb, err := b.Watch(ctx, &driver.Request{Name: "other", Owner: "w", Mode: driver.Exclusive, TTL: 10 * time.Second, Queue: true})
		if err != nil {
			t.Fatal(err)
		}
		defer wb.Close()
		for postgres.Listens(b) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		waiter := client(t, a, &baton.Options{TTL: 10 * time.Second})
		n := "handoff/" + t.Name()
		if _, err := a.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		got := lockBehind(ctx, t, a, waiter, n)
		// The waiter's queued before its Store listens: a release in
		// between is found by the waiter's look once it listens, not
		// heard.
		drivertest.Eventually(t, 10*time.Second, "a's listener", func() bool { return postgres.Listens(a) >= 1 })
		if ok, err := a.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !ok[0] {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		l := <-got
		if l == nil {
			return
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if h := postgres.Heard(a); h == 0 {
			t.Errorf("the waiter's Store heard %d notifications", h)
		}
		if h := postgres.Heard(b); h != 0 {
			t.Errorf("a Store without a waiter of %q heard %d notifications", n, h)
		}

		// An earlier version's request, queued without a channel.
		conn, err := pgx.Connect(ctx, dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{tb}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		var status int16
		if err := conn.QueryRow(ctx, "SELECT o_status FROM "+pgx.Identifier{tb + "_acquire"}.Sanitize()+
			"($1, 'old', 1::smallint, 0, 10000000000, true, 10000000000, 'host', NULL, 0, NULL)", n).Scan(&status); err != nil || status != 2 {
			t.Fatalf("the earlier version's acquire: status %d, %v", status, err)
		}
		if ok, err := a.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !ok[0] {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		nt, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(nt.Payload, "\n"); len(lines) != 2 || lines[0] != n || !strings.HasPrefix(lines[1], "old ") {
			t.Errorf("the table's channel was told %q, want the hand-off to old", nt.Payload)
		}
	})
}

// A hand-off whose lines would not fit in one notification wakes every
// waiter of the name on the table's channel instead: each finds the name
// handed to it when it asks.
func TestHandOffTooLargeWakesAll(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		a := open(t, tb)
		conn, err := pgx.Connect(ctx, dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{tb}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		n := "many/" + t.Name()
		req := func(owner string, mode driver.Mode) *driver.Request {
			return &driver.Request{Name: n, Owner: owner, Mode: mode, TTL: 10 * time.Second, Queue: true, QueueTTL: 10 * time.Second}
		}
		if _, err := a.Acquire(ctx, req("h", driver.Exclusive)); err != nil {
			t.Fatal(err)
		}
		const waiters = 100
		for i := range waiters {
			_, err := a.Acquire(ctx, req(fmt.Sprintf("%060d", i), driver.Shared))
			if !errors.Is(err, driver.ErrNotGranted) {
				t.Fatalf("waiter %d: %v, want ErrNotGranted", i, err)
			}
		}
		if ok, err := a.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !ok[0] {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		nt, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if nt.Payload != n {
			t.Errorf("the table's channel was told %.80q…, want the name alone", nt.Payload)
		}
		hs, err := a.List(ctx, &driver.Filter{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != waiters {
			t.Errorf("%d holders after the hand-off, want %d", len(hs), waiters)
		}
	})
}

// TestReleaseHandsOffToSharedHeads: the release of an exclusive hold
// grants every shared request at the head of the queue, not the first
// one alone (release_one's hand-off takes exclusive heads only).
func TestReleaseHandsOffToSharedHeads(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, freshTable(t))
		n := "shared-heads/" + t.Name()
		req := func(name, owner string, mode driver.Mode) *driver.Request {
			return &driver.Request{Name: name, Owner: owner, Mode: mode, TTL: 10 * time.Second, Queue: true, QueueTTL: 10 * time.Second}
		}
		handOff := func(name string, waiters []string, mode driver.Mode) {
			t.Helper()
			if _, err := s.Acquire(ctx, req(name, "x", driver.Exclusive)); err != nil {
				t.Fatal(err)
			}
			for _, o := range waiters {
				var busy *driver.Busy
				if _, err := s.Acquire(ctx, req(name, o, mode)); !errors.As(err, &busy) {
					t.Fatalf("Acquire(%s) = %v, want busy", o, err)
				}
			}
			if ok, err := s.Release(ctx, []driver.Key{{Name: name, Owner: "x"}}); err != nil || !ok[0] {
				t.Fatalf("Release = %v, %v", ok, err)
			}
		}
		// A first hand-off raises the longest lease to what the next
		// one needs (TestHandOffRaisesMaxTTL), so that it may take the
		// shortest way.
		handOff(n+"/first", []string{"w"}, driver.Exclusive)
		handOff(n, []string{"s1", "s2"}, driver.Shared)
		hs, err := s.List(ctx, &driver.Filter{Name: n})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			if !h.Queued {
				got = append(got, h.Owner)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"s1", "s2"}) {
			t.Errorf("holders after the release: %v, want s1 and s2", got)
		}
	})
}

// TestHandOffRaisesMaxTTL: a hold handed over lasts HandOffExtra longer
// than its TTL; granted without a flush, it must be one the grace period
// after a crash covers, so the longest such lease is raised first.
func TestHandOffRaisesMaxTTL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		n := "raise/" + t.Name()
		req := func(owner string) *driver.Request {
			return &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: 10 * time.Second, Queue: true, QueueTTL: 10 * time.Second}
		}
		if _, err := s.Acquire(ctx, req("h")); err != nil {
			t.Fatal(err)
		}
		var busy *driver.Busy
		if _, err := s.Acquire(ctx, req("w")); !errors.As(err, &busy) {
			t.Fatalf("Acquire(w) = %v, want busy", err)
		}
		if ok, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !ok[0] {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		var lease time.Duration
		var maxTTL int64
		err := pool(t).QueryRow(ctx, fmt.Sprintf(`SELECT (extract(epoch FROM e.expires - e.renewed) * 1000000)::bigint * 1000, p.max_ttl
			FROM %s_holds e, %s_epochs p WHERE e.name = $1 AND e.owner = 'w' AND NOT e.queued`, tb, tb), n).Scan(&lease, &maxTTL)
		if err != nil {
			t.Fatal(err)
		}
		if lease <= 10*time.Second || lease > time.Duration(maxTTL)+time.Microsecond {
			t.Errorf("the hold handed over lasts %v; the longest lease recorded is %v", lease, time.Duration(maxTTL))
		}
	})
}
