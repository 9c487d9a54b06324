package mysql_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestRenewBatch: a Renew of many holds renews the live holds of its
// owners, plain and long, and skips the others (expired, queued, held by
// another owner, never held), as one Renew each would. A renewed name's
// expired entries are deleted, and a long lease's durable copy gets the
// new expiry.
func TestRenewBatch(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, durable := range []bool{false, true} {
			t.Run(map[bool]string{false: "fast", true: "durable"}[durable], func(t *testing.T) {
				ctx := ctxFor(t, time.Minute)
				tb := freshTable(t)
				s := openWith(t, &mysql.Options{Table: tb, Durable: durable, MaxGrace: 3 * time.Second})
				acquire := func(name, owner string, ttl time.Duration, queue bool) *driver.Grant {
					t.Helper()
					mode := driver.Exclusive
					if name == "shared" {
						mode = driver.Shared
					}
					g, err := s.Acquire(ctx, &driver.Request{Name: name, Owner: owner, Mode: mode, TTL: ttl, Queue: queue, QueueTTL: time.Minute})
					if queue && errors.Is(err, driver.ErrNotGranted) {
						return nil
					}
					if err != nil {
						t.Fatalf("acquire %s %s: %v", name, owner, err)
					}
					return g
				}
				plain := acquire("plain", "me", 2*time.Second, false)
				long := acquire("long", "me", 20*time.Second, false)
				acquire("expired", "me", 200*time.Millisecond, false)
				acquire("queued", "other", time.Minute, false)
				acquire("queued", "me", time.Minute, true)
				acquire("other", "other", time.Minute, false)
				shared := acquire("shared", "me", 2*time.Second, false)
				acquire("shared", "other", 200*time.Millisecond, false)
				time.Sleep(300 * time.Millisecond)
				// Not in name order: the store sorts them.
				holds := []driver.Hold{
					{Name: "queued", Owner: "me", TTL: 2 * time.Second},
					{Name: "plain", Owner: "me", TTL: 2 * time.Second},
					{Name: "other", Owner: "me", TTL: 2 * time.Second},
					{Name: "long", Owner: "me", TTL: 20 * time.Second},
					{Name: "expired", Owner: "me", TTL: 2 * time.Second},
					{Name: "never", Owner: "me", TTL: 2 * time.Second},
					{Name: "shared", Owner: "me", TTL: 2 * time.Second},
				}
				gs, err := s.Renew(ctx, holds)
				if err != nil {
					t.Fatal(err)
				}
				for i, h := range holds {
					var want *driver.Grant
					switch h.Name {
					case "plain":
						want = plain
					case "long":
						want = long
					case "shared":
						want = shared
					}
					switch g := gs[i]; {
					case want == nil && g != nil:
						t.Errorf("%s: renewed (token %d), want not", h.Name, g.Token)
					case want == nil:
					case g == nil:
						t.Errorf("%s: not renewed", h.Name)
					case g.Token != want.Token || !g.Created.Equal(want.Created):
						t.Errorf("%s: token %d created %v, want %d %v", h.Name, g.Token, g.Created, want.Token, want.Created)
					case !g.Renewed.After(want.Renewed) || g.Expires.Sub(g.Renewed) != h.TTL:
						t.Errorf("%s: renewed %v expires %v, granted %v, TTL %v", h.Name, g.Renewed, g.Expires, want.Renewed, h.TTL)
					}
				}
				hs, err := s.List(ctx, &driver.Filter{Name: "shared", Queued: true})
				if err != nil || len(hs) != 1 || hs[0].Owner != "me" {
					t.Errorf("listed on the renewed name: %v, %v; want only the renewed hold", hs, err)
				}
				if !durable {
					var us int64
					q := "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires) FROM " + tb + "_long WHERE name = 'long'"
					if err := rawDB(t).QueryRowContext(ctx, q).Scan(&us); err != nil {
						t.Fatal(err)
					}
					if e := gs[3].Expires; us != e.UnixMicro() {
						t.Errorf("the long lease's durable copy expires at %v, want %v", time.UnixMicro(us).UTC(), e)
					}
				}
			})
		}
	})
}

// TestRenewBatchShortNames: the results of a batch are longer than its
// argument when names and owners are short; none is cut off.
func TestRenewBatchShortNames(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		s := open(t, freshTable(t))
		var holds []driver.Hold
		for i := range 300 {
			h := driver.Hold{Name: strconv.Itoa(i), Owner: "o", TTL: time.Minute}
			if _, err := s.Acquire(ctx, &driver.Request{Name: h.Name, Owner: h.Owner, Mode: driver.Exclusive, TTL: h.TTL}); err != nil {
				t.Fatal(err)
			}
			holds = append(holds, h)
		}
		gs, err := s.Renew(ctx, holds)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range gs {
			if g == nil {
				t.Fatalf("hold %d of %d not renewed", i, len(gs))
			}
		}
	})
}

// BenchmarkRenewMany measures the store's Renew of 1,000 holds (one owner,
// names of their own), the call keepalive makes for a client that holds
// many locks; ns/op is one call. docs/benchmarks-history.md quotes it.
func BenchmarkRenewMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			drivertest.RenewMany(b, open(b, freshTable(b)), 1000)
		})
	}
}

// BenchmarkReleaseMany measures the store's Release of 1,000 holds (one
// owner, names of their own), the call Close makes for a client that holds
// many locks; ns/op is one call.
func BenchmarkReleaseMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			drivertest.ReleaseMany(b, open(b, freshTable(b)), 1000)
		})
	}
}

// BenchmarkCloseMany measures Client.Close of a client that holds 100,000
// locks (-benchtime 1x: taking them, not timed, takes a minute).
func BenchmarkCloseMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			tb := freshTable(b)
			drivertest.CloseMany(b, func() driver.Store { return open(b, tb) }, 100000)
		})
	}
}
