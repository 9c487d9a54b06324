package nats_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonnats "github.com/baton-go/baton/nats"
)

// serversEnv lists the servers the tests run on (scripts/servers env), by
// their nats:// URLs.
const serversEnv = "BATON_TEST_NATS"

// bucket keeps this run's locks apart from other runs' on the shared server.
var bucket = fmt.Sprintf("batontest-%08x", rand.Uint32())

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range drivertest.Servers(serversEnv) {
		if nc, err := natsgo.Connect(s.URL); err == nil {
			if js, err := jetstream.New(nc); err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				for name := range js.KeyValueStoreNames(ctx).Name() {
					if strings.HasPrefix(name, bucket) {
						js.DeleteKeyValue(ctx, name)
					}
				}
				cancel()
			}
			nc.Close()
		}
	}
	os.Exit(code)
}

func serverURL(t testing.TB) string {
	t.Helper()
	return drivertest.ServerOf(t, serversEnv).URL
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, bkt string) *batonnats.Store {
	t.Helper()
	s, err := batonnats.Open(ctxFor(t, 10*time.Second), serverURL(t)+"/"+bkt, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return open(t, bucket) },
		})
	})
}

func TestBadInput(t *testing.T) {
	ctx := ctxFor(t, 10*time.Second)
	for _, u := range []struct{ url, want string }{
		{"redis://h", "scheme"},
		{"nats://", "no host"},
		{"nats://h,,k", "empty host"},
		{"nats://h?bogus=1", `unknown URL option "bogus"`},
		{"nats://h?timeout=soon", "timeout"},
		{"nats://h?timeout=-1s", "timeout"},
		{"nats://h?replicas=7", "replicas"},
		{"nats://h?create_bucket=maybe", "create_bucket"},
		{"nats://h?cert_file=/x.pem", "go together"},
		{"nats://h?ca_file=/missing.pem", "ca_file"},
		{"nats+tls://h?creds_file=/missing.creds", "creds_file"},
		{"nats://h/bad.bucket", "bucket"},
	} {
		if _, err := batonnats.Open(ctx, u.url, nil); err == nil || !strings.Contains(err.Error(), u.want) {
			t.Errorf("Open(%q): %v, want an error naming %q", u.url, err, u.want)
		}
	}
	if _, err := batonnats.New(ctx, nil, nil); err == nil {
		t.Error("New(nil): no error")
	}
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		nc, err := natsgo.Connect(serverURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		for _, o := range []*batonnats.Options{{Bucket: "a b"}, {Bucket: "a.b"}, {Bucket: "a*"}, {Replicas: 6}, {Replicas: -1}} {
			if _, err := batonnats.New(ctx, nc, o); err == nil {
				t.Errorf("New(%+v): no error", *o)
			}
		}
		if _, err := batonnats.New(ctx, nc, &batonnats.Options{Bucket: bucket + "-absent", NoCreateBucket: true}); err == nil {
			t.Error("New with NoCreateBucket of a missing bucket: no error")
		}
		// A dead server fails within the context.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := batonnats.Open(short, "nats://127.0.0.1:1", nil); err == nil {
			t.Error("Open of a dead server succeeded")
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Open of a dead server took %v", d)
		}
		// The plain test server does not speak TLS.
		if _, err := batonnats.Open(ctxFor(t, 3*time.Second), strings.Replace(serverURL(t), "nats://", "nats+tls://", 1)+"?timeout=1s", nil); err == nil {
			t.Error("Open with TLS of a plain server succeeded")
		}
	})
}

// Names that are not key characters, and names that are prefixes of
// others, are kept apart and listed by prefix.
func TestNames(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		c, err := baton.New(open(t, bucket), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		base := fmt.Sprintf("names-%d/", time.Now().UnixNano())
		names := []string{"a", "ab", "a/b", "a.b", "a_b", "a_2Fb", "a*", "a>", "a b", "=clock", "é", "a~b", "b"}
		for _, n := range names {
			if _, err := c.TryLock(ctx, base+n, nil); err != nil {
				t.Fatalf("TryLock(%q): %v", base+n, err)
			}
		}
		hs, err := c.Status(ctx, &baton.Filter{Prefix: base + "a"})
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != len(names)-3 { // all but "=clock", "é" and "b"
			t.Errorf("List(prefix a): %d holders, want %d: %v", len(hs), len(names)-3, hs)
		}
		for _, h := range hs {
			if !strings.HasPrefix(h.Name, base+"a") {
				t.Errorf("List(prefix a) has %q", h.Name)
			}
		}
	})
}

// The times a grant reports are the server's: within the round trip of the
// stamp the server put on the lock's message.
func TestServerTime(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, bucket)
		name := fmt.Sprintf("time-%d", time.Now().UnixNano())
		g, err := s.Acquire(ctx, &driver.Request{Name: name, Owner: "o", TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := natsgo.Connect(serverURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		kv, err := js.KeyValue(ctx, bucket)
		if err != nil {
			t.Fatal(err)
		}
		e, err := kv.Get(ctx, name[:4]+"-"+name[5:])
		if err != nil {
			t.Fatal(err)
		}
		// Renewed is an upper bound of the server's time when the decision
		// was made, and the write was stamped after it: they are within a
		// few round trips.
		if d := g.Renewed.Sub(e.Created()); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Errorf("grant renewed at %v, the server stamped its write at %v (%v apart)", g.Renewed, e.Created(), d)
		}
		if got := g.Expires.Sub(g.Renewed); got != 10*time.Second {
			t.Errorf("Expires-Renewed = %v, want the TTL", got)
		}
	})
}

// countingStore counts the Acquire calls that reach the store.
type countingStore struct {
	*batonnats.Store
	n atomic.Int32
}

func (s *countingStore) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	s.n.Add(1)
	return s.Store.Acquire(ctx, req)
}

// A release wakes the head of the queue alone: the waiters behind it do
// not ask the store again.
func TestReleaseWakesTheHeadOnly(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		name := fmt.Sprintf("head-%d", time.Now().UnixNano())
		newClient := func() (*baton.Client, *countingStore) {
			s := &countingStore{Store: open(t, bucket)}
			c, err := baton.New(s, &baton.Options{MaxPoll: 20 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c, s
		}
		holder, _ := newClient()
		l, err := holder.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		type waiting struct {
			s   *countingStore
			got chan *baton.Lease
		}
		var ws []waiting
		for range 3 {
			c, s := newClient()
			w := waiting{s, make(chan *baton.Lease, 1)}
			go func() {
				l, err := c.Lock(ctx, name, nil)
				if err != nil {
					t.Error(err)
				}
				w.got <- l
			}()
			ws = append(ws, w)
			time.Sleep(300 * time.Millisecond) // queued in this order
		}
		before := []int32{ws[1].s.n.Load(), ws[2].s.n.Load()}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		head := <-ws[0].got
		time.Sleep(500 * time.Millisecond)
		for i, w := range ws[1:] {
			if n := w.s.n.Load() - before[i]; n != 0 {
				t.Errorf("waiter %d behind the head asked the store %d times after the release", i+2, n)
			}
		}
		head.Release(ctx)
		for _, w := range ws[1:] {
			if l := <-w.got; l != nil {
				l.Release(ctx)
			}
		}
	})
}

// A Store whose last known value of a key is stale decides on the key as
// it is: a write on the stale revision fails and is decided again, and a
// refusal is never made on the stale value.
func TestStaleKnownValue(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		newClient := func() *baton.Client {
			c, err := baton.New(open(t, bucket), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		a, b := newClient(), newClient()
		name := fmt.Sprintf("stale-%d", time.Now().UnixNano())
		// a knows the key free; b takes it: a's write on the old revision
		// fails, and a finds it held.
		l, err := a.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		lb, err := b.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if l2, err := a.TryLock(ctx, name, nil); !errors.Is(err, baton.ErrLocked) {
			t.Fatalf("TryLock on a stale free value: %v, %v; want ErrLocked", l2, err)
		}
		// a knows it held by b; b releases: a's refusal would be stale, and
		// a is granted.
		lb.Release(ctx)
		l3, err := a.TryLock(ctx, name, nil)
		if err != nil {
			t.Fatalf("TryLock on a stale held value: %v", err)
		}
		if l3.Token() <= lb.Token() {
			t.Errorf("token %d after %d", l3.Token(), lb.Token())
		}
		l3.Release(ctx)
	})
}
