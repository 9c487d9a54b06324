package spanner_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/spanner"
	database "cloud.google.com/go/spanner/admin/database/apiv1"
	"cloud.google.com/go/spanner/admin/database/apiv1/databasepb"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonspanner "github.com/baton-go/baton/spanner"
)

// The tests run once per server of BATON_TEST_SPANNER (scripts/servers
// env): NAME=HOST:PORT entries are emulators, where the tests create an
// instance and a database of their own; NAME=projects/P/instances/I/
// databases/D entries are real databases, used with the usual credentials.
// testDB is the database of the server the running test uses.
const serversEnv = "BATON_TEST_SPANNER"

const emulatorDB = "projects/baton-test/instances/test/databases/baton"

var (
	testDB string
	table  = fmt.Sprintf("baton_t_%08x", rand.Uint32())
)

// server is where one server's tests find their database: the emulator's
// address (empty for real Spanner) and the database.
func server(s drivertest.Server) (emulator, db string) {
	if strings.HasPrefix(s.URL, "projects/") {
		return "", s.URL
	}
	return s.URL, emulatorDB
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ss := drivertest.Servers(serversEnv)
	if len(ss) == 0 {
		fmt.Fprintf(os.Stderr, "%s is not set: run `scripts/servers up emulator` and `eval \"$(scripts/servers env)\"`\n", serversEnv)
		return 1
	}
	for i := len(ss) - 1; i >= 0; i-- { // the examples use the first
		emu, db := server(ss[i])
		if emu != "" {
			os.Setenv("SPANNER_EMULATOR_HOST", emu)
		} else {
			os.Unsetenv("SPANNER_EMULATOR_HOST")
		}
		if err := batonspanner.CreateTable(ctx, db, &batonspanner.Options{Table: table}); err != nil {
			fmt.Fprintln(os.Stderr, ss[i].Name+":", err)
			return 1
		}
		testDB = db
	}
	code := m.Run()
	for _, srv := range ss {
		emu, db := server(srv)
		os.Setenv("SPANNER_EMULATOR_HOST", emu)
		if emu == "" {
			os.Unsetenv("SPANNER_EMULATOR_HOST")
		}
		dropTable(db, table)
	}
	return code
}

// eachServer runs f once per server, with testDB and the emulator's
// address (read by the Spanner client) set for it.
func eachServer(t *testing.T, f func(t *testing.T)) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, s drivertest.Server) {
		emu, db := server(s)
		t.Setenv("SPANNER_EMULATOR_HOST", emu)
		if emu == "" {
			os.Unsetenv("SPANNER_EMULATOR_HOST") // restored by t.Setenv's cleanup
		}
		old := testDB
		testDB = db
		t.Cleanup(func() { testDB = old })
		f(t)
	})
}

func dropTable(db, tb string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	da, err := database.NewDatabaseAdminClient(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dropping the test table:", err)
		return
	}
	defer da.Close()
	op, err := da.UpdateDatabaseDdl(ctx, &databasepb.UpdateDatabaseDdlRequest{Database: db, Statements: []string{"DROP TABLE " + tb}})
	if err == nil {
		err = op.Wait(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dropping the test table:", err)
	}
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// open returns a new store with a Spanner client of its own.
func open(t testing.TB) *batonspanner.Store {
	t.Helper()
	s, err := batonspanner.Open(ctxFor(t, time.Minute), testDB, &batonspanner.Options{Table: table})
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

func TestConformance(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return open(t) },
		})
	})
}

// Three electors in leader loops: exactly one leads at a time; when the
// leader is cancelled, or stops dead (cut off from the store, neither
// renewing nor resigning), another leads within one lease plus one
// heartbeat (baton renews every third of the TTL); tokens grow across
// leaders.
func TestElectors(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		ctx := ctxFor(t, 2*time.Minute)
		const ttl = 1500 * time.Millisecond
		n := fmt.Sprintf("electors/%08x", rand.Uint32())
		type elector struct {
			f      *drivertest.Faulty
			e      *baton.Election
			cancel context.CancelFunc
			done   chan struct{}
		}
		type lead struct {
			i     int
			token uint64
			at    time.Time
		}
		leads := make(chan lead, 16)
		var es []*elector
		for i := 0; i < 3; i++ {
			f := drivertest.NewFaulty(open(t))
			c := client(t, f, &baton.Options{TTL: ttl, MaxPoll: 50 * time.Millisecond})
			e, err := c.Election(n, &baton.ElectionOptions{Value: fmt.Sprint("elector-", i)})
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			el := &elector{f: f, e: e, cancel: cancel, done: make(chan struct{})}
			es = append(es, el)
			go func() {
				defer close(el.done)
				e.Run(rctx, func(ctx context.Context, l *baton.Lease) error {
					leads <- lead{i, l.Token(), time.Now()}
					<-ctx.Done()
					return nil
				})
			}()
		}
		t.Cleanup(func() {
			for _, el := range es {
				el.f.SetDown(false)
				el.cancel()
				<-el.done
			}
		})
		// At most one leads at any moment, checked throughout.
		var overlaps atomic.Int32
		sctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sctx.Err() == nil {
				k := 0
				for _, el := range es {
					if ok, _ := el.e.IsLeader(); ok {
						k++
					}
				}
				if k > 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
		defer func() { stop(); wg.Wait() }()

		next := func(after time.Time, within time.Duration, not int) lead {
			t.Helper()
			select {
			case l := <-leads:
				if l.i == not {
					t.Fatalf("elector %d led again", l.i)
				}
				if d := l.at.Sub(after); d > within {
					t.Errorf("leadership moved after %v, want within %v", d, within)
				}
				return l
			case <-time.After(within + 5*time.Second):
				t.Fatalf("nobody leads %v after the change", within+5*time.Second)
			}
			panic("unreachable")
		}
		first := next(time.Now(), 30*time.Second, -1)
		leaders := func() int {
			k := 0
			for _, el := range es {
				if ok, _ := el.e.IsLeader(); ok {
					k++
				}
			}
			return k
		}
		time.Sleep(ttl) // a few heartbeats: still one leader
		if k := leaders(); k != 1 {
			t.Errorf("%d electors lead, want 1", k)
		}
		if ok, tok := es[first.i].e.IsLeader(); !ok || tok != first.token {
			t.Errorf("IsLeader of the first leader = %v, %d; want true, %d", ok, tok, first.token)
		}

		// The leader is cancelled: it resigns, and another takes over.
		stopped := time.Now()
		es[first.i].cancel()
		second := next(stopped, ttl+ttl/3, first.i)
		if second.token <= first.token {
			t.Errorf("second leader's token %d not above %d", second.token, first.token)
		}

		// The leader stops dead: it can neither renew nor resign.
		time.Sleep(ttl / 2)
		stopped = time.Now()
		es[second.i].f.SetDown(true)
		third := next(stopped, ttl+ttl/3, second.i)
		if third.token <= second.token {
			t.Errorf("third leader's token %d not above %d", third.token, second.token)
		}
		if ok, _ := es[second.i].e.IsLeader(); ok {
			t.Errorf("the stopped leader still believes it leads")
		}
		stop()
		wg.Wait()
		if k := overlaps.Load(); k > 0 {
			t.Errorf("two electors led at once in %d samples", k)
		}
	})
}

// Tokens are commit timestamps in microseconds.
func TestTokensAreCommitTimestamps(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		c := client(t, open(t), nil)
		n := fmt.Sprintf("tokens/%08x", rand.Uint32())
		var last uint64
		for i := 0; i < 5; i++ {
			l, err := c.TryLock(ctx, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			ts := time.UnixMicro(int64(l.Token()))
			if d := time.Since(ts); d < -time.Minute || d > time.Minute {
				t.Errorf("token %d is %v, not a recent commit timestamp", l.Token(), ts)
			}
			if l.Token() <= last {
				t.Errorf("token %d not above %d", l.Token(), last)
			}
			if !l.Info().Created.Equal(ts) {
				t.Errorf("created %v, token says %v", l.Info().Created, ts)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// Many stores race for a fresh name and for a held one through the
// driver: exactly one wins each race.
func TestRaces(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		ctx := ctxFor(t, time.Minute)
		const racers = 8
		stores := make([]*batonspanner.Store, racers)
		for i := range stores {
			stores[i] = open(t)
		}
		for round := 0; round < 5; round++ {
			n := fmt.Sprintf("race/%08x/%d", rand.Uint32(), round)
			if round%2 == 1 {
				// A name that exists, with an expired holder to take over.
				g, err := stores[0].Acquire(ctx, &driver.Request{Name: n, Owner: "old", Mode: driver.Exclusive, TTL: 10 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				_ = g
				time.Sleep(20 * time.Millisecond)
			}
			var wins atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, s := range stores {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: fmt.Sprint("racer-", i), Mode: driver.Exclusive, TTL: time.Minute})
					switch {
					case err == nil:
						wins.Add(1)
					case !errors.Is(err, driver.ErrNotGranted):
						t.Errorf("racer %d: %v", i, err)
					}
				}()
			}
			close(start)
			wg.Wait()
			if w := wins.Load(); w != 1 {
				t.Errorf("round %d: %d winners, want 1", round, w)
			}
			hs, err := stores[0].List(ctx, &driver.Filter{Name: n})
			if err != nil || len(hs) != 1 {
				t.Errorf("round %d: List = %+v, %v; want one holder", round, hs, err)
			}
		}
	})
}

func TestURL(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		c, err := baton.Open(ctx, "spanner://"+testDB+"?table="+table, nil)
		if err != nil {
			t.Fatalf("baton.Open: %v", err)
		}
		defer c.Close()
		l, err := c.TryLock(ctx, fmt.Sprintf("url/%08x", rand.Uint32()), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, bad := range []struct{ url, want string }{
			{"spanner://projects/p/instances/i", "invalid database"},
			{"spanner://" + testDB + "?table=1bad", "invalid table name"},
			{"spanner://" + testDB + "?table=a;DROP", "URL options"},
			{"spanner://" + testDB + "?table=a%3BDROP", "invalid table name"},
			{"spanner://" + testDB + "?tabel=x", `unknown URL option "tabel"`},
			{"spanner://" + testDB + "?create=maybe", "create="},
			{"spanner://user:pw@" + testDB, "want spanner://"},
		} {
			_, err := baton.Open(ctx, bad.url, nil)
			if err == nil || !strings.Contains(err.Error(), bad.want) || strings.Contains(err.Error(), "pw@") {
				t.Errorf("Open(%q) = %v, want an error with %q", bad.url, err, bad.want)
			}
		}
		// A missing table is named, with the way out.
		_, err = batonspanner.Open(ctx, testDB, &batonspanner.Options{Table: "no_such_table"})
		if err == nil || !strings.Contains(err.Error(), "no_such_table") || !strings.Contains(err.Error(), "DDL") {
			t.Errorf("Open of a missing table: %v", err)
		}
	})
}

func TestDDL(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		ctx := ctxFor(t, 5*time.Minute)
		for _, bad := range []string{"", "1x", "a-b", "a b", "x`y", strings.Repeat("t", 129), "t;DROP TABLE x"} {
			if _, err := batonspanner.DDL(&batonspanner.Options{Table: bad}); bad != "" && err == nil {
				t.Errorf("DDL(%q) accepted", bad)
			}
			if _, err := batonspanner.New(&spanner.Client{}, &batonspanner.Options{Table: bad}); bad != "" && err == nil {
				t.Errorf("New with table %q accepted", bad)
			}
		}
		if _, err := batonspanner.New(nil, nil); err == nil {
			t.Error("New(nil) accepted")
		}
		s, err := batonspanner.DDL(&batonspanner.Options{Table: "Locks_2"})
		if err != nil || !strings.HasPrefix(s, "CREATE TABLE `Locks_2` (") {
			t.Errorf("DDL = %q, %v", s, err)
		}
		// Open with Create makes the table, and again finds it there.
		tb := fmt.Sprintf("%s_c", table)
		for i := 0; i < 2; i++ {
			st, err := batonspanner.Open(ctx, testDB, &batonspanner.Options{Table: tb, Create: true})
			if err != nil {
				t.Fatalf("Open with Create (%d): %v", i, err)
			}
			c := client(t, st, nil)
			l, err := c.TryLock(ctx, "x", nil)
			if err != nil {
				t.Fatal(err)
			}
			l.Release(ctx)
		}
		db := testDB
		t.Cleanup(func() { dropTable(db, tb) })
	})
}

// New takes a client of the caller's, which Close leaves open.
func TestNewWithClient(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		ctx := ctxFor(t, 30*time.Second)
		sc, err := spanner.NewClient(ctx, testDB)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		s, err := batonspanner.New(sc, &batonspanner.Options{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		c := client(t, s, nil)
		l, err := c.TryLock(ctx, fmt.Sprintf("new/%08x", rand.Uint32()), &baton.LockOptions{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		c.Close()
		if _, err := sc.Single().ReadRow(ctx, table, spanner.Key{""}, []string{"name"}); err != nil {
			t.Errorf("the caller's client after Close: %v", err)
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: "x", Owner: "o", Mode: driver.Exclusive, TTL: time.Second}); !errors.Is(err, batonspanner.ErrClosed) {
			t.Errorf("Acquire after Close: %v, want ErrClosed", err)
		}
	})
}

// TestModel checks the store, on the record layer, against lockstate.
func TestModel(t *testing.T) {
	eachServer(t, func(t *testing.T) {
		drivertest.Model(t, drivertest.ModelConfig{Open: func(t testing.TB) driver.Store { return open(t) }, Steps: 300})
	})
}
