package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// table is this run's lock table, dropped when the run ends, so that runs
// do not see each other's locks.
var table = fmt.Sprintf("baton_t_%08x", rand.Uint32())

var (
	dropMu     sync.Mutex
	dropTables = []string{table}
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range append(drivertest.Servers(serversEnv), drivertest.Servers(sysdateEnv)...) {
		drop(s.URL, dropTables...)
	}
	os.Exit(code)
}

// serversEnv lists the servers the tests run on (scripts/servers env).
const serversEnv = "BATON_TEST_MYSQL"

// sysdateEnv lists the servers started with --sysdate-is-now.
const sysdateEnv = "BATON_TEST_MYSQL_SYSDATE"

// dsn is the DSN of the server t runs on.
func dsn(t testing.TB) string {
	t.Helper()
	return drivertest.ServerOf(t, serversEnv).URL
}

func drop(dsn string, tables ...string) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dropping test tables: %v\n", err)
		return
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tb := range tables {
		for _, q := range mysql.DropSQL(tb) {
			if _, err := db.ExecContext(ctx, q); err != nil {
				fmt.Fprintf(os.Stderr, "dropping test table %s: %v\n", tb, err)
			}
		}
	}
}

// freshTable returns a table name of its own for t, dropped at the end of
// the run.
func freshTable(t testing.TB) string {
	dropMu.Lock()
	defer dropMu.Unlock()
	// Numbered, not drawn at random: a run makes many tables, and two of
	// them sharing a name made a durable test open a fast table.
	tb := fmt.Sprintf("%s_%04x", table, len(dropTables))
	dropTables = append(dropTables, tb)
	return tb
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// open returns a new store of table, with a pool of its own.
func open(t testing.TB, tb string) *mysql.Store {
	t.Helper()
	return openWith(t, &mysql.Options{Table: tb})
}

// openWith returns a new store with o, with a pool of its own.
func openWith(t testing.TB, o *mysql.Options) *mysql.Store {
	t.Helper()
	return openAt(t, dsn(t), o)
}

// openAt returns a new store on the server of url, with o.
func openAt(t testing.TB, url string, o *mysql.Options) *mysql.Store {
	t.Helper()
	s, err := mysql.Open(ctxFor(t, 30*time.Second), url, o)
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

func rawDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return open(t, table) },
		})
	})
}

func TestBasic(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		sa := open(t, table)
		a := client(t, sa, nil)
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
		if mysql.HeldBells(sa) != 1 {
			t.Errorf("%d bells held while holding one lock, want 1", mysql.HeldBells(sa))
		}
		if err := la.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if mysql.HeldBells(sa) != 0 {
			t.Errorf("%d bells held after the release, want 0", mysql.HeldBells(sa))
		}
	})
}

// TestNamesAreBytes checks that names differing only in case, trailing
// spaces or accents are different locks, and come back byte for byte.
func TestNamesAreBytes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		a := client(t, open(t, table), nil)
		b := client(t, open(t, table), nil)
		base := "bytes/" + t.Name() + "/"
		names := []string{"x", "X", "x ", "x  ", "e", "é", "E", "ß", "ss", "a\u0301", "á"}
		var ls []*baton.Lease
		for i, n := range names {
			c := a
			if i%2 == 1 {
				c = b
			}
			l, err := c.TryLock(ctx, base+n, nil)
			if err != nil {
				t.Fatalf("TryLock(%q) after %q: %v: the names collide", base+n, names[:i], err)
			}
			ls = append(ls, l)
		}
		hs, err := a.Status(ctx, &baton.Filter{Prefix: base})
		if err != nil || len(hs) != len(names) {
			t.Fatalf("Status = %d holds, %v; want %d", len(hs), err, len(names))
		}
		seen := map[string]bool{}
		for _, h := range hs {
			seen[h.Name] = true
		}
		for _, n := range names {
			if !seen[base+n] {
				t.Errorf("Status lost name %q", base+n)
			}
			hs, err := a.Status(ctx, &baton.Filter{Name: base + n})
			if err != nil || len(hs) != 1 || hs[0].Name != base+n {
				t.Errorf("Status(%q) = %+v, %v", base+n, hs, err)
			}
		}
		for _, l := range ls {
			if err := l.ReleaseStrict(ctx); err != nil {
				t.Errorf("release %q: %v", l.Name(), err)
			}
		}
	})
}

func TestConcurrentFirstOpen(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		ctx := ctxFor(t, 60*time.Second)
		stores := make([]*mysql.Store, 8)
		errs := make([]error, 8)
		var wg sync.WaitGroup
		for i := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				stores[i], errs[i] = mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb})
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
			} else {
				t.Cleanup(func() { stores[i].Close() })
			}
		}
		if t.Failed() {
			return
		}
		// All of them work on the same table.
		var last uint64
		for i, s := range stores {
			g, err := s.Acquire(ctx, &driver.Request{Name: "first-open", Owner: fmt.Sprint("o", i), Mode: driver.Exclusive, TTL: time.Minute})
			if err != nil {
				t.Fatalf("store %d: Acquire: %v", i, err)
			}
			if g.Token <= last {
				t.Errorf("store %d: token %d not above %d", i, g.Token, last)
			}
			last = g.Token
			if held, err := s.Release(ctx, []driver.Key{{Name: "first-open", Owner: fmt.Sprint("o", i)}}); err != nil || !held[0] {
				t.Fatalf("store %d: Release = %v, %v", i, held, err)
			}
		}
	})
}

func TestInvalidTable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		for _, tb := range []string{"Locks", "1locks", "my-locks", "locks;drop", "a b", strings.Repeat("x", 42), "`x`"} {
			_, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb})
			if err == nil || !strings.Contains(err.Error(), "invalid table name") {
				t.Errorf("Open with table %q: %v, want an invalid table name error", tb, err)
			}
			if _, err := mysql.New(rawDB(t), &mysql.Options{Table: tb}); err == nil || !strings.Contains(err.Error(), "invalid table name") {
				t.Errorf("New with table %q: %v, want an invalid table name error", tb, err)
			}
			if _, err := mysql.DDL(&mysql.Options{Table: tb}); err == nil {
				t.Errorf("DDL(%q) succeeded", tb)
			}
		}
		if _, _, err := mysql.ParseURL("mysql://u@h/db?baton_table=Bad"); err == nil || !strings.Contains(err.Error(), "invalid table name") {
			t.Errorf("ParseURL with baton_table=Bad: %v", err)
		}
	})
}

func TestParseURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, tc := range []struct {
			url      string
			user     string
			pass     string
			net      string
			addr     string
			db       string
			table    string
			nocreate bool
			reclaim  time.Duration
			durable  bool
			maxGrace time.Duration
			check    func(c *mysqldrv.Config) string
		}{
			{url: "mysql://baton:baton@127.0.0.1:3306/baton_test", user: "baton", pass: "baton", net: "tcp", addr: "127.0.0.1:3306", db: "baton_test"},
			{url: "mariadb://app@db.example.com/app", user: "app", net: "tcp", addr: "db.example.com:3306", db: "app"},
			{url: "mysql://u:p%40ss%2Fw%3Ard@[::1]:3307/d?baton_table=my_locks&baton_nocreate=1&baton_reclaim=1h", user: "u", pass: "p@ss/w:rd",
				net: "tcp", addr: "[::1]:3307", db: "d", table: "my_locks", nocreate: true, reclaim: time.Hour},
			{url: "mysql://u:p@/d?socket=/run/mysqld/mysqld.sock", user: "u", pass: "p", net: "unix", addr: "/run/mysqld/mysqld.sock", db: "d"},
			{url: "mysql://u@h/d?baton_durable=1&baton_maxgrace=90s", user: "u", net: "tcp", addr: "h:3306", db: "d", durable: true, maxGrace: 90 * time.Second},
			{url: "mysql://u:p@h:1/d?tls=skip-verify&timeout=5s&readTimeout=2s&charset=utf8mb4", user: "u", pass: "p", net: "tcp", addr: "h:1", db: "d",
				check: func(c *mysqldrv.Config) string {
					if c.TLSConfig != "skip-verify" || c.Timeout != 5*time.Second || c.ReadTimeout != 2*time.Second {
						return fmt.Sprintf("tls %q timeout %v readTimeout %v", c.TLSConfig, c.Timeout, c.ReadTimeout)
					}
					return ""
				}},
		} {
			dsn, opts, err := mysql.ParseURL(tc.url)
			if err != nil {
				t.Errorf("ParseURL(%q): %v", tc.url, err)
				continue
			}
			c, err := mysqldrv.ParseDSN(dsn)
			if err != nil {
				t.Errorf("ParseURL(%q) = %q, which the driver refuses: %v", tc.url, dsn, err)
				continue
			}
			if c.User != tc.user || c.Passwd != tc.pass || c.Net != tc.net || c.Addr != tc.addr || c.DBName != tc.db {
				t.Errorf("ParseURL(%q) = %q: user %q pass %q net %q addr %q db %q", tc.url, dsn, c.User, c.Passwd, c.Net, c.Addr, c.DBName)
			}
			if opts.Table != tc.table || opts.NoCreate != tc.nocreate || opts.Reclaim != tc.reclaim || opts.Durable != tc.durable || opts.MaxGrace != tc.maxGrace {
				t.Errorf("ParseURL(%q): options %+v", tc.url, opts)
			}
			if tc.check != nil {
				if msg := tc.check(c); msg != "" {
					t.Errorf("ParseURL(%q) = %q: %s", tc.url, dsn, msg)
				}
			}
		}
		for _, bad := range []string{
			"mysql://u@h/db?baton_nope=1",
			"mysql://u@h/",
			"mysql://u@h/a/b",
			"mysql:///db",
			"mysql://u@h/db?baton_nocreate=maybe",
			"mysql://u@h/db?baton_reclaim=often",
			"mysql://u@h/db?baton_durable=sometimes",
			"mysql://u@h/db?baton_maxgrace=-1s",
			"mysql://u@h/db?baton_maxgrace=long",
			"mysql://u@h/db?socket=/x.sock",
			"postgres://u@h/db",
		} {
			if _, _, err := mysql.ParseURL(bad); err == nil {
				t.Errorf("ParseURL(%q) succeeded", bad)
			}
		}
		// baton.Open knows both schemes, and the table parameter.
		tb := freshTable(t)
		ctx := ctxFor(t, 30*time.Second)
		cfg, err := mysqldrv.ParseDSN(dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, scheme := range []string{"mysql", "mariadb"} {
			u := fmt.Sprintf("%s://%s:%s@%s/%s?baton_table=%s", scheme, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName, tb)
			c, err := baton.Open(ctx, u, nil)
			if err != nil {
				t.Fatalf("baton.Open(%s://…): %v", scheme, err)
			}
			l, err := c.TryLock(ctx, "url", nil)
			if err != nil {
				t.Fatalf("TryLock through %s://: %v", scheme, err)
			}
			l.Release(ctx)
			c.Close()
		}
	})
}

func TestNoCreate(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		_, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb, NoCreate: true})
		if err == nil || !strings.Contains(err.Error(), "NoCreate") || !strings.Contains(err.Error(), tb) {
			t.Fatalf("Open with NoCreate of a missing table: %v, want a clear error", err)
		}
		// New fails on first use, with the same error.
		s, err := mysql.New(rawDB(t), &mysql.Options{Table: tb, NoCreate: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.List(ctx, &driver.Filter{}); err == nil || !strings.Contains(err.Error(), "NoCreate") {
			t.Errorf("List on a NoCreate store of a missing table: %v", err)
		}
		s.Close()
		// The DDL script, run by hand, makes it work.
		script, err := mysql.DDL(&mysql.Options{Table: tb})
		if err != nil || !strings.Contains(script, "DELIMITER //") || !strings.Contains(script, tb+"_acquire") {
			t.Fatalf("DDL = %.200q…, %v", script, err)
		}
		db := rawDB(t)
		for _, q := range mysql.Statements(tb, false) {
			if !strings.Contains(script, q) {
				t.Fatalf("DDL script lacks %.80q", q)
			}
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("DDL statement %.80q: %v", q, err)
			}
		}
		s2, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb, NoCreate: true})
		if err != nil {
			t.Fatalf("Open with NoCreate after running the DDL: %v", err)
		}
		defer s2.Close()
		if _, err := s2.Acquire(ctx, &driver.Request{Name: "n", Owner: "o", Mode: driver.Exclusive, TTL: time.Second}); err != nil {
			t.Errorf("Acquire: %v", err)
		}
		// An out-of-date procedure is refused with NoCreate, and replaced
		// without.
		if _, err := db.ExecContext(ctx, "ALTER PROCEDURE "+tb+"_purge COMMENT 'old'"); err != nil {
			t.Fatal(err)
		}
		if _, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb, NoCreate: true}); err == nil || !strings.Contains(err.Error(), "out of date") {
			t.Errorf("Open with NoCreate and an old procedure: %v", err)
		}
		s3, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: tb})
		if err != nil {
			t.Fatalf("Open after an old procedure: %v", err)
		}
		s3.Close()
	})
}

// TestNew checks a store over a caller's pool: Close leaves the pool open
// and returns every connection the store took.
func TestNew(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		db := rawDB(t)
		s, err := mysql.New(db, &mysql.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		c := client(t, s, nil)
		other := client(t, open(t, table), nil)
		n := "new/" + t.Name()
		l := mustLock(t, ctx, other, n)
		ch := make(chan error, 1)
		go func() {
			l2, err := c.Lock(ctx, n, nil)
			if err == nil {
				err = l2.Release(ctx)
			}
			ch <- err
		}()
		waitQueued(t, ctx, other, n, 1)
		l.Release(ctx)
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
		c.Close()
		if err := db.PingContext(ctx); err != nil {
			t.Errorf("the caller's pool after Close: %v", err)
		}
		if st := db.Stats(); st.InUse != 0 {
			t.Errorf("%d connections of the caller's pool still in use after Close", st.InUse)
		}
	})
}

// A pool limited to a few connections keeps them for the calls: the
// Store takes one for its bells, and locks taken at once by many
// goroutines (on names of their own: each waiting Lock would take a
// connection too) all go through.
func TestSmallPool(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		db := rawDB(t)
		db.SetMaxOpenConns(4)
		s, err := mysql.New(db, &mysql.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		c := client(t, s, nil)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 10 {
					l, err := c.TryLock(ctx, fmt.Sprint("small/", t.Name(), g), nil)
					if err != nil {
						t.Errorf("goroutine %d, lock %d: %v", g, i, err)
						return
					}
					l.Release(ctx)
				}
			}()
		}
		wg.Wait()
		if n := mysql.BellConns(s); n != 1 {
			t.Errorf("%d bell connections from a pool of 4, want 1", n)
		}
	})
}

func mustLock(t testing.TB, ctx context.Context, c *baton.Client, n string) *baton.Lease {
	t.Helper()
	l, err := c.Lock(ctx, n, nil)
	if err != nil {
		t.Fatalf("Lock(%q): %v", n, err)
	}
	return l
}

func waitQueued(t testing.TB, ctx context.Context, c *baton.Client, name string, n int) {
	t.Helper()
	for {
		hs, err := c.Status(ctx, &baton.Filter{Name: name, Queued: true})
		if err != nil {
			t.Fatal(err)
		}
		q := 0
		for _, h := range hs {
			if h.Queued {
				q++
			}
		}
		if q >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d waiters queued for %q, want %d", q, name, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestWokenByBells checks that waiters are woken by the bells, not by the
// poll: with a poll interval far above the test's deadline, only a bell
// can hand the lock over in time. A chain of exclusive waiters, a writer
// behind readers and readers behind a writer are each woken.
func TestWokenByBells(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 40*time.Second)
		slow := &baton.Options{MaxPoll: 10 * time.Minute, TTL: 10 * time.Minute}
		n := "bells/" + t.Name()
		cs := make([]*baton.Client, 4)
		for i := range cs {
			cs[i] = client(t, open(t, table), slow)
		}
		deadline := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 10*time.Second) }

		// A chain: 0 holds, 1, 2, 3 wait in turn.
		l0 := mustLock(t, ctx, cs[0], n)
		type res struct {
			i int
			l *baton.Lease
		}
		got := make(chan res, 3)
		for i := 1; i < 4; i++ {
			go func() {
				wctx, cancel := deadline()
				defer cancel()
				l, err := cs[i].Lock(wctx, n, nil)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					got <- res{i, nil}
					return
				}
				got <- res{i, l}
			}()
			waitQueued(t, ctx, cs[0], n, i)
		}
		if err := l0.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for want := 1; want < 4; want++ {
			r := <-got
			if r.l == nil {
				t.FailNow()
			}
			if r.i != want {
				t.Errorf("waiter %d got the lock, want %d (FIFO)", r.i, want)
			}
			if err := r.l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}

		// A writer behind two readers, woken when the last one leaves.
		sh := &baton.LockOptions{Shared: true}
		r1, err := cs[0].TryLock(ctx, n, sh)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := cs[1].TryLock(ctx, n, sh)
		if err != nil {
			t.Fatal(err)
		}
		wch := make(chan *baton.Lease, 1)
		go func() {
			wctx, cancel := deadline()
			defer cancel()
			l, err := cs[2].Lock(wctx, n, nil)
			if err != nil {
				t.Errorf("writer: %v", err)
			}
			wch <- l
		}()
		waitQueued(t, ctx, cs[0], n, 1)
		r2.Release(ctx) // the newer reader first: the writer waits on the oldest
		time.Sleep(50 * time.Millisecond)
		r1.Release(ctx)
		w := <-wch
		if w == nil {
			t.FailNow()
		}

		// Two readers behind the writer, both woken by its release.
		rch := make(chan *baton.Lease, 2)
		for _, c := range []*baton.Client{cs[0], cs[1]} {
			go func() {
				wctx, cancel := deadline()
				defer cancel()
				l, err := c.Lock(wctx, n, sh)
				if err != nil {
					t.Errorf("reader: %v", err)
				}
				rch <- l
			}()
		}
		waitQueued(t, ctx, cs[0], n, 2)
		w.Release(ctx)
		for range 2 {
			if l := <-rch; l != nil {
				l.Release(ctx)
			}
		}
	})
}

// TestLostBells checks that waiters still get the lock, by backing off
// to polling, when the holder's bells are gone while it holds.
func TestLostBells(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		sa := open(t, table)
		a := client(t, sa, nil)
		b := client(t, open(t, table), nil)
		n := "lostbells/" + t.Name()
		l := mustLock(t, ctx, a, n)
		mysql.BreakBells(sa)
		ch := make(chan error, 1)
		go func() {
			l2, err := b.Lock(ctx, n, nil)
			if err == nil {
				err = l2.Release(ctx)
			}
			ch <- err
		}()
		waitQueued(t, ctx, a, n, 1)
		time.Sleep(100 * time.Millisecond) // the waiter finds the bell free and backs off
		select {
		case err := <-ch:
			t.Fatalf("waiter returned while the lock was held: %v", err)
		default:
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
		// The store took a new bell connection for the next lock.
		l = mustLock(t, ctx, a, n)
		if mysql.HeldBells(sa) != 1 {
			t.Errorf("%d bells held after the bell connection was replaced, want 1", mysql.HeldBells(sa))
		}
		l.Release(ctx)
	})
}

// TestMaxBells: a Store that holds as many bells as it may takes no more;
// the entries it takes then have none, and their waiters still get the
// lock when it is released.
func TestMaxBells(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		sa := open(t, table)
		a := client(t, sa, nil)
		b := client(t, open(t, table), nil)
		mysql.SetMaxBells(sa, 2)
		n := "maxbells/" + t.Name() + "/"
		var ls []*baton.Lease
		for i := range 3 {
			ls = append(ls, mustLock(t, ctx, a, n+strconv.Itoa(i)))
		}
		if got := mysql.HeldBells(sa); got != 2 {
			t.Errorf("%d bells held for 3 locks, want 2", got)
		}
		ch := make(chan error, 1)
		go func() {
			l, err := b.Lock(ctx, n+"2", nil)
			if err == nil {
				err = l.Release(ctx)
			}
			ch <- err
		}()
		waitQueued(t, ctx, a, n+"2", 1)
		for _, l := range ls {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	})
}

// TestInTx checks that a transaction under the lock excludes leases and
// other transactions, waits for a lease holder, gets tokens from the same
// counter, and commits or rolls back with fn.
func TestInTx(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		s := open(t, table)
		c := client(t, open(t, table), nil)
		db := rawDB(t)
		data := freshTable(t) + "_data"
		if _, err := db.ExecContext(ctx, "CREATE TABLE "+data+" (k VARCHAR(64) PRIMARY KEY, token BIGINT UNSIGNED) ENGINE=InnoDB"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+data) })
		n := "intx/" + t.Name()

		// It waits for a lease holder, and takes the next token.
		l := mustLock(t, ctx, c, n)
		var inside atomic.Bool
		done := make(chan error, 1)
		var txToken uint64
		go func() {
			done <- s.InLockedTx(ctx, n, func(ctx context.Context, tx *sql.Tx, token uint64) error {
				inside.Store(true)
				txToken = token
				_, err := tx.ExecContext(ctx, "INSERT INTO "+data+" VALUES ('committed', ?)", token)
				return err
			})
		}()
		waitQueued(t, ctx, c, n, 1)
		time.Sleep(100 * time.Millisecond)
		if inside.Load() {
			t.Fatal("InLockedTx ran while a lease held the lock")
		}
		l.Release(ctx)
		if err := <-done; err != nil {
			t.Fatalf("InLockedTx: %v", err)
		}
		if txToken <= l.Token() {
			t.Errorf("InLockedTx token %d not above the lease's %d", txToken, l.Token())
		}
		var tok uint64
		if err := db.QueryRowContext(ctx, "SELECT token FROM "+data+" WHERE k = 'committed'").Scan(&tok); err != nil || tok != txToken {
			t.Errorf("committed row: token %d, %v", tok, err)
		}

		// A lease and another InLockedTx wait while fn runs; both come after it.
		release := make(chan struct{})
		running := make(chan struct{})
		var active atomic.Int32
		go func() {
			done <- s.InLockedTx(ctx, n, func(ctx context.Context, tx *sql.Tx, token uint64) error {
				if active.Add(1) != 1 {
					t.Error("two sections at once")
				}
				close(running)
				<-release
				active.Add(-1)
				return nil
			})
		}()
		<-running
		other := open(t, table)
		done2 := make(chan error, 1)
		go func() {
			done2 <- other.InLockedTx(ctx, n, func(ctx context.Context, tx *sql.Tx, token uint64) error {
				if active.Add(1) != 1 {
					t.Error("two sections at once")
				}
				active.Add(-1)
				return nil
			})
		}()
		leased := make(chan struct{})
		go func() {
			defer close(leased)
			l, err := c.Lock(ctx, n, nil)
			if err != nil {
				t.Errorf("Lock during InLockedTx: %v", err)
				return
			}
			if active.Load() != 0 {
				t.Error("lease granted while a transaction held the lock")
			}
			l.Release(ctx)
		}()
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if l, err := c.TryLock(tctx, n, nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("TryLock during InLockedTx: %v, %v; want ErrLocked", l, err)
		}
		cancel()
		// A Lock that gives up while fn runs leaves nothing behind (its call
		// is not left running in the server when its context ends).
		quitter := client(t, open(t, table), nil)
		tctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		if l, err := quitter.Lock(tctx, n, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Lock with an expiring context during InLockedTx: %v, %v", l, err)
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
		select {
		case <-leased:
			t.Fatal("Lock returned while InLockedTx ran")
		case <-done2:
			t.Fatal("second InLockedTx returned while the first ran")
		default:
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatalf("InLockedTx: %v", err)
		}
		if err := <-done2; err != nil {
			t.Fatalf("second InLockedTx: %v", err)
		}
		<-leased

		// fn's error rolls back, and leaves the lock free.
		boom := errors.New("boom")
		err := s.InLockedTx(ctx, n, func(ctx context.Context, tx *sql.Tx, token uint64) error {
			if _, err := tx.ExecContext(ctx, "INSERT INTO "+data+" VALUES ('rolled back', ?)", token); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Errorf("InLockedTx with a failing fn: %v, want its error", err)
		}
		var cnt int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+data+" WHERE k = 'rolled back'").Scan(&cnt); err != nil || cnt != 0 {
			t.Errorf("rolled-back row: count %d, %v", cnt, err)
		}
		l2, err := c.TryLock(ctx, n, nil)
		if err != nil {
			t.Fatalf("TryLock after a rolled-back InLockedTx: %v", err)
		}
		l2.Release(ctx)
		if hs, err := c.Status(ctx, &baton.Filter{Name: n, Queued: true}); err != nil || len(hs) != 0 {
			t.Errorf("Status after InLockedTx = %+v, %v; want nothing", hs, err)
		}
		if mysql.HeldBells(s) != 0 || mysql.HeldBells(other) != 0 {
			t.Errorf("bells held after InLockedTx: %d, %d", mysql.HeldBells(s), mysql.HeldBells(other))
		}
		// Bad input.
		if err := s.InLockedTx(ctx, "", func(context.Context, *sql.Tx, uint64) error { return nil }); !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("InLockedTx with an empty name: %v", err)
		}
		// Cancellation while waiting leaves the queue.
		l3 := mustLock(t, ctx, c, n)
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = s.InLockedTx(wctx, n, func(context.Context, *sql.Tx, uint64) error { return nil })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("InLockedTx with an expiring context: %v", err)
		}
		l3.Release(ctx)
		l4, err := c.TryLock(ctx, n, nil)
		if err != nil {
			t.Fatalf("TryLock after a cancelled InLockedTx: %v", err)
		}
		l4.Release(ctx)
	})
}

// An acquire whose call waits in the server for a name InLockedTx holds
// (up to a second, on a bell connection) holds up no other acquire of the
// same Store: the next one takes another bell connection.
func TestBellConnsNotHeldUp(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		s := open(t, table)
		c := client(t, s, nil)
		n := "stall/" + t.Name()
		running, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- s.InLockedTx(ctx, n, func(context.Context, *sql.Tx, uint64) error {
				close(running)
				<-release
				return nil
			})
		}()
		<-running
		lctx, lcancel := context.WithCancel(ctx)
		locked := make(chan struct{})
		go func() {
			defer close(locked)
			if l, err := c.Lock(lctx, n, nil); err == nil {
				l.Release(ctx)
			}
		}()
		time.Sleep(200 * time.Millisecond) // the Lock's calls wait in the server
		for i := range 5 {
			start := time.Now()
			l, err := c.TryLock(ctx, fmt.Sprint("free/", t.Name(), i), nil)
			if err != nil {
				t.Fatalf("TryLock %d of a free name while another Lock waits for InLockedTx: %v", i, err)
			}
			// Held up, it would take about the second the other call waits.
			if d := time.Since(start); d > 700*time.Millisecond {
				t.Errorf("TryLock %d of a free name took %v while another Lock waited for InLockedTx", i, d)
			}
			l.Release(ctx)
			time.Sleep(100 * time.Millisecond)
		}
		lcancel()
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		<-locked
	})
}

// TestModel checks the store's stored procedures against lockstate's rules.
// The model's TTLs are an hour: on a fast table with the default MaxGrace
// its holds are long leases, with a MaxGrace above an hour plain ones.
// fast/take sends every exclusive request to T_take first.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		// Long leases are not handed over (their waiters ask): with the
		// default MaxGrace, the walk's TTL of an hour makes every lease
		// long.
		for _, c := range []struct {
			name     string
			opts     mysql.Options
			take     bool
			handsOff bool
		}{
			{"fast/long", mysql.Options{}, false, false},
			{"fast/plain", mysql.Options{MaxGrace: 2 * time.Hour}, false, true},
			{"fast/take", mysql.Options{MaxGrace: 2 * time.Hour}, true, true},
			{"durable", mysql.Options{Durable: true}, false, true},
		} {
			t.Run(c.name, func(t *testing.T) {
				drivertest.Model(t, drivertest.ModelConfig{HandsOffExclusive: c.handsOff, Open: func(t testing.TB) driver.Store {
					o := c.opts
					o.Table = freshTable(t)
					s := openWith(t, &o)
					if c.take {
						mysql.AlwaysTake(s)
					}
					return s
				}})
			})
		}
	})
}

// TestReclaim: a reclaim deletes the counters rows of idle names and
// keeps those of names with holds or queue entries, and no token is
// handed out twice: a name used again starts above every token it had.
// (A durable table's counters are in T, a fast table's in T_state, which
// also holds the marker of the incarnation under the empty name.)
func TestReclaim(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		req := func(name, owner string, queue bool) *driver.Request {
			return &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute,
				Queue: queue, QueueTTL: time.Minute}
		}
		var last uint64
		for i := range 3 {
			o := fmt.Sprint("o", i)
			g, err := s.Acquire(ctx, req("idle", o, false))
			if err != nil {
				t.Fatal(err)
			}
			last = g.Token
			if _, err := s.Release(ctx, []driver.Key{{Name: "idle", Owner: o}}); err != nil {
				t.Fatal(err)
			}
		}
		held, err := s.Acquire(ctx, req("held", "h", false))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, req("held", "w", true)); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("queued Acquire = %v, want ErrNotGranted", err)
		}
		rows := func() []string {
			rs, err := rawDB(t).QueryContext(ctx, "SELECT name FROM "+tb+" UNION SELECT name FROM "+tb+"_state ORDER BY name")
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			var names []string
			for rs.Next() {
				var n string
				if err := rs.Scan(&n); err != nil {
					t.Fatal(err)
				}
				names = append(names, n)
			}
			return names
		}
		if got := rows(); !slices.Equal(slices.DeleteFunc(got, func(n string) bool { return n == "" }), []string{"held", "idle"}) {
			t.Fatalf("rows before the reclaim %q", got)
		}
		n, err := mysql.Reclaim(ctx, s, time.Hour)
		if err != nil || n != 1 {
			t.Fatalf("Reclaim = %d, %v; want 1 row deleted", n, err)
		}
		if got := rows(); !slices.Equal(got, []string{"", "held"}) {
			t.Fatalf("rows after the reclaim %q, want the floor's and held's", got)
		}
		if n, err := mysql.Reclaim(ctx, s, time.Hour); err != nil || n != -1 {
			t.Fatalf("a second Reclaim within the period = %d, %v; want -1 (not run)", n, err)
		}
		g, err := s.Acquire(ctx, req("idle", "again", false))
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last {
			t.Fatalf("token %d after the reclaim, not above the name's last %d", g.Token, last)
		}
		if _, err := s.Release(ctx, []driver.Key{{Name: "held", Owner: "h"}}); err != nil {
			t.Fatal(err)
		}
		g, err = s.Acquire(ctx, req("held", "w", true))
		if err != nil || g.Token <= held.Token {
			t.Fatalf("the queued request after the holder left: %+v, %v; want a token above %d", g, err, held.Token)
		}
	})
}

// TestReclaimUnderLoad: reclaims that run while clients take and release
// names never let a name's token go back, whichever of them deletes or
// re-creates the name's row first.
func TestReclaimUnderLoad(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		stop := time.Now().Add(2 * time.Second)
		var wg sync.WaitGroup
		var reclaimed atomic.Int64
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				n, err := mysql.Reclaim(ctx, s, 0)
				if err != nil {
					t.Errorf("Reclaim: %v", err)
					return
				}
				reclaimed.Add(max(n, 0))
			}
		}()
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				last := map[string]uint64{}
				for i := 0; time.Now().Before(stop); i++ {
					name := fmt.Sprint("load/", i%5)
					owner := fmt.Sprint("w", w, "-", i)
					g, err := s.Acquire(ctx, &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute})
					if errors.Is(err, driver.ErrNotGranted) {
						continue
					}
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if g.Token <= last[name] {
						t.Errorf("%s: token %d after %d", name, g.Token, last[name])
					}
					last[name] = g.Token
					if _, err := s.Release(ctx, []driver.Key{{Name: name, Owner: owner}}); err != nil {
						t.Errorf("Release: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if reclaimed.Load() == 0 {
			t.Errorf("no row was reclaimed")
		}
		t.Logf("%d rows reclaimed", reclaimed.Load())
	})
}

// TestReclaimDuringInLockedTx: a reclaim while a transaction of
// InLockedTx holds a name's row neither fails nor deletes that row (the
// transaction's deletion of the name's hold is not committed yet, so the
// name is not idle to the reclaim).
func TestReclaimDuringInLockedTx(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		err := s.InLockedTx(ctx, "intx", func(ctx context.Context, tx *sql.Tx, token uint64) error {
			n, err := mysql.Reclaim(ctx, s, 0)
			if err != nil {
				return fmt.Errorf("Reclaim during the transaction: %w", err)
			}
			if n != 0 {
				t.Errorf("Reclaim deleted %d rows, want 0", n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := rawDB(t).QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tb+" WHERE name = 'intx'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("the transaction's row: %d, %v; want it kept", n, err)
		}
	})
}
