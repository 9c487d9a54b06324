package mongo_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

func TestIndexes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t)
		// Existing indexes are skipped.
		for i := 0; i < 2; i++ {
			if err := s.CreateIndexes(ctx); err != nil {
				t.Fatalf("CreateIndexes (%d): %v", i, err)
			}
		}
		specs, err := s.Collection().Indexes().ListSpecifications(ctx)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, sp := range specs {
			have[sp.Name] = true
		}
		for _, ix := range batonmongo.Indexes() {
			if !have[ix.Name] {
				t.Errorf("index %s missing", ix.Name)
			}
		}
	})
}

func TestOpenURL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		u := serverURL(t)
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		c, err := baton.Open(ctx, u+sep+"collection="+collection+"&w=majority&connectTimeoutMS=5000", nil)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		l, err := c.TryLock(ctx, "url/"+collection, nil)
		if err != nil {
			t.Fatalf("TryLock: %v", err)
		}
		// The same collection is seen through another store.
		hs, err := open(t).List(ctx, &driver.Filter{Name: "url/" + collection})
		if err != nil || len(hs) != 1 || hs[0].Token != l.Token() {
			t.Errorf("List through another store = %+v, %v", hs, err)
		}
		l.Release(ctx)
		c.Close()

		for _, bad := range []string{
			"mongodb://127.0.0.1:27017/db?tls=maybe",
			"mongodb:///db",
			"mongodb://127.0.0.1:27017/bad\\x00db",
			"mongodb://127.0.0.1:notaport/db",
			"mongodb+srv://a,b/db",
		} {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := baton.Open(ctx, bad, nil)
			cancel()
			if err == nil {
				t.Errorf("Open(%q) succeeded", bad)
			}
		}
		if _, err := batonmongo.New(nil, nil); err == nil {
			t.Error("New(nil client) succeeded")
		}
	})
}

// A holder that stopped renewing is judged by the server's clock: a store
// that never saw it takes the name over as soon as the hold's TTL has run
// out, with a larger token, and the old holder's renewal then fails.
func TestExpiryByServerTime(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		holder := open(t)
		n := "expiry/" + collection
		ttl := 500 * time.Millisecond
		g, err := holder.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		w := &driver.Request{Name: n, Owner: "w", Mode: driver.Exclusive, TTL: ttl}
		if _, err := open(t).Acquire(ctx, w); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("while held: %v, want ErrNotGranted", err)
		}
		time.Sleep(time.Until(g.Expires) + 50*time.Millisecond)
		fresh := open(t) // has never read the name
		wg, err := fresh.Acquire(ctx, w)
		if err != nil {
			t.Fatalf("right after the TTL, a fresh store: %v", err)
		}
		if wg.Token <= g.Token {
			t.Errorf("takeover token %d not above %d", wg.Token, g.Token)
		}
		if gs, err := holder.Renew(ctx, []driver.Hold{{Name: n, Owner: "h", TTL: ttl}}); err != nil || gs[0] != nil {
			t.Errorf("late renew = %v, %v; want nil", gs, err)
		}
		fresh.Release(ctx, []driver.Key{{Name: n, Owner: "w"}})
	})
}

// TestReleaseExpired: a hold whose time ran out on the server's clock is
// not released as if it were held, by the small release (the name's only
// entry) or the pipeline, and the name goes on with a larger token.
func TestReleaseExpired(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t)
		n := "release-expired/" + collection
		g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(g.Expires) + 50*time.Millisecond)
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || held[0] {
			t.Fatalf("Release of an expired hold = %v, %v; want not held", held, err)
		}
		g2, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "w", Mode: driver.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if g2.Token <= g.Token {
			t.Errorf("token %d after %d", g2.Token, g.Token)
		}
		if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "w"}}); err != nil || !held[0] {
			t.Fatalf("Release of a live hold = %v, %v; want held", held, err)
		}
	})
}

// The store refuses FerretDB, whose updates are not atomic, with an error
// that says so, at Open and at a New store's first call.
func TestRefusesFerretDB(t *testing.T) {
	drivertest.EachServer(t, "BATON_TEST_FERRETDB", func(t *testing.T, srv drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		_, err := batonmongo.Open(ctx, srv.URL, nil)
		if err == nil || !strings.Contains(err.Error(), "FerretDB") || !strings.Contains(err.Error(), "not atomic") {
			t.Fatalf("Open on FerretDB: %v, want a refusal naming FerretDB", err)
		}
		mc, err := mongo.Connect(options.Client().ApplyURI(srv.URL))
		if err != nil {
			t.Fatal(err)
		}
		defer mc.Disconnect(ctx)
		s, err := batonmongo.New(mc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.Acquire(ctx, &driver.Request{Name: "x", Owner: "o", Mode: driver.Exclusive, TTL: time.Second})
		if err == nil || !strings.Contains(err.Error(), "FerretDB") {
			t.Fatalf("Acquire through New on FerretDB: %v, want a refusal naming FerretDB", err)
		}
	})
}

// One release batch with two shared holds of one name and a key that
// holds nothing: both holds are reported released.
func TestReleaseBatchSameName(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t)
		n, m := "batch/"+collection, "batch-none/"+collection
		for _, o := range []string{"a", "b"} {
			if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: o, Mode: driver.Shared, TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "a"}, {Name: n, Owner: "b"}, {Name: m, Owner: "c"}})
		if err != nil || len(got) != 3 || !got[0] || !got[1] || got[2] {
			t.Fatalf("Release = %v, %v; want [true true false]", got, err)
		}
		if hs, err := s.List(ctx, &driver.Filter{Name: n}); err != nil || len(hs) != 0 {
			t.Errorf("holders left: %v, %v", hs, err)
		}
	})
}

// A release hands the lock to the head of the queue on the server, and the
// waiter, woken by the change stream with its grant, takes it without a
// command of its own: after the release, the waiter's store sends none
// until Lock has returned (but for the stream's getMore), and the token is
// the next one.
func TestHandOffWithoutAsking(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, srv drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		var sent atomic.Int64
		var counting atomic.Bool
		mon := &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
			if counting.Load() && e.CommandName != "getMore" { // getMore: the change stream's
				sent.Add(1)
			}
		}}
		mc, err := mongo.Connect(options.Client().ApplyURI(srv.URL).SetMonitor(mon))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mc.Disconnect(context.Background()) })
		holder := open(t)
		ws, err := batonmongo.New(mc, &batonmongo.Options{Database: holder.Collection().Database().Name(), Collection: collection})
		if err != nil {
			t.Fatal(err)
		}
		waiter, err := baton.New(ws, &baton.Options{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer waiter.Close()
		n := "handoff/" + collection
		g, err := holder.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *baton.Lease, 1)
		go func() {
			l, err := waiter.Lock(ctx, n, nil)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitListed(ctx, t, holder, n, 2)
		time.Sleep(50 * time.Millisecond) // the waiter blocks in its wait
		counting.Store(true)
		if ok, err := holder.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil || !ok[0] {
			t.Fatalf("Release = %v, %v", ok, err)
		}
		l := <-got
		counting.Store(false)
		if l == nil {
			return
		}
		defer l.Release(ctx)
		if l.Token() != g.Token+1 {
			t.Errorf("waiter's token %d, want %d", l.Token(), g.Token+1)
		}
		// A standalone server has no change streams: its waiters poll.
		if c := sent.Load(); c != 0 && srv.Name != "mongodb6single" {
			t.Errorf("the waiter sent %d commands after the release, want 0", c)
		}
	})
}

// waitListed waits until s lists k holders and queue entries of name.
func waitListed(ctx context.Context, t *testing.T, s *batonmongo.Store, name string, k int) {
	t.Helper()
	for {
		hs, err := s.List(ctx, &driver.Filter{Name: name, Queued: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) == k {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A hand-off is reported to the Store of the new holder only: a waiter in
// another Store, queued behind, is not woken, and that Store's change
// stream returns no event for it.
func TestHandOffReportedToItsStoreOnly(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, srv drivertest.Server) {
		if srv.Name == "mongodb6single" {
			return // no change streams: waiters poll
		}
		ctx := ctxFor(t, 30*time.Second)
		var events atomic.Int64
		mon := &event.CommandMonitor{Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) {
			if e.CommandName != "getMore" {
				return
			}
			if batch, ok := e.Reply.Lookup("cursor", "nextBatch").ArrayOK(); ok {
				if vs, _ := batch.Values(); len(vs) > 0 {
					events.Add(int64(len(vs)))
				}
			}
		}}
		holder := open(t)
		db := holder.Collection().Database().Name()
		var clients []*baton.Client
		for _, m := range []*event.CommandMonitor{nil, mon} {
			o := options.Client().ApplyURI(srv.URL)
			if m != nil {
				o.SetMonitor(m)
			}
			mc, err := mongo.Connect(o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { mc.Disconnect(context.Background()) })
			s, err := batonmongo.New(mc, &batonmongo.Options{Database: db, Collection: collection})
			if err != nil {
				t.Fatal(err)
			}
			c, err := baton.New(s, &baton.Options{TTL: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			clients = append(clients, c)
		}
		n := "routed/" + collection
		if _, err := holder.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		got := make([]chan *baton.Lease, 2)
		for i := range got {
			got[i] = make(chan *baton.Lease, 1)
			go func() {
				l, err := clients[i].Lock(ctx, n, nil)
				if err != nil {
					t.Error(err)
				}
				got[i] <- l
			}()
			waitListed(ctx, t, holder, n, 2+i) // a queued first, then b
		}
		time.Sleep(50 * time.Millisecond) // both block in their waits
		before := events.Load()
		if _, err := holder.Release(ctx, []driver.Key{{Name: n, Owner: "h"}}); err != nil {
			t.Fatal(err)
		}
		a := <-got[0]
		if a == nil {
			return
		}
		time.Sleep(300 * time.Millisecond)
		if e := events.Load() - before; e != 0 {
			t.Errorf("the other Store's change stream reported %d events for a hand-off to the first, want 0", e)
		}
		select {
		case <-got[1]:
			t.Fatal("b was granted while a holds")
		default:
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if b := <-got[1]; b != nil {
			if b.Token() != a.Token()+1 {
				t.Errorf("b's token %d, want %d", b.Token(), a.Token()+1)
			}
			b.Release(ctx)
		}
		if events.Load() == before {
			t.Error("b's Store was not told of its own hand-off")
		}
	})
}

// A write that finds the holder expired hands the lock to the head of the
// queue before deciding its own request: an exclusive acquire by a third
// owner queues behind the head, which holds the lock after that write
// with the next token, without having asked again.
func TestHandOffOnExpiry(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t)
		n := "expiry-handoff/" + collection
		req := func(owner string, ttl time.Duration) *driver.Request {
			return &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: ttl, Queue: true, QueueTTL: time.Minute}
		}
		g, err := s.Acquire(ctx, req("h", 300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, req("w", time.Minute)); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("w while h holds: %v, want ErrNotGranted", err)
		}
		time.Sleep(time.Until(g.Expires) + 50*time.Millisecond)
		if _, err := s.Acquire(ctx, req("z", time.Minute)); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("z after h expired: %v, want ErrNotGranted (w is ahead)", err)
		}
		hs, err := s.List(ctx, &driver.Filter{Name: n, Queued: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, h := range hs {
			got = append(got, fmt.Sprintf("%s queued=%v token=%d", h.Owner, h.Queued, h.Token))
		}
		want := []string{fmt.Sprintf("w queued=false token=%d", g.Token+1), "z queued=true token=0"}
		if !slices.Equal(got, want) {
			t.Errorf("after z's attempt: %q, want %q", got, want)
		}
		s.Release(ctx, []driver.Key{{Name: n, Owner: "w"}, {Name: n, Owner: "z"}})
	})
}

// BenchmarkCycle measures one exclusive acquire and release of a name
// nobody else uses, in the store, at w:1 (no wait for the journal or
// the other members: the server's own work) and at the default majority
// write concern; ns/op is one cycle. BENCHMARKS.md quotes it.
func BenchmarkCycle(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		for _, w := range []string{"1", "majority"} {
			b.Run(srv.Name+"/w="+w, func(b *testing.B) {
				ctx := context.Background()
				u, err := url.Parse(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				q := u.Query()
				q.Set("w", w)
				u.RawQuery = q.Encode()
				s, err := batonmongo.Open(ctx, u.String(), &batonmongo.Options{Collection: collection})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				req := &driver.Request{Name: "cycle/" + srv.Name + "/" + w, Owner: "o", Mode: driver.Exclusive, TTL: time.Minute}
				key := []driver.Key{{Name: req.Name, Owner: req.Owner}}
				for b.Loop() {
					if _, err := s.Acquire(ctx, req); err != nil {
						b.Fatal(err)
					}
					if held, err := s.Release(ctx, key); err != nil || !held[0] {
						b.Fatalf("Release = %v, %v", held, err)
					}
				}
			})
		}
	}
}
