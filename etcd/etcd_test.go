package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonetcd "github.com/baton-go/baton/etcd"
)

// prefix keeps this run's keys apart from other runs' on the shared server.
var prefix = fmt.Sprintf("/batontest-%08x/", rand.Uint32())

// sessionTTL is short, so that crashed and cut-off holders go quickly (2s
// is etcd's minimum with its default election timeout).
const sessionTTL = 2 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range drivertest.Servers(serversEnv) {
		if err := deletePrefix(s.URL, prefix); err != nil {
			fmt.Fprintln(os.Stderr, "cleaning up test keys:", err)
		}
	}
	os.Exit(code)
}

func deletePrefix(ep, prefix string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(ep, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cli.Delete(ctx, prefix, clientv3.WithPrefix())
	return err
}

// serversEnv lists the servers the tests run on (scripts/servers env).
const serversEnv = "BATON_TEST_ETCD"

// endpoint is the server t runs on.
func endpoint(t testing.TB) string {
	t.Helper()
	return drivertest.ServerOf(t, serversEnv).URL
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, o *batonetcd.Options) *batonetcd.Store {
	t.Helper()
	var opts batonetcd.Options
	if o != nil {
		opts = *o
	}
	if opts.Prefix == "" {
		opts.Prefix = prefix
	}
	if opts.SessionTTL == 0 {
		opts.SessionTTL = sessionTTL
	}
	s, err := batonetcd.Open(context.Background(), endpoint(t), &opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func client(t testing.TB, s driver.Store) *baton.Client {
	t.Helper()
	c, err := baton.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Run(t, drivertest.Config{
			Open:         func(t testing.TB) driver.Store { return batonetcd.Faulty{Store: open(t, nil)} },
			SessionBound: true,
			// The suite's lost-lease tests wait 3×400ms×Slow for a cut-off
			// holder's Done: the session needs up to SessionTTL (2s).
			Slow: 2.5,
		})
	})
}

func TestURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		dir := t.TempDir()
		for _, tc := range []struct {
			url  string
			want batonetcd.Target
			err  string
		}{
			{url: "127.0.0.1:2379", want: batonetcd.Target{Endpoints: []string{"127.0.0.1:2379"}}},
			{url: "h1,h2:2380, h3:1", want: batonetcd.Target{Endpoints: []string{"h1:2379", "h2:2380", "h3:1"}}},
			{url: "etcd://127.0.0.1:2379", want: batonetcd.Target{Endpoints: []string{"127.0.0.1:2379"}}},
			{url: "etcd://u:p%40ss@h1:1,h2:2379/app?session_ttl=3s&dial_timeout=1s", want: batonetcd.Target{
				Endpoints: []string{"h1:1", "h2:2379"}, Username: "u", Password: "p@ss", Prefix: "/app",
				SessionTTL: 3 * time.Second, DialTimeout: time.Second}},
			{url: "etcd://h1,h2/", want: batonetcd.Target{Endpoints: []string{"h1:2379", "h2:2379"}}},
			{url: "etcd://[::1]:2379/", want: batonetcd.Target{Endpoints: []string{"[::1]:2379"}}},
			{url: "etcds://h:2379?server_name=etcd.example", want: batonetcd.Target{
				Endpoints: []string{"h:2379"}, TLS: true, ServerName: "etcd.example"}},
			{url: "etcds://h?cacert=" + dir + "/missing.pem", err: "cacert"},
			{url: "etcds://h?cert=/x.pem", err: "cert and key go together"},
			{url: "etcd://h?cacert=/x.pem", err: "need the etcds scheme"},
			{url: "etcd://h?bogus=1", err: `unknown URL option "bogus"`},
			{url: "etcd://h?session_ttl=soon", err: "session_ttl"},
			{url: "etcd://h?session_ttl=-1s", err: "session_ttl"},
			{url: "etcd:///prefix", err: "no endpoint"},
			{url: "redis://h", err: "scheme"},
			{url: "", err: "no endpoint"},
		} {
			got, err := batonetcd.ParseTarget(tc.url, nil)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("ParseTarget(%q) = %+v, %v; want an error about %q", tc.url, got, err, tc.err)
				}
				continue
			}
			if err != nil {
				t.Errorf("ParseTarget(%q): %v", tc.url, err)
				continue
			}
			if tc.want.DialTimeout == 0 {
				tc.want.DialTimeout = 5 * time.Second
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ParseTarget(%q) =\n %+v, want\n %+v", tc.url, got, tc.want)
			}
		}
		// Options passed to Open win over the URL's.
		got, err := batonetcd.ParseTarget("etcd://h/app?session_ttl=3s", &batonetcd.Options{Prefix: "/mine/", SessionTTL: time.Minute})
		if err != nil || got.Prefix != "/mine/" || got.SessionTTL != time.Minute {
			t.Errorf("explicit options: %+v, %v", got, err)
		}
	})
}

// The URL scheme is registered, and its path is the key prefix.
func TestOpenURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		u := "etcd://" + endpoint(t) + strings.TrimSuffix(prefix, "/") + "/url?session_ttl=2s"
		c, err := baton.Open(ctx, u, nil)
		if err != nil {
			t.Fatalf("baton.Open(%q): %v", u, err)
		}
		defer c.Close()
		l, err := c.TryLock(ctx, "via-url", nil)
		if err != nil {
			t.Fatal(err)
		}
		raw := open(t, nil)
		resp, err := raw.Client().Get(ctx, prefix+"url/"+batonetcd.EncodeName("via-url")+"/"+l.Owner())
		if err != nil || len(resp.Kvs) != 1 {
			t.Errorf("the hold's key is not under the URL's prefix: %v, %v", resp, err)
		}
		l.Release(ctx)
		if _, err := baton.Open(ctx, "etcd://127.0.0.1:1/?dial_timeout=200ms", nil); err == nil {
			t.Error("Open of a dead endpoint succeeded")
		}
		// etcds speaks TLS: the plain test server does not answer it.
		if _, err := baton.Open(ctx, "etcds://"+endpoint(t)+"/?dial_timeout=500ms", nil); err == nil {
			t.Error("Open with TLS of a plain server succeeded")
		}
	})
}

func TestEncodeName(t *testing.T) {
	names := []string{"", "a", "a/", "a/b", "ab", "..", ".", "/", "%2F", "a\x00", "名前", "\xff"}
	seen := map[string]string{}
	for _, n := range names {
		e := batonetcd.EncodeName(n)
		if strings.Trim(e, "0123456789abcdef") != "" {
			t.Errorf("EncodeName(%q) = %q has characters outside [0-9a-f]", n, e)
		}
		if o, dup := seen[e]; dup {
			t.Errorf("EncodeName(%q) = EncodeName(%q) = %q", n, o, e)
		}
		seen[e] = n
		for _, m := range names {
			if strings.HasPrefix(m, n) != strings.HasPrefix(batonetcd.EncodeName(m), e) {
				t.Errorf("prefix not kept: %q, %q", n, m)
			}
		}
	}
}

// Names that are prefixes of one another, or that hold the separator, do
// not collide, and a prefix listing is exact.
func TestNamesDoNotCollide(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		a, b := client(t, open(t, nil)), client(t, open(t, nil))
		base := fmt.Sprintf("collide-%d/", time.Now().UnixNano())
		names := []string{"a", "ab", "a/b", "a/", "a/b/..", "b"}
		var ls []*baton.Lease
		for _, n := range names {
			l, err := a.TryLock(ctx, base+n, nil)
			if err != nil {
				t.Fatalf("TryLock(%q): %v", n, err)
			}
			ls = append(ls, l)
		}
		for _, n := range names {
			if _, err := b.TryLock(ctx, base+n, nil); !errors.Is(err, baton.ErrLocked) {
				t.Errorf("TryLock(%q) by another client: %v, want ErrLocked", n, err)
			}
		}
		for pfx, want := range map[string]int{"a": 5, "a/": 3, "a/b": 2, "ab": 1, "b": 1, "c": 0, "": 6} {
			hs, err := b.Status(ctx, &baton.Filter{Prefix: base + pfx})
			if err != nil || len(hs) != want {
				t.Errorf("Status(prefix %q) = %d holds, %v; want %d", pfx, len(hs), err, want)
			}
		}
		for _, l := range ls {
			l.Release(ctx)
		}
	})
}

// All holds of a store share one lease, and Close revokes it.
func TestOneLeasePerStore(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		st := open(t, nil)
		c := client(t, st)
		base := fmt.Sprintf("lease-%d/", time.Now().UnixNano())
		var ls []*baton.Lease
		for i := 0; i < 20; i++ {
			l, err := c.TryLock(ctx, fmt.Sprint(base, i), &baton.LockOptions{Shared: i%2 == 0})
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		raw := open(t, nil).Client()
		resp, err := raw.Get(ctx, prefix+batonetcd.EncodeName(base), clientv3.WithPrefix())
		if err != nil || len(resp.Kvs) != 20 {
			t.Fatalf("%d keys, %v; want 20", len(resp.Kvs), err)
		}
		for _, kv := range resp.Kvs {
			if kv.Lease != st.LeaseID() || kv.Lease == 0 {
				t.Errorf("key %s has lease %x, the store's session is %x", kv.Key, kv.Lease, st.LeaseID())
			}
		}
		ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(st.LeaseID()))
		if err != nil || ttl.GrantedTTL != int64(sessionTTL/time.Second) {
			t.Errorf("lease TTL %+v, %v; want %v", ttl, err, sessionTTL)
		}
		// The core's Close releases the holds; the store's Close revokes the
		// lease. Leave one key behind the core's back to see the revoke.
		if _, err := st.Acquire(ctx, &driver.Request{Name: base + "raw", Owner: "raw-owner", Mode: driver.Exclusive, TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		id := st.LeaseID()
		if err := c.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if ttl, err := raw.TimeToLive(ctx, clientv3.LeaseID(id)); err != nil || ttl.TTL != -1 {
			t.Errorf("after Close, lease %x: %+v, %v; want revoked", id, ttl, err)
		}
		if resp, err := raw.Get(ctx, prefix+batonetcd.EncodeName(base), clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("after Close, %d keys left, %v", len(resp.Kvs), err)
		}
		for _, l := range ls {
			if l.Err() == nil {
				t.Errorf("lease %q still held after Close", l.Name())
			}
		}
	})
}

// A TryLock that is not granted leaves no key behind, and does not take a
// place in the queue.
func TestTryLockLeavesNoKey(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		a, b := client(t, open(t, nil)), client(t, open(t, nil))
		n := fmt.Sprintf("try-%d", time.Now().UnixNano())
		l, err := a.TryLock(ctx, n, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if _, err := b.TryLock(ctx, n, nil); !errors.Is(err, baton.ErrLocked) {
				t.Fatalf("TryLock: %v, want ErrLocked", err)
			}
		}
		hs, err := a.Status(ctx, &baton.Filter{Name: n, Queued: true})
		if err != nil || len(hs) != 1 {
			t.Errorf("Status = %+v, %v; want the holder alone", hs, err)
		}
		l.Release(ctx)
	})
}

// A hold ends when its session is lost, and the next acquisition takes a
// new lease.
func TestSessionLossEndsHolds(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		st := open(t, nil)
		f := drivertest.NewFaulty(batonetcd.Faulty{Store: st})
		c, err := baton.New(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		other := client(t, open(t, nil))
		n := fmt.Sprintf("loss-%d", time.Now().UnixNano())
		l1, err := c.TryLock(ctx, n+"/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := c.TryLock(ctx, n+"/2", &baton.LockOptions{Shared: true})
		if err != nil {
			t.Fatal(err)
		}
		first := st.LeaseID()
		cut := time.Now()
		f.SetDown(true)
		for _, l := range []*baton.Lease{l1, l2} {
			select {
			case <-l.Done():
			case <-time.After(3 * sessionTTL):
				t.Fatalf("%q not lost %v after the store was cut off", l.Name(), 3*sessionTTL)
			}
			// baton wraps ErrLeaseLost and quotes the session's error.
			if !errors.Is(l.Err(), baton.ErrLeaseLost) || !strings.Contains(l.Err().Error(), batonetcd.ErrSessionLost.Error()) {
				t.Errorf("Err = %v, want ErrLeaseLost for a lost session", l.Err())
			}
		}
		if d := time.Since(cut); d > sessionTTL {
			t.Errorf("holds ended %v after the cut, later than the session TTL %v", d, sessionTTL)
		}
		// Another client gets the lock once the server expired the lease.
		lo, err := other.Lock(ctx, n+"/1", nil)
		if err != nil {
			t.Fatal(err)
		}
		lo.Release(ctx)
		f.SetDown(false)
		l3, err := c.Lock(ctx, n+"/3", nil)
		if err != nil {
			t.Fatalf("Lock after reconnecting: %v", err)
		}
		if st.LeaseID() == first {
			t.Errorf("the lost session's lease %x is used again", first)
		}
		l3.Release(ctx)
	})
}

// Semaphore waiters wake as slots free, in order, and a shared waiter
// behind an exclusive one waits for it.
func TestSemaphoreWakeUps(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		n := fmt.Sprintf("sem-%d", time.Now().UnixNano())
		sem := &baton.LockOptions{Limit: 2}
		cs := make([]*baton.Client, 6)
		for i := range cs {
			cs[i] = client(t, open(t, nil))
		}
		h1, err := cs[0].Lock(ctx, n, sem)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := cs[1].Lock(ctx, n, sem)
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			i int
			l *baton.Lease
		}
		got := make(chan res, 4)
		start := func(i int, o *baton.LockOptions) {
			go func() {
				l, err := cs[i].Lock(ctx, n, o)
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
					return
				}
				got <- res{i, l}
			}()
			waitQueued(t, ctx, cs[0], n, i-1)
		}
		start(2, sem)
		start(3, sem)
		start(4, nil) // exclusive: waits for every slot
		start(5, sem) // behind the exclusive one
		expect := func(want int) *baton.Lease {
			t.Helper()
			select {
			case r := <-got:
				if r.i != want {
					t.Fatalf("waiter %d granted, want %d", r.i, want)
				}
				return r.l
			case <-time.After(10 * time.Second):
				t.Fatalf("waiter %d not granted", want)
			}
			return nil
		}
		none := func() {
			t.Helper()
			select {
			case r := <-got:
				t.Fatalf("waiter %d granted too early", r.i)
			case <-time.After(100 * time.Millisecond):
			}
		}
		none()
		h2.Release(ctx) // the second holder leaves first: any slot will do
		l2 := expect(2)
		none()
		h1.Release(ctx)
		l3 := expect(3)
		none()
		l2.Release(ctx)
		none()
		l3.Release(ctx)
		l4 := expect(4)
		none()
		l4.Release(ctx)
		expect(5).Release(ctx)
	})
}

func waitQueued(t testing.TB, ctx context.Context, c *baton.Client, n string, want int) {
	t.Helper()
	for {
		hs, err := c.Status(ctx, &baton.Filter{Name: n, Queued: true})
		if err != nil {
			t.Fatal(err)
		}
		q := 0
		for _, h := range hs {
			if h.Queued {
				q++
			}
		}
		if q >= want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d queued, want %d", q, want)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Many waiters on one name: each release wakes one waiter, and every
// client gets the lock in turn, with tokens rising.
func TestHandOffChain(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		n := fmt.Sprintf("chain-%d", time.Now().UnixNano())
		const clients, rounds = 5, 20
		var mu sync.Mutex
		var last uint64
		inside := 0
		var wg sync.WaitGroup
		for i := 0; i < clients; i++ {
			c := client(t, open(t, nil))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < rounds; r++ {
					l, err := c.Lock(ctx, n, nil)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					inside++
					if inside != 1 {
						t.Errorf("%d holders at once", inside)
					}
					if l.Token() <= last {
						t.Errorf("token %d after %d", l.Token(), last)
					}
					last = l.Token()
					inside--
					mu.Unlock()
					if err := l.ReleaseStrict(ctx); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
	})
}

// The driver directly: a waiter's Wait returns at once when its blocker
// left before the Wait (no lost wake-up), blocks while it stays, and Renew,
// Release and List tell holders from waiters.
func TestDriverWaitRenewList(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		a, b := open(t, nil), open(t, nil)
		n := fmt.Sprintf("driver-%d", time.Now().UnixNano())
		req := func(owner string, queue bool) *driver.Request {
			return &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute, Queue: queue, QueueTTL: time.Second, Host: "h"}
		}
		g, err := a.Acquire(ctx, req("holder", false))
		if err != nil {
			t.Fatal(err)
		}
		if g.Session == nil || !g.Expires.IsZero() || g.Extended || g.Token == 0 {
			t.Errorf("grant %+v: want a session-bound grant with a token", g)
		}
		if _, err := b.Acquire(ctx, req("waiter", true)); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("waiter: %v, want ErrNotGranted", err)
		}
		w, err := b.Watch(ctx, req("waiter", true))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		// The holder stays: Wait runs until its context ends.
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		if err := w.Wait(wctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Wait while the holder stays: %v, want DeadlineExceeded", err)
		}
		cancel()

		hs, err := b.List(ctx, &driver.Filter{Name: n})
		if err != nil || len(hs) != 2 {
			t.Fatalf("List = %+v, %v", hs, err)
		}
		for _, h := range hs {
			queued := h.Owner == "waiter"
			if h.Queued != queued || (h.Token != 0) == queued || !h.Expires.IsZero() || h.Name != n || h.Host != "h" || h.TTL != time.Minute {
				t.Errorf("List entry %+v", h)
			}
		}
		gs, err := b.Renew(ctx, []driver.Hold{{Name: n, Owner: "holder"}, {Name: n, Owner: "waiter"}, {Name: n, Owner: "nobody"}})
		if err != nil || len(gs) != 3 || gs[0] == nil || gs[0].Token != g.Token || gs[1] != nil || gs[2] != nil {
			t.Errorf("Renew = %+v, %v; want the holder only", gs, err)
		}

		// The holder leaves before the next Wait: it returns at once.
		held, err := a.Release(ctx, []driver.Key{{Name: n, Owner: "holder"}})
		if err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		wctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		if err := w.Wait(wctx); err != nil {
			t.Errorf("Wait after the holder left: %v", err)
		}
		cancel()
		g2, err := b.Acquire(ctx, req("waiter", true))
		if err != nil || g2.Token <= g.Token || g2.Extended {
			t.Fatalf("waiter's attempt = %+v, %v", g2, err)
		}
		// Re-acquiring extends, keeps the token, and records the new meta.
		r := req("waiter", false)
		r.Meta = map[string]string{"k": "v"}
		g3, err := a.Acquire(ctx, r)
		if err != nil || g3.Token != g2.Token || !g3.Extended {
			t.Fatalf("re-acquire from another store = %+v, %v", g3, err)
		}
		if hs, _ := b.List(ctx, &driver.Filter{Name: n}); len(hs) != 1 || hs[0].Meta["k"] != "v" {
			t.Errorf("List after re-acquire = %+v", hs)
		}
		r.Mode = driver.Shared
		if _, err := a.Acquire(ctx, r); !errors.Is(err, driver.ErrModeConflict) {
			t.Errorf("re-acquire in another mode: %v, want ErrModeConflict", err)
		}
		held, err = b.Release(ctx, []driver.Key{{Name: n, Owner: "waiter"}, {Name: n, Owner: "waiter"}, {Name: n, Owner: "nobody"}})
		if err != nil || !held[0] || held[1] || held[2] {
			t.Errorf("Release = %v, %v; want [true false false]", held, err)
		}
		if ps, err := a.Purge(ctx); err != nil || len(ps) != 0 {
			t.Errorf("Purge = %v, %v", ps, err)
		}
	})
}

// A release that could not reach the server leaves the key to the session,
// which would keep it for as long as it lives: the store deletes it once
// it can.
func TestFailedReleaseIsCleanedUp(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		st := open(t, nil)
		other := client(t, open(t, nil))
		n := fmt.Sprintf("orphan-%d", time.Now().UnixNano())
		req := &driver.Request{Name: n, Owner: "orphan", Mode: driver.Exclusive, TTL: time.Minute}
		if _, err := st.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		lease := st.LeaseID()
		batonetcd.Faulty{Store: st}.SetPartitioned(true)
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		if _, err := st.Release(rctx, []driver.Key{{Name: n, Owner: "orphan"}}); err == nil {
			t.Fatal("Release through a partition succeeded")
		}
		cancel()
		batonetcd.Faulty{Store: st}.SetPartitioned(false)
		l, err := other.Lock(ctxFor(t, 10*time.Second), n, nil)
		if err != nil {
			t.Fatalf("the orphaned key was not deleted: %v", err)
		}
		if st.LeaseID() != lease {
			t.Errorf("the session changed (%x → %x): the key went with it, not by the clean-up", lease, st.LeaseID())
		}
		l.Release(ctx)
	})
}

// A waiter second in line is granted by its blocker's deletion without a
// read, unless its own key went first: here another client releases the
// waiter's queue entry (by its owner) while it waits, and a third client
// queues. Whatever the order they are granted in, they never overlap.
func TestOwnKeyGoneWhileWaiting(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		name := "own-gone"
		ch, cw, cx, cz := client(t, open(t, nil)), client(t, open(t, nil)), client(t, open(t, nil)), client(t, open(t, nil))
		h, err := ch.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		queued := func(owner string) bool {
			ls, err := cx.Status(ctx, &baton.Filter{Name: name, Queued: true})
			if err != nil {
				t.Error(err)
			}
			for _, l := range ls {
				if l.Queued && (owner == "" || l.Owner == owner) {
					return true
				}
			}
			return false
		}
		var mu sync.Mutex
		holding := 0
		var wg sync.WaitGroup
		hold := func(c *baton.Client, o *baton.LockOptions) {
			defer wg.Done()
			l, err := c.Lock(ctx, name, o)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holding++
			if holding > 1 {
				t.Errorf("two holders at once")
			}
			mu.Unlock()
			time.Sleep(300 * time.Millisecond)
			mu.Lock()
			holding--
			mu.Unlock()
			l.Release(ctx)
		}
		wg.Add(1)
		go hold(cw, &baton.LockOptions{Owner: "waiter-w"})
		for !queued("waiter-w") {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // its watch is set
		if err := cx.ForceRelease(ctx, name, "waiter-w"); err != nil && !errors.Is(err, baton.ErrNotHeld) {
			t.Fatal(err)
		}
		wg.Add(1)
		go hold(cz, nil)
		time.Sleep(200 * time.Millisecond)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	})
}

// BenchmarkServerFloor measures what bounds any lock's hand-off on this
// etcd, whatever its design: one durable write (the holder's release; a
// Put and a Delete per op, so ns/op is two writes) and one serializable
// read (the waiter's check, when it needs one). docs/benchmarks-history.md quotes it.
func BenchmarkServerFloor(b *testing.B) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(endpoint(b), ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	key := prefix + "floor"
	b.Run("put+delete", func(b *testing.B) {
		for b.Loop() {
			if _, err := cli.Put(ctx, key, "v"); err != nil {
				b.Fatal(err)
			}
			if _, err := cli.Delete(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("serializable-get", func(b *testing.B) {
		for b.Loop() {
			if _, err := cli.Get(ctx, key, clientv3.WithSerializable()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestModel checks the store's rules (judge over the keys in queue order)
// against lockstate's: a queued key is granted by the others' going.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Model(t, drivertest.ModelConfig{
			Open:     func(t testing.TB) driver.Store { return open(t, nil) },
			HandsOff: true, FixedModes: true,
		})
	})
}
