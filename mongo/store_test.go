package mongo_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

func TestIndexes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t)
		// Existing indexes are skipped, whatever the server.
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
			if sp.Name == "baton_name_ticket" && (sp.Unique == nil || !*sp.Unique) {
				t.Errorf("the (name, ticket) index is not unique")
			}
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

// A takeover is refused when the holder renewed since it was observed:
// the versioned filter makes the two exclusive.
func TestRenewBeatsTakeover(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		holder, waiter := open(t), open(t)
		n := "renew-beats/" + collection
		ttl := 300 * time.Millisecond
		g, err := holder.Acquire(ctx, &driver.Request{Name: n, Owner: "h", Mode: driver.Exclusive, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		w := &driver.Request{Name: n, Owner: "w", Mode: driver.Exclusive, TTL: ttl}
		if _, err := waiter.Acquire(ctx, w); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("waiter: %v, want ErrNotGranted", err)
		}
		// The holder renews every TTL/3 while the waiter keeps looking: the
		// waiter never takes over.
		for i := 0; i < 9; i++ {
			time.Sleep(ttl / 3)
			gs, err := holder.Renew(ctx, []driver.Hold{{Name: n, Owner: "h", TTL: ttl}})
			if err != nil || gs[0] == nil {
				t.Fatalf("renew %d: %v %v", i, gs, err)
			}
			if _, err := waiter.Acquire(ctx, w); !errors.Is(err, driver.ErrNotGranted) {
				t.Fatalf("waiter after renew %d: %v, want ErrNotGranted", i, err)
			}
		}
		// The holder stops: after a TTL of seeing it unchanged, the waiter
		// takes over with a larger token, and the holder's late renewal fails.
		var wg *driver.Grant
		for wg == nil {
			time.Sleep(ttl / 5)
			wg, err = waiter.Acquire(ctx, w)
			if err != nil && !errors.Is(err, driver.ErrNotGranted) {
				t.Fatal(err)
			}
		}
		if wg.Token <= g.Token {
			t.Errorf("takeover token %d not above %d", wg.Token, g.Token)
		}
		if gs, err := holder.Renew(ctx, []driver.Hold{{Name: n, Owner: "h", TTL: ttl}}); err != nil || gs[0] != nil {
			t.Errorf("late renew = %v, %v; want nil", gs, err)
		}
		waiter.Release(ctx, []driver.Key{{Name: n, Owner: "w"}})
	})
}
