package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonredis "github.com/baton-go/baton/redis"
)

// prefix keeps this run's keys apart from other runs' on the shared server.
var prefix = fmt.Sprintf("batontest-%08x", rand.Uint32())

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range drivertest.Servers(serversEnv) {
		if err := batonredis.DeleteKeys(s.URL, prefix); err != nil {
			fmt.Fprintln(os.Stderr, "cleaning up test keys:", err)
		}
	}
	os.Exit(code)
}

// serversEnv lists the servers the tests run on (scripts/servers env).
const serversEnv = "BATON_TEST_REDIS"

// serverURL is the URL of the server t runs on.
func serverURL(t testing.TB) string {
	t.Helper()
	return drivertest.ServerOf(t, serversEnv).URL
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, o *batonredis.Options) *batonredis.Store {
	t.Helper()
	var opts batonredis.Options
	if o != nil {
		opts = *o
	}
	if opts.Prefix == "" {
		opts.Prefix = prefix
	}
	s, err := batonredis.Open(context.Background(), serverURL(t), &opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return open(t, nil) },
		})
	})
}

// Names may hold any bytes: braces, which would pick the cluster hash slot
// if they reached the key, glob characters, which SCAN would interpret,
// and, through the driver, bytes baton itself refuses.
func TestOddNames(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, nil)
		base := fmt.Sprintf("odd-%d/", time.Now().UnixNano())
		names := []string{
			"{", "}", "{}", "}{", "{a}", "{a}b", "a{b}c", "{{x}}", "*", "?", "[a-z]", `\`, "a:b:{c}:s",
			"\x00", "\xff\xfe", "line\nbreak", "tab\there", strings.Repeat("{", 300),
		}
		for i, n := range names {
			n = base + n
			owner := fmt.Sprint("owner-", i)
			g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: 10 * time.Second})
			if err != nil {
				t.Fatalf("Acquire(%q): %v", n, err)
			}
			if g.Token == 0 {
				t.Errorf("Acquire(%q): token 0", n)
			}
			if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "other", Mode: driver.Exclusive, TTL: time.Second}); !errors.Is(err, driver.ErrNotGranted) {
				t.Errorf("second Acquire(%q): %v, want ErrNotGranted", n, err)
			}
		}
		hs, err := s.List(ctx, &driver.Filter{Prefix: base})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			got = append(got, h.Name)
		}
		want := make([]string, len(names))
		for i, n := range names {
			want[i] = base + n
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("List by prefix = %q, want %q", got, want)
		}
		for i, n := range names {
			n = base + n
			hs, err := s.List(ctx, &driver.Filter{Name: n})
			if err != nil || len(hs) != 1 || hs[0].Name != n || hs[0].Owner != fmt.Sprint("owner-", i) {
				t.Errorf("List(%q) = %+v, %v", n, hs, err)
			}
			// All keys of a name share a slot, whatever the name.
			if a, b, c := batonredis.Slot(s.StateKey(n)), batonredis.Slot(s.CounterKey(n)), batonredis.Slot(s.Mailbox(n, "x{y}")); a != b || a != c {
				t.Errorf("keys of %q in slots %d, %d, %d", n, a, b, c)
			}
		}
		keys := make([]driver.Key, len(names))
		for i, n := range names {
			keys[i] = driver.Key{Name: base + n, Owner: fmt.Sprint("owner-", i)}
		}
		held, err := s.Release(ctx, keys)
		if err != nil || slices.Contains(held, false) {
			t.Errorf("Release = %v, %v", held, err)
		}
	})
}

func TestURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, tc := range []struct {
			url    string
			opts   *batonredis.Options
			addr   string
			db     int
			user   string
			pass   string
			tls    bool
			prefix string
			linger time.Duration
			max    int
			ctxTO  bool
			err    string
		}{
			{url: "redis://127.0.0.1:6379/0", addr: "127.0.0.1:6379", ctxTO: true},
			{url: "redis://localhost", addr: "localhost:6379", ctxTO: true},
			{url: "redis://u:p%40ss@h:7000/3", addr: "h:7000", db: 3, user: "u", pass: "p@ss", ctxTO: true},
			{url: "redis://:secret@h/1", addr: "h:6379", db: 1, pass: "secret", ctxTO: true},
			{url: "rediss://h:6380/2", addr: "h:6380", db: 2, tls: true, ctxTO: true},
			{url: "redis://h/0?prefix=app%3Alocks&linger=10s&max_waiters=4&pool_size=20", addr: "h:6379",
				prefix: "app:locks", linger: 10 * time.Second, max: 4, ctxTO: true},
			{url: "redis://h/0?prefix=fromurl", opts: &batonredis.Options{Prefix: "given"}, addr: "h:6379", prefix: "given", ctxTO: true},
			{url: "redis://h/0?context_timeout_enabled=false", addr: "h:6379"},
			{url: "redis://h/0?linger=soon", err: "linger"},
			{url: "redis://h/0?max_waiters=-1", err: "max_waiters"},
			{url: "redis://h/0?bogus=1", err: "bogus"},
			{url: "redis://h/notadb", err: "db"},
			{url: "http://h/0", err: "scheme"},
		} {
			ro, o, err := batonredis.ParseURL(tc.url, tc.opts)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("%s: error %v, want one about %q", tc.url, err, tc.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", tc.url, err)
				continue
			}
			if ro.Addr != tc.addr || ro.DB != tc.db || ro.Username != tc.user || ro.Password != tc.pass ||
				(ro.TLSConfig != nil) != tc.tls || ro.ContextTimeoutEnabled != tc.ctxTO {
				t.Errorf("%s: addr %q db %d user %q pass %q tls %v ctx timeout %v", tc.url, ro.Addr, ro.DB, ro.Username, ro.Password,
					ro.TLSConfig != nil, ro.ContextTimeoutEnabled)
			}
			if o.Prefix != tc.prefix || o.Linger != tc.linger || o.MaxWaiters != tc.max {
				t.Errorf("%s: options %+v", tc.url, o)
			}
		}

		// The schemes are registered with baton, and the URL reaches the server.
		u := serverURL(t)
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		ctx := ctxFor(t, 10*time.Second)
		c, err := baton.Open(ctx, u+sep+"prefix="+prefix, nil)
		if err != nil {
			t.Fatalf("baton.Open(%s): %v", u, err)
		}
		defer c.Close()
		l, err := c.TryLock(ctx, "url-test", nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		if _, err := baton.Open(ctx, "redis://127.0.0.1:1/0?dial_timeout=1s&max_retries=-1", nil); err == nil {
			t.Error("Open of a port nobody listens on succeeded")
		}
	})
}

// The keys of a lock clean themselves up, its counter a week later.
func TestKeys(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, &batonredis.Options{Linger: 500 * time.Millisecond})
		rdb := s.Client()
		n := fmt.Sprint("keys-", time.Now().UnixNano())
		g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "a", Mode: driver.Exclusive, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		// The keys outlive the last entry by Linger, and by up to that entry's
		// TTL more, so that a stream of grants moves their expiry now and then.
		if d := rdb.PTTL(ctx, s.StateKey(n)).Val(); d < 2*time.Second || d > 4500*time.Millisecond {
			t.Errorf("state key TTL %v, want the hold's TTL plus Linger (2.5s) to twice the TTL plus Linger (4.5s)", d)
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "b", Mode: driver.Exclusive, TTL: time.Second,
			Queue: true, QueueTTL: 5 * time.Second}); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("queued Acquire: %v", err)
		}
		for _, k := range []string{s.StateKey(n), s.QueueKey(n)} {
			if d := rdb.PTTL(ctx, k).Val(); d < 5*time.Second || d > 10500*time.Millisecond {
				t.Errorf("key %s TTL %v, want the queue entry's TTL plus Linger (5.5s) to twice the TTL plus Linger (10.5s)", k, d)
			}
		}
		// Releasing the holder hands the lock to the waiter: its mailbox gets
		// the grant.
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "a"}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		if v, err := rdb.LRange(ctx, s.Mailbox(n, "b"), 0, -1).Result(); err != nil || len(v) != 1 || len(v[0]) != 24 {
			t.Errorf("mailbox of the waiter = %q, %v; want one grant", v, err)
		}
		if d := rdb.PTTL(ctx, s.Mailbox(n, "b")).Val(); d <= 0 || d > 5*time.Second {
			t.Errorf("mailbox TTL %v, want at most the queue TTL", d)
		}
		g2, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "b", Mode: driver.Exclusive, TTL: time.Second, Queue: true, QueueTTL: 5 * time.Second})
		if err != nil || g2.Token <= g.Token || !g2.Extended {
			t.Fatalf("waiter's Acquire = %+v, %v; want the hold it was handed, extended", g2, err)
		}
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "b"}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		if n := rdb.Exists(ctx, s.StateKey(n)).Val(); n != 0 {
			t.Errorf("state key left after the last release")
		}
		if v, err := rdb.Get(ctx, s.CounterKey(n)).Int64(); err != nil || uint64(v) != g2.Token {
			t.Errorf("counter = %d, %v; want %d", v, err, g2.Token)
		}
		// The counter outlives the time its token stands for by a week.
		if d, week := rdb.PTTL(ctx, s.CounterKey(n)).Val(), 7*24*time.Hour; d < week-time.Minute || d > week+time.Minute {
			t.Errorf("counter TTL %v, want a week", d)
		}

		// An abandoned hold's state expires at most twice its TTL plus Linger
		// after the hold.
		if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "c", Mode: driver.Exclusive, TTL: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1200 * time.Millisecond)
		if n := rdb.Exists(ctx, s.StateKey(n)).Val(); n != 0 {
			t.Errorf("state key of an abandoned hold still there after 2×TTL+Linger")
		}
		g3, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "d", Mode: driver.Exclusive, TTL: time.Second})
		if err != nil || g3.Token <= g2.Token {
			t.Errorf("Acquire after expiry = %+v, %v; want a token above %d", g3, err, g2.Token)
		}
		s.Release(ctx, []driver.Key{{Name: n, Owner: "d"}})
	})
}

// Batches with many names (more than one script takes), and the same name
// twice, come back in order.
func TestBatches(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, nil)
		base := fmt.Sprint("batch-", time.Now().UnixNano(), "/")
		var holds []driver.Hold
		var keys []driver.Key
		const N = 300
		for i := range N {
			n := fmt.Sprint(base, i)
			if i%3 == 0 {
				holds = append(holds, driver.Hold{Name: n, Owner: "nobody", TTL: time.Second})
				keys = append(keys, driver.Key{Name: n, Owner: "nobody"})
				continue
			}
			// A minute: List scans the whole keyspace, which may take
			// seconds on a server with many keys.
			if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "o", Mode: driver.Shared, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			holds = append(holds, driver.Hold{Name: n, Owner: "o", TTL: time.Duration(i+1) * time.Second})
			keys = append(keys, driver.Key{Name: n, Owner: "o"})
		}
		holds = append(holds, holds[1])
		if hs, err := s.List(ctx, &driver.Filter{Prefix: base}); err != nil || len(hs) != N-N/3 {
			t.Errorf("List = %d holders, %v; want %d", len(hs), err, N-N/3)
		}
		// One TTL for every hold (sent once per call), then one each.
		same := slices.Clone(holds)
		for i := range same {
			same[i].TTL = 7 * time.Second
		}
		gs, err := s.Renew(ctx, same)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range gs {
			want := i%3 != 0 && i < N || i == N
			if (g != nil) != want || g != nil && g.Expires.Sub(g.Renewed) != 7*time.Second {
				t.Errorf("renew %d (%s) for 7s: %+v, want held %v", i, holds[i].Name, g, want)
			}
		}
		gs, err = s.Renew(ctx, holds)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range gs {
			want := i%3 != 0 && i < N || i == N
			if (g != nil) != want {
				t.Errorf("renew %d (%s): %+v, want held %v", i, holds[i].Name, g, want)
			}
			if g != nil && g.Expires.Sub(g.Renewed) != holds[i].TTL {
				t.Errorf("renew %d: expires %v after renewal, want %v", i, g.Expires.Sub(g.Renewed), holds[i].TTL)
			}
		}
		keys = append(keys, keys[1])
		held, err := s.Release(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range held {
			if want := i%3 != 0 && i < N; h != want {
				t.Errorf("release %d: %v, want %v", i, h, want)
			}
		}
	})
}
