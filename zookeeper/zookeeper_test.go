package zookeeper_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/zookeeper"
)

// root keeps this run's nodes apart from other runs' on the shared server.
var root = fmt.Sprintf("/batontest-%08x", rand.Uint32())

// sessionTimeout is short so that lost sessions end quickly; the shared
// server's minSessionTimeout is 1 s.
const sessionTimeout = 2 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range drivertest.Servers(serversEnv) {
		if err := deleteTree(strings.Split(s.URL, ","), root); err != nil {
			fmt.Fprintln(os.Stderr, "cleaning up test nodes:", err)
		}
	}
	os.Exit(code)
}

// serversEnv lists the servers the tests run on (scripts/servers env).
const serversEnv = "BATON_TEST_ZOOKEEPER"

// servers is the address of the server t runs on.
func servers(t testing.TB) []string {
	t.Helper()
	return strings.Split(drivertest.ServerOf(t, serversEnv).URL, ",")
}

// zkURL is the store URL of servers.
func zkURL(servers []string) string { return "zk://" + strings.Join(servers, ",") }

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func options(o *zookeeper.Options) *zookeeper.Options {
	var x zookeeper.Options
	if o != nil {
		x = *o
	}
	if x.Root == "" {
		x.Root = root
	}
	if x.SessionTimeout == 0 {
		x.SessionTimeout = sessionTimeout
	}
	return &x
}

func open(t testing.TB, o *zookeeper.Options) *zookeeper.Store {
	t.Helper()
	st, err := zookeeper.Open(ctxFor(t, 10*time.Second), zkURL(servers(t)), options(o))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func client(t testing.TB, st driver.Store, o *baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(st, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// raw is a plain go-zookeeper connection to inspect the tree.
func raw(t testing.TB) *zk.Conn {
	t.Helper()
	c, ev, err := zk.Connect(servers(t), 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		for range ev {
		}
	})
	waitSession(t, c, ev)
	return c
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func waitSession(t testing.TB, c *zk.Conn, ev <-chan zk.Event) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for c.State() != zk.StateHasSession {
		select {
		case <-ev:
		case <-time.After(10 * time.Millisecond):
		case <-timeout:
			t.Fatal("no ZooKeeper session within 10s")
		}
	}
}

func deleteTree(servers []string, p string) error {
	c, ev, err := zk.Connect(servers, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	if err != nil {
		return err
	}
	defer func() {
		c.Close()
		for range ev {
		}
	}()
	var del func(p string) error
	del = func(p string) error {
		kids, _, err := c.Children(p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := del(p + "/" + k); err != nil {
				return err
			}
		}
		if err := c.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		return nil
	}
	return del(p)
}

// children lists a node's children (nil if it does not exist).
func children(t testing.TB, c *zk.Conn, p string) []string {
	t.Helper()
	kids, _, err := c.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatalf("Children(%s): %v", p, err)
	}
	slices.Sort(kids)
	return kids
}

func exists(t testing.TB, c *zk.Conn, p string) bool {
	t.Helper()
	ok, _, err := c.Exists(p)
	if err != nil {
		t.Fatalf("Exists(%s): %v", p, err)
	}
	return ok
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		srv := servers(t)
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store {
				st, err := zookeeper.Open(ctxFor(t, 10*time.Second), zkURL(srv), options(nil))
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return zookeeper.Faulty{Store: st}
			},
			SessionBound: true,
			// A holder cut off loses its session sessionTimeout×0.9 after the
			// server last heard from it; the suite's waits for that are
			// multiples of its TTLs.
			Slow: 2,
		})
	})
}

func TestEscape(t *testing.T) {
	names := []string{
		"", "a", "a/b", "a%2Fb", "..", ".", "../../etc", "/x/", "a b", "名前", "x\x00y", "-_", "%", "%%25",
		"a-x-0000000001", "zookeeper", "A", "a:b", "\xff",
	}
	seen := map[string]string{}
	for _, n := range names {
		e := zookeeper.Escape(n)
		if prev, dup := seen[e]; dup {
			t.Errorf("%q and %q both escape to %q", prev, n, e)
		}
		seen[e] = n
		if strings.ContainsAny(e, "/.\x00 ") || e == "zookeeper" && n != "zookeeper" {
			t.Errorf("escape(%q) = %q is not a safe node name", n, e)
		}
		if back, ok := zookeeper.Unescape(e); !ok || back != n {
			t.Errorf("unescape(escape(%q)) = %q, %v", n, back, ok)
		}
	}
	// A prefix of a name escapes to a prefix of the escaped name, and only
	// then.
	for _, n := range names {
		for _, p := range names {
			if got, want := strings.HasPrefix(zookeeper.Escape(n), zookeeper.Escape(p)), strings.HasPrefix(n, p); got != want {
				t.Errorf("prefix %q of %q: escaped %v, plain %v", p, n, got, want)
			}
		}
	}
	for _, owner := range []string{"abc", "a-b-c", "x-s3-0000000001", "a/b", "ünï"} {
		for _, shared := range []bool{false, true} {
			name := zookeeper.ChildPrefix(owner, shared, 3) + "0000000042"
			o, sh, l, seq, ok := zookeeper.ParseChild(name)
			if !ok || o != owner || sh != shared || seq != 42 || (shared && l != 3) {
				t.Errorf("ParseChild(%q) = %q %v %d %d %v", name, o, sh, l, seq, ok)
			}
		}
	}
	for _, bad := range []string{"x", "a-y-0000000001", "-x-0000000001", "a-x-z", "a-s-1"} {
		if _, _, _, _, ok := zookeeper.ParseChild(bad); ok {
			t.Errorf("ParseChild(%q) accepted", bad)
		}
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		servers []string
		root    string
		check   func(*zookeeper.Options) bool
		bad     bool
	}{
		{url: "zk://127.0.0.1:2181", servers: []string{"127.0.0.1:2181"}, root: "/baton"},
		{url: "zk://h1,h2:2182,h3:2183/", servers: []string{"h1:2181", "h2:2182", "h3:2183"}, root: "/baton"},
		{url: "zk://h/app/locks?root=mine", servers: []string{"h:2181"}, root: "/app/locks/mine"},
		{url: "zk://h?root=/x/y", servers: []string{"h:2181"}, root: "/x/y"},
		{url: "zk://[::1]:2182", servers: []string{"[::1]:2182"}, root: "/baton"},
		{url: "zk://[::1]", servers: []string{"[::1]:2181"}, root: "/baton"},
		{
			url:     "zk://u:p%40ss@h:1?session_timeout=3s&max_retries=4&initial_retry_wait=10ms&max_retry_wait=1s&linger=-1s",
			servers: []string{"h:1"}, root: "/baton",
			check: func(o *zookeeper.Options) bool {
				return o.SessionTimeout == 3*time.Second && o.MaxRetries == 4 && o.InitialRetryWait == 10*time.Millisecond &&
					o.MaxRetryWait == time.Second && o.Linger == -time.Second &&
					len(o.Auth) == 1 && o.Auth[0].Scheme == "digest" && string(o.Auth[0].Data) == "u:p@ss"
			},
		},
		{url: "zk://h?sessiontimeout=1s", bad: true},
		{url: "zk://h?session_timeout=soon", bad: true},
		{url: "zk:///path", bad: true},
		{url: "etcd://h", bad: true},
	} {
		srv, o, err := zookeeper.ParseURL(tc.url)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted", tc.url)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if !slices.Equal(srv, tc.servers) || o.Root != tc.root || tc.check != nil && !tc.check(o) {
			t.Errorf("%s: servers %v, options %+v", tc.url, srv, o)
		}
	}
}

// TestOpenURL opens the store through baton.Open with a chroot.
func TestOpenURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		u := "zk://" + strings.Join(servers(t), ",") + root + "/url?session_timeout=2s&root=locks"
		c, err := baton.Open(ctx, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		l, err := c.TryLock(ctx, "via/url", nil)
		if err != nil {
			t.Fatal(err)
		}
		z := raw(t)
		parent := root + "/url/locks/" + zookeeper.Escape("via/url")
		if kids := children(t, z, parent); len(kids) != 1 {
			t.Errorf("children of %s = %v, want the lease's node", parent, kids)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := baton.Open(ctx, "zk://127.0.0.1:1?nonsense=1", nil); err == nil {
			t.Error("unknown URL option accepted")
		}
	})
}

// TestNodes checks the recipe's nodes: names, data, token, clean-up.
func TestNodes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		st := open(t, &zookeeper.Options{Linger: 50 * time.Millisecond})
		c := client(t, st, nil)
		z := raw(t)
		name := "nodes/" + t.Name() + "/../x"
		parent := root + "/" + zookeeper.Escape(name)
		l, err := c.TryLock(ctx, name, &baton.LockOptions{Meta: map[string]string{"k": "v"}, TTL: 7 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		data, _, err := z.Get(parent)
		if err != nil || string(data) != name {
			t.Errorf("parent data = %q, %v; want the name", data, err)
		}
		kids := children(t, z, parent)
		if len(kids) != 1 || !strings.HasPrefix(kids[0], zookeeper.ChildPrefix(l.Owner(), false, 0)) {
			t.Fatalf("children %v, want one node named after owner %s", kids, l.Owner())
		}
		raw, stat, err := z.Get(parent + "/" + kids[0])
		if err != nil {
			t.Fatal(err)
		}
		if uint64(stat.Czxid) != l.Token() {
			t.Errorf("token %d, node's czxid %d", l.Token(), stat.Czxid)
		}
		if stat.EphemeralOwner != st.SessionID() {
			t.Errorf("node's session %x, store's %x", stat.EphemeralOwner, st.SessionID())
		}
		var d map[string]any
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("node data %s: %v", raw, err)
		}
		for _, k := range []string{"mode", "host", "meta", "ttl", "created"} {
			if _, ok := d[k]; !ok {
				t.Errorf("node data %s lacks %q", raw, k)
			}
		}
		if d["mode"] != "exclusive" || d["ttl"] != "7s" {
			t.Errorf("node data %s", raw)
		}
		// Shared holders and a semaphore's limit are in the names too.
		s1, err := c.TryLock(ctx, name+"/s", &baton.LockOptions{Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		if kids := children(t, z, root+"/"+zookeeper.Escape(name+"/s")); len(kids) != 1 || !strings.Contains(kids[0], "-s4-") {
			t.Errorf("semaphore node %v", kids)
		}
		for _, x := range []*baton.Lease{l, s1} {
			if err := x.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if kids := children(t, z, parent); len(kids) != 0 {
			t.Errorf("after release, children %v", kids)
		}
		drivertest.Eventually(t, 5*time.Second, "empty parent deleted after its linger", func() bool { return !exists(t, z, parent) })
		// Tokens keep growing after the parent was deleted.
		l2, err := c.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("token %d after the parent was recreated, not above %d", l2.Token(), l.Token())
		}
		l2.Release(ctx)
		// Close deletes empty parents at once.
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if exists(t, z, parent) {
			t.Errorf("parent %s left after Close", parent)
		}
	})
}

// TestNoLeakAfterSessionDies: a holder and a waiter whose process dies
// leave nothing once their session expires, and Purge removes the parent.
func TestNoLeakAfterSessionDies(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		st := open(t, &zookeeper.Options{Linger: time.Hour})
		other := open(t, nil)
		z := raw(t)
		names := []string{"leak/" + t.Name() + "/a", "leak/" + t.Name() + "/b"}
		g, err := st.Acquire(ctx, &driver.Request{Name: names[0], Owner: "dead-holder", Mode: driver.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if g.Session == nil || !g.Expires.IsZero() {
			t.Errorf("grant %+v: want a session-bound hold", g)
		}
		if _, err := other.Acquire(ctx, &driver.Request{Name: names[1], Owner: "live", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		_, err = st.Acquire(ctx, &driver.Request{Name: names[1], Owner: "dead-waiter", Mode: driver.Exclusive, TTL: time.Minute, Queue: true, QueueTTL: time.Minute})
		if !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("queued request: %v", err)
		}
		if n := len(children(t, z, root+"/"+zookeeper.Escape(names[1]))); n != 2 {
			t.Fatalf("%d nodes for %s, want holder and waiter", n, names[1])
		}
		zookeeper.Faulty{Store: st}.Crash()
		select {
		case <-g.Session.Done():
		case <-time.After(3 * sessionTimeout):
			t.Error("the crashed store's session never ended")
		}
		drivertest.Eventually(t, 3*sessionTimeout, "the dead session's nodes deleted", func() bool {
			return len(children(t, z, root+"/"+zookeeper.Escape(names[0]))) == 0 &&
				len(children(t, z, root+"/"+zookeeper.Escape(names[1]))) == 1
		})
		if _, err := other.Release(ctx, []driver.Key{{Name: names[1], Owner: "live"}}); err != nil {
			t.Fatal(err)
		}
		if hs, err := other.Purge(ctx); err != nil || len(hs) != 0 {
			t.Errorf("Purge = %v, %v", hs, err)
		}
		for _, n := range names {
			if p := root + "/" + zookeeper.Escape(n); exists(t, z, p) {
				t.Errorf("%s left after Purge", p)
			}
		}
	})
}

// TestTTLAutoRelease: the reference's ttl: a lease taken without keepalive
// ends with an expired event after its TTL, and its node goes.
func TestTTLAutoRelease(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		var mu sync.Mutex
		var kinds []baton.EventKind
		c := client(t, open(t, nil), &baton.Options{OnEvent: func(e baton.Event) {
			mu.Lock()
			kinds = append(kinds, e.Kind)
			mu.Unlock()
		}})
		z := raw(t)
		name := "ttl/" + t.Name()
		l, err := c.TryLock(ctx, name, &baton.LockOptions{TTL: 300 * time.Millisecond, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("lease without keepalive did not end after its TTL")
		}
		if !errors.Is(l.Err(), baton.ErrExpired) {
			t.Errorf("Err = %v, want ErrExpired", l.Err())
		}
		drivertest.Eventually(t, 5*time.Second, "node released after the TTL", func() bool {
			return len(children(t, z, root+"/"+zookeeper.Escape(name))) == 0
		})
		mu.Lock()
		defer mu.Unlock()
		if !slices.Contains(kinds, baton.EventExpired) {
			t.Errorf("events %v, want %q", kinds, baton.EventExpired)
		}
	})
}

type eventLog struct {
	mu sync.Mutex
	ev []zookeeper.Event
}

func (l *eventLog) add(e zookeeper.Event) {
	l.mu.Lock()
	l.ev = append(l.ev, e)
	l.mu.Unlock()
}

func (l *eventLog) kinds() []zookeeper.EventKind {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ks []zookeeper.EventKind
	for _, e := range l.ev {
		ks = append(ks, e.Kind)
	}
	return ks
}

func (l *eventLog) wait(t *testing.T, k zookeeper.EventKind, n int) zookeeper.Event {
	t.Helper()
	var e zookeeper.Event
	drivertest.Eventually(t, 4*sessionTimeout, fmt.Sprintf("%d %q events (have %v)", n, k, l.kinds()), func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		c := 0
		for _, x := range l.ev {
			if x.Kind == k {
				c++
				e = x
			}
		}
		return c >= n
	})
	return e
}

// TestEvents: connected, disconnected and reconnected on a dropped
// connection, session-expired on a partition (leases lost), connected again
// with a new session afterwards.
func TestEvents(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		log := &eventLog{}
		st := open(t, &zookeeper.Options{OnEvent: log.add})
		c := client(t, st, nil)
		first := log.wait(t, zookeeper.EventConnected, 1)
		if first.SessionID == 0 || first.SessionID != st.SessionID() {
			t.Errorf("connected event %+v, store's session %x", first, st.SessionID())
		}
		if st.Timeout() != sessionTimeout {
			t.Errorf("negotiated timeout %v, asked %v", st.Timeout(), sessionTimeout)
		}
		l, err := c.TryLock(ctx, "events/"+t.Name(), nil)
		if err != nil {
			t.Fatal(err)
		}
		st.DropConnection()
		log.wait(t, zookeeper.EventDisconnected, 1)
		re := log.wait(t, zookeeper.EventReconnected, 1)
		if re.SessionID != first.SessionID {
			t.Errorf("reconnected to session %x, want %x", re.SessionID, first.SessionID)
		}
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost on a short disconnection: %v", err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Errorf("Renew after reconnecting: %v", err)
		}

		zookeeper.Faulty{Store: st}.SetPartitioned(true)
		exp := log.wait(t, zookeeper.EventSessionExpired, 1)
		if !errors.Is(exp.Err, zookeeper.ErrSessionTimeout) {
			t.Errorf("session-expired event %+v, want ErrSessionTimeout", exp)
		}
		select {
		case <-l.Done():
		case <-time.After(time.Second):
			t.Fatal("lease not ended with its session")
		}
		if !errors.Is(l.Err(), baton.ErrLeaseLost) {
			t.Errorf("lease Err %v, want ErrLeaseLost", l.Err())
		}
		zookeeper.Faulty{Store: st}.SetPartitioned(false)
		l2, err := c.TryLock(ctx, "events/"+t.Name()+"/2", nil)
		if err != nil {
			t.Fatalf("TryLock after the partition: %v", err)
		}
		second := log.wait(t, zookeeper.EventConnected, 2)
		if second.SessionID == first.SessionID || second.SessionID != st.SessionID() {
			t.Errorf("after expiry, connected to session %x (first %x, store %x)", second.SessionID, first.SessionID, st.SessionID())
		}
		l2.Release(ctx)
	})
}

// TestBackoff checks the retry policy: binary exponential with jitter,
// capped, and MaxRetries.
func TestBackoff(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		st := open(t, &zookeeper.Options{InitialRetryWait: 10 * time.Millisecond, MaxRetryWait: 80 * time.Millisecond, MaxRetries: 3})
		for n, want := range []time.Duration{10, 20, 40, 80, 80, 80} {
			want *= time.Millisecond
			for range 20 {
				if d := st.Backoff(n); d < want/2 || d > want {
					t.Errorf("backoff %d = %v, want within [%v, %v]", n, d, want/2, want)
				}
			}
		}
		calls := 0
		err := st.Retry(context.Background(), func() error { calls++; return zk.ErrConnectionClosed })
		if !errors.Is(err, zk.ErrConnectionClosed) || calls != 4 {
			t.Errorf("with MaxRetries 3: %d calls, %v; want 4 calls", calls, err)
		}
		calls = 0
		err = st.Retry(context.Background(), func() error { calls++; return zk.ErrNoNode })
		if !errors.Is(err, zk.ErrNoNode) || calls != 1 {
			t.Errorf("a non-connection error was retried: %d calls, %v", calls, err)
		}
		calls = 0
		err = st.Retry(context.Background(), func() error {
			if calls++; calls < 3 {
				return zk.ErrNoServer
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Errorf("retry until success: %d calls, %v", calls, err)
		}
		// MaxRetries 0 retries until the context ends.
		st0 := open(t, &zookeeper.Options{InitialRetryWait: time.Millisecond, MaxRetryWait: 5 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		calls = 0
		err = st0.Retry(ctx, func() error { calls++; return zk.ErrConnectionClosed })
		if !errors.Is(err, context.DeadlineExceeded) || calls < 5 {
			t.Errorf("MaxRetries 0: %d calls, %v; want retries until the deadline", calls, err)
		}
	})
}

// TestConnectionLoss breaks the connection again and again, and once right
// after a lock request was sent: every call succeeds through retries, a
// create whose reply was lost is found again, and nothing leaks.
func TestConnectionLoss(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		// The server listed twice: go-zookeeper reconnects to the next address
		// at once (it pauses a second after trying every address).
		srv := servers(t)
		st, err := zookeeper.Open(ctx, zkURL(append(slices.Clone(srv), srv...)), options(&zookeeper.Options{Linger: -1}))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		z := raw(t)
		name := "loss/" + t.Name()
		parent := root + "/" + zookeeper.Escape(name)

		// A lost reply to the create.
		st.DropAfterNextMulti()
		g, err := st.Acquire(ctx, &driver.Request{Name: name, Owner: "o1", Mode: driver.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire with a lost reply: %v", err)
		}
		kids := children(t, z, parent)
		if len(kids) != 1 {
			t.Fatalf("after a lost create reply, nodes %v; want exactly one", kids)
		}
		_, stat, err := z.Get(parent + "/" + kids[0])
		if err != nil || uint64(stat.Czxid) != g.Token {
			t.Errorf("token %d, node czxid %d (%v)", g.Token, stat.Czxid, err)
		}
		if held, err := st.Release(ctx, []driver.Key{{Name: name, Owner: "o1"}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}

		// Connections broken under a stream of calls.
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(20+rand.IntN(40)) * time.Millisecond):
					st.DropConnection()
				}
			}
		}()
		c := client(t, st, nil)
		for i := range 40 {
			l, err := c.Lock(ctx, name, nil)
			if err != nil {
				close(stop)
				t.Fatalf("Lock %d: %v", i, err)
			}
			if err := l.Release(ctx); err != nil {
				close(stop)
				t.Fatalf("Release %d: %v", i, err)
			}
		}
		close(stop)
		<-done
		drivertest.Eventually(t, 5*time.Second, "no node left", func() bool { return len(children(t, z, parent)) == 0 })
	})
}

// TestWaitCancellable: a wait ends with its context, leaving no node.
func TestWaitCancellable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		a, b := client(t, open(t, nil), nil), client(t, open(t, nil), nil)
		z := raw(t)
		name := "cancel/" + t.Name()
		l, err := a.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := b.Lock(wctx, name, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("cancelled wait took %v", d)
		}
		if kids := children(t, z, root+"/"+zookeeper.Escape(name)); len(kids) != 1 {
			t.Errorf("nodes after a cancelled wait: %v, want the holder's only", kids)
		}
		l.Release(ctx)
	})
}

// TestNoHerd: each waiter watches only the node that blocks it, and a
// release wakes one waiter.
func TestNoHerd(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		name := "herd/" + t.Name()
		holder := client(t, open(t, nil), nil)
		l, err := holder.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		const n = 4
		stores := make([]*zookeeper.Store, n)
		owners := make([]string, n)
		results := make(chan *baton.Lease, n)
		for i := range stores {
			stores[i] = open(t, nil)
			c := client(t, stores[i], nil)
			owners[i] = fmt.Sprintf("waiter-%d", i)
			go func() {
				l, err := c.Lock(ctx, name, &baton.LockOptions{Owner: owners[i]})
				if err != nil {
					t.Errorf("waiter %d: %v", i, err)
				}
				results <- l
			}()
			// Queue in order.
			drivertest.Eventually(t, 10*time.Second, "waiter queued", func() bool { _, ok := stores[i].Waiting(name, owners[i]); return ok })
		}
		z := raw(t)
		kids := children(t, z, root+"/"+zookeeper.Escape(name))
		if len(kids) != n+1 {
			t.Fatalf("nodes %v, want holder and %d waiters", kids, n)
		}
		// kids sort by owner, not sequence: order them by sequence.
		slices.SortFunc(kids, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
		for i := range stores {
			w, _ := stores[i].Waiting(name, owners[i])
			if want := root + "/" + zookeeper.Escape(name) + "/" + kids[i]; w != want {
				t.Errorf("waiter %d watches %q, want its predecessor %q", i, w, want)
			}
		}
		l.Release(ctx)
		for range n {
			r := <-results
			if r != nil {
				r.Release(ctx)
			}
		}
	})
}

// TestOwnConnection: New over a connection the caller owns.
func TestOwnConnection(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		conn, events, err := zk.Connect(servers(t), sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			conn.Close()
		}()
		log := &eventLog{}
		st, err := zookeeper.New(conn, events, options(&zookeeper.Options{OnEvent: log.add, Linger: time.Hour}))
		if err != nil {
			t.Fatal(err)
		}
		c, err := baton.New(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		name := "own/" + t.Name()
		l, err := c.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		other := client(t, open(t, nil), nil)
		if _, err := other.TryLock(ctx, name, nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("TryLock while held through the caller's connection: %v", err)
		}
		if e := log.wait(t, zookeeper.EventConnected, 1); e.SessionID != conn.SessionID() {
			t.Errorf("connected event %+v, connection's session %x", e, conn.SessionID())
		}
		// Closing the client releases; the caller's connection stays open and
		// nothing is left behind.
		_ = l
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if conn.State() != zk.StateHasSession {
			t.Errorf("caller's connection state %v after Close", conn.State())
		}
		z := raw(t)
		if kids := children(t, z, root+"/"+zookeeper.Escape(name)); len(kids) != 0 {
			t.Errorf("nodes left: %v", kids)
		}
		if exists(t, z, root+"/"+zookeeper.Escape(name)) {
			t.Errorf("parent left after Close")
		}
	})
}

// TestDigestAuth: credentials pass through to AddAuth, and an ACL that
// needs them keeps others out.
func TestDigestAuth(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		myRoot := root + "-auth"
		acl := zk.DigestACL(zk.PermAll, "locker", "s3cret")
		st := open(t, &zookeeper.Options{
			Root: myRoot, ACL: acl, Linger: time.Hour,
			Auth: []zookeeper.Credential{{Scheme: "digest", Data: []byte("locker:s3cret")}},
		})
		z := raw(t)
		t.Cleanup(func() {
			if err := z.AddAuth("digest", []byte("locker:s3cret")); err == nil {
				deleteTreeWith(z, myRoot)
			}
		})
		g, err := st.Acquire(ctx, &driver.Request{Name: "auth", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire with digest auth: %v", err)
		}
		parent := myRoot + "/" + zookeeper.Escape("auth")
		if _, _, err := z.Children(parent); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("unauthenticated Children(%s): %v, want ErrNoAuth", parent, err)
		}
		if held, err := st.Release(ctx, []driver.Key{{Name: "auth", Owner: "o"}}); err != nil || !held[0] {
			t.Errorf("Release = %v, %v", held, err)
		}
		_ = g
		// The URL form: user and password become a digest credential.
		_, o, err := zookeeper.ParseURL("zk://locker:s3cret@127.0.0.1:2181")
		if err != nil || len(o.Auth) != 1 || string(o.Auth[0].Data) != "locker:s3cret" {
			t.Errorf("URL credentials: %+v, %v", o, err)
		}
	})
}

func deleteTreeWith(c *zk.Conn, p string) {
	kids, _, _ := c.Children(p)
	for _, k := range kids {
		deleteTreeWith(c, p+"/"+k)
	}
	c.Delete(p, -1)
}

// TestReacquireFromAnotherStore: the same owner re-acquiring through
// another store shares the hold (same token); that grant ends when the
// node goes.
func TestReacquireFromAnotherStore(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		a, b := open(t, nil), open(t, nil)
		req := &driver.Request{Name: "reacquire/" + t.Name(), Owner: "shared-owner", Mode: driver.Exclusive, TTL: time.Minute}
		ga, err := a.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		gb, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !gb.Extended || gb.Token != ga.Token || gb.Session == nil {
			t.Fatalf("re-acquire from another store: %+v, first grant token %d", gb, ga.Token)
		}
		shared := *req
		shared.Mode = driver.Shared
		if _, err := b.Acquire(ctx, &shared); !errors.Is(err, driver.ErrModeConflict) {
			t.Errorf("re-acquire in another mode: %v, want ErrModeConflict", err)
		}
		z := raw(t)
		if kids := children(t, z, root+"/"+zookeeper.Escape(req.Name)); len(kids) != 1 {
			t.Errorf("nodes %v, want one", kids)
		}
		select {
		case <-gb.Session.Done():
			t.Fatal("shared hold's session ended early")
		default:
		}
		if held, err := a.Release(ctx, []driver.Key{{Name: req.Name, Owner: req.Owner}}); err != nil || !held[0] {
			t.Fatalf("Release = %v, %v", held, err)
		}
		select {
		case <-gb.Session.Done():
		case <-time.After(5 * time.Second):
			t.Error("the other store was not told the hold is gone")
		}
	})
}

// TestQueuedNodeDeleted: a waiter whose queued node an administrator
// deleted is not granted on the strength of its predecessor's release: it
// queues again, and its grant has a node.
func TestQueuedNodeDeleted(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 20*time.Second)
		a, b, admin := open(t, nil), open(t, nil), open(t, nil)
		name := "requeue/" + t.Name()
		if _, err := a.Acquire(ctx, &driver.Request{Name: name, Owner: "a", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		bc := client(t, b, nil)
		got := make(chan *baton.Lease, 1)
		go func() {
			l, err := bc.Lock(ctx, name, &baton.LockOptions{Owner: "b"})
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		drivertest.Eventually(t, 10*time.Second, "b queued", func() bool { _, ok := b.Waiting(name, "b"); return ok })
		time.Sleep(50 * time.Millisecond) // b's watches are set
		if held, err := admin.Release(ctx, []driver.Key{{Name: name, Owner: "b"}}); err != nil || held[0] {
			t.Fatalf("admin release of the queued entry = %v, %v", held, err)
		}
		time.Sleep(50 * time.Millisecond)
		if _, err := a.Release(ctx, []driver.Key{{Name: name, Owner: "a"}}); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			return
		}
		z := raw(t)
		parent := root + "/" + zookeeper.Escape(name)
		kids := children(t, z, parent)
		if len(kids) != 1 || !strings.HasPrefix(kids[0], zookeeper.ChildPrefix("b", false, 0)) {
			t.Fatalf("b granted, nodes %v", kids)
		}
		if _, st, err := z.Get(parent + "/" + kids[0]); err != nil || uint64(st.Czxid) != l.Token() {
			t.Errorf("b's token %d, its node's czxid %d (%v)", l.Token(), st.Czxid, err)
		}
		l.Release(ctx)
	})
}

// cutter is a dialer whose connections a test can cut.
type cutter struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (c *cutter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut {
		return nil, errors.New("cut")
	}
	conn, err := net.DialTimeout(network, addr, timeout)
	if err == nil {
		c.conns = append(c.conns, conn)
	}
	return conn, err
}

func (c *cutter) set(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for _, conn := range c.conns {
			conn.Close()
		}
		c.conns = nil
	}
}

// TestOwnConnectionLostSessionComesBack: on a caller-owned connection, a
// session judged lost that the server kept is cleaned of the store's
// nodes once it is back, then used again.
func TestOwnConnectionLostSessionComesBack(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		cut := &cutter{}
		// The connection asks for 4s; the store is told 1s, so it judges the
		// session lost long before the server would expire it.
		conn, events, err := zk.Connect(servers(t), 4*time.Second, zk.WithDialer(cut.dial), zk.WithLogInfo(false), zk.WithLogger(quiet{}))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		log := &eventLog{}
		st, err := zookeeper.New(conn, events, options(&zookeeper.Options{SessionTimeout: time.Second, OnEvent: log.add}))
		if err != nil {
			t.Fatal(err)
		}
		c := client(t, st, nil)
		name := "own-lost/" + t.Name()
		l, err := c.Lock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		first := log.wait(t, zookeeper.EventConnected, 1)
		cut.set(true)
		select {
		case <-l.Done():
		case <-time.After(3 * time.Second):
			t.Fatal("lease not ended after the disconnection")
		}
		log.wait(t, zookeeper.EventSessionExpired, 1)
		cut.set(false)
		z := raw(t)
		parent := root + "/" + zookeeper.Escape(name)
		drivertest.Eventually(t, 10*time.Second, "the lost session's node deleted", func() bool { return len(children(t, z, parent)) == 0 })
		if conn.SessionID() != first.SessionID {
			t.Fatalf("the server expired the session (%x → %x): the test needs it kept", first.SessionID, conn.SessionID())
		}
		l2, err := c.Lock(ctx, name, nil)
		if err != nil {
			t.Fatalf("Lock after the session came back: %v", err)
		}
		if log.wait(t, zookeeper.EventConnected, 2).SessionID != first.SessionID {
			t.Error("the same ZooKeeper session was not reused")
		}
		l2.Release(ctx)
	})
}

// TestModel checks the recipe's rules (verdict over the nodes in sequence
// order) against lockstate's: a queued node is granted by the others'
// going.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Model(t, drivertest.ModelConfig{
			Open:     func(t testing.TB) driver.Store { return open(t, nil) },
			HandsOff: true, FixedModes: true,
		})
	})
}
