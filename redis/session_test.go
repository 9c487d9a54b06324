package redis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonredis "github.com/baton-go/baton/redis"
)

// TestSessions runs drivertest's checks of a store's sessions.
func TestSessions(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		p := fmt.Sprintf("%s-s%d", prefix, rand.Uint32())
		drivertest.Sessions(t, drivertest.SessionsConfig{
			Open: func(t testing.TB) driver.Store {
				return batonredis.Faulty{Store: open(t, &batonredis.Options{Prefix: p})}
			},
			Count: func(t testing.TB) int {
				s := open(t, &batonredis.Options{Prefix: p})
				keys, err := s.Client().Keys(context.Background(), p+":x:*").Result()
				if err != nil {
					t.Fatal(err)
				}
				return len(keys)
			},
			Slow: 1.5,
			AfterClose: func(t testing.TB, _ string) {
				s := open(t, &batonredis.Options{Prefix: p})
				if keys, err := s.Client().Keys(context.Background(), p+":x:*").Result(); err != nil || len(keys) != 0 {
					t.Fatalf("sessions after Close: %q, %v; want none", keys, err)
				}
			},
		})
	})
}

// modelStore opens a store of its own prefix whose scripts read a clock
// that clock moves on (FakeClock).
func modelStore(t *testing.T) (s *batonredis.Store, pass func(d time.Duration)) {
	t.Helper()
	p := fmt.Sprintf("%s-m%d", prefix, rand.Uint32())
	s = open(t, &batonredis.Options{Prefix: p})
	key := p + ":clock"
	batonredis.FakeClock(t, key)
	return s, func(d time.Duration) {
		if err := s.Client().IncrBy(context.Background(), key, d.Microseconds()).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSessionModel checks the scripts' judgment of holds in sessions
// against lockstate's through time (drivertest.SessionModel), on a clock
// the test moves on. After each step, every live hold that its name's
// hash says is bound to a live session is a member of that session.
func TestSessionModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 3*time.Minute)
		s, pass := modelStore(t)
		rdb := s.Client()
		drivertest.SessionModel(t, drivertest.SessionModelConfig{
			LiveOnly: true,
			Acquire: func(t testing.TB, req *driver.Request, sid string) (*driver.Grant, bool, error) {
				g, bound, err := s.AcquireIn(ctx, req, sid)
				if _, busy := err.(*driver.Busy); busy {
					err = driver.ErrNotGranted
				}
				return g, bound, err
			},
			Renew: func(t testing.TB, names []string, owner string, ttl time.Duration) []bool {
				hs := make([]driver.Hold, len(names))
				for i, n := range names {
					hs[i] = driver.Hold{Name: n, Owner: owner, TTL: ttl}
				}
				gs, err := s.Renew(ctx, hs)
				if err != nil {
					t.Fatal(err)
				}
				out := make([]bool, len(gs))
				for i, g := range gs {
					out[i] = g != nil
				}
				return out
			},
			Release: func(t testing.TB, name, owner string) bool {
				held, err := s.Release(ctx, []driver.Key{{Name: name, Owner: owner}})
				if err != nil {
					t.Fatal(err)
				}
				return held[0]
			},
			KeepSession: func(t testing.TB, id string, ttl time.Duration, create bool) bool {
				ok, err := s.KeepSession(ctx, id, ttl, create)
				if err != nil {
					t.Fatal(err)
				}
				return ok
			},
			Pass: func(t testing.TB, d time.Duration) { pass(d) },
			Live: func(t testing.TB, name string) map[string]time.Duration {
				hs, err := s.List(ctx, &driver.Filter{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]time.Duration{}
				for _, h := range hs {
					if !h.Queued && h.Left > 0 {
						got[fmt.Sprintf("%s %d %d", h.Owner, h.Mode, h.Limit)] = h.Left
					}
				}
				return got
			},
			AfterStep: func(t testing.TB, step int, what string, names []string) {
				now := serverNow(t, s, s.Prefix()+":clock")
				for _, n := range names {
					hs, err := s.List(ctx, &driver.Filter{Name: n})
					if err != nil {
						t.Fatal(err)
					}
					key := s.StateKey(n)
					tag := key[len(s.Prefix())+2 : len(key)-3]
					for _, h := range hs {
						if h.Left <= 0 {
							continue
						}
						sid, err := rdb.HGet(ctx, key, "b:"+h.Owner).Result()
						if err != nil {
							continue // not bound
						}
						e, err := rdb.HGet(ctx, s.SessionKey(sid), "e").Int64()
						if err != nil || e <= now {
							continue // the session is gone
						}
						if ok, _ := rdb.HExists(ctx, s.SessionKey(sid), "m:"+tag+h.Owner).Result(); !ok {
							t.Fatalf("step %d (%s): %s's hold of %s is bound to live session %s, which does not have it", step, what, h.Owner, n, sid)
						}
					}
				}
			},
		})
	})
}

// serverNow is the server's time in µs as the scripts read it, clock key
// included.
func serverNow(t testing.TB, s *batonredis.Store, clock string) int64 {
	t.Helper()
	ctx := context.Background()
	tm, err := s.Client().Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	off, _ := s.Client().Get(ctx, clock).Int64()
	return tm.UnixMicro() + off
}

// TestSessionWalk: a session's renewal extends every hold bound to it,
// over the several calls that thousands of holds take, and ends the
// session when one of its holds is gone.
func TestSessionWalk(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		s, pass := modelStore(t)
		const n = 2500
		ttl, sttl := 10*time.Second, 30*time.Second
		if ok, err := s.KeepSession(ctx, "w", sttl, true); !ok || err != nil {
			t.Fatalf("KeepSession(create): %v, %v", ok, err)
		}
		for i := range n {
			g, bound, err := s.AcquireIn(ctx, &driver.Request{Name: fmt.Sprint("w/", i), Owner: "o", Mode: driver.Exclusive, TTL: ttl}, "w")
			if err != nil || !bound || g.Extended {
				t.Fatalf("AcquireIn %d: %+v, bound %v, %v", i, g, bound, err)
			}
		}
		if b, u := s.SessionCounts("w"); b != n || u != 0 {
			t.Fatalf("counted %d bindings and %d unbindings, want %d and 0", b, u, n)
		}
		left := func() (lo, hi time.Duration) {
			hs, err := s.List(ctx, &driver.Filter{Prefix: "w/"})
			if err != nil {
				t.Fatal(err)
			}
			if len(hs) != n {
				t.Fatalf("%d holders listed, want %d", len(hs), n)
			}
			lo, hi = hs[0].Left, hs[0].Left
			for _, h := range hs {
				lo, hi = min(lo, h.Left), max(hi, h.Left)
			}
			return lo, hi
		}
		pass(20 * time.Second) // past the holds' own TTL, within the session's
		if lo, _ := left(); lo <= 0 || lo > 10*time.Second {
			t.Fatalf("before the session's renewal: %v left at least, want the session's last 10s", lo)
		}
		if ok, err := s.KeepSession(ctx, "w", sttl, false); !ok || err != nil {
			t.Fatalf("KeepSession: %v, %v", ok, err)
		}
		if lo, hi := left(); lo < 25*time.Second || hi > sttl {
			t.Fatalf("after the session's renewal: %v–%v left, want the session's 30s", lo, hi)
		}
		// A hold the session should have kept is gone: the next renewal
		// ends the session, and it is never renewed again.
		if err := s.Client().Del(ctx, s.StateKey("w/1234")).Err(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if ok, err := s.KeepSession(ctx, "w", sttl, false); ok || err != nil {
				t.Fatalf("KeepSession with a hold gone: %v, %v; want it ended", ok, err)
			}
		}
	})
}

// TestSessionLostWrites: a server that lost a binding or an unbinding the
// client saw it count (a restart from an append-only file a second
// behind, a failover to a replica behind) ends the session at its next
// renewal. The server's loss is replayed by restoring the keys the lost
// call wrote.
func TestSessionLostWrites(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		s := open(t, &batonredis.Options{Prefix: fmt.Sprintf("%s-l%d", prefix, rand.Uint32())})
		rdb := s.Client()
		ttl := time.Minute
		acquire := func(sid, name string) {
			t.Helper()
			if _, bound, err := s.AcquireIn(ctx, &driver.Request{Name: name, Owner: "o", Mode: driver.Exclusive, TTL: ttl}, sid); !bound || err != nil {
				t.Fatalf("AcquireIn(%s): bound %v, %v", name, bound, err)
			}
		}
		// dump returns the keys' values, to restore them as they were.
		dump := func(keys ...string) func() {
			vals := make([]string, len(keys))
			for i, k := range keys {
				v, err := rdb.Dump(ctx, k).Result()
				if err != nil {
					t.Fatalf("DUMP %s: %v", k, err)
				}
				vals[i] = v
			}
			return func() {
				for i, k := range keys {
					if err := rdb.RestoreReplace(ctx, k, 0, vals[i]).Err(); err != nil {
						t.Fatalf("RESTORE %s: %v", k, err)
					}
				}
			}
		}
		keep := func(sid string) bool {
			t.Helper()
			ok, err := s.KeepSession(ctx, sid, ttl, false)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		for _, c := range []struct{ what, sid string }{{"binding", "lb"}, {"unbinding", "lu"}} {
			if ok, err := s.KeepSession(ctx, c.sid, ttl, true); !ok || err != nil {
				t.Fatalf("KeepSession(create): %v, %v", ok, err)
			}
			acquire(c.sid, c.sid+"/a")
			if !keep(c.sid) {
				t.Fatalf("%s: the session ended with nothing lost", c.what)
			}
			switch c.what {
			case "binding": // a second hold, which the server forgets
				restore := dump(s.SessionKey(c.sid))
				acquire(c.sid, c.sid+"/b")
				restore()
				if err := rdb.Del(ctx, s.StateKey(c.sid+"/b")).Err(); err != nil {
					t.Fatal(err)
				}
			case "unbinding": // a release, which the server forgets
				restore := dump(s.SessionKey(c.sid), s.StateKey(c.sid+"/a"))
				if held, err := s.Release(ctx, []driver.Key{{Name: c.sid + "/a", Owner: "o"}}); err != nil || !held[0] {
					t.Fatalf("Release: %v, %v", held, err)
				}
				restore()
			}
			if keep(c.sid) {
				t.Errorf("a session whose server lost a %s was renewed", c.what)
			}
		}
	})
}

// BenchmarkSessionRenewal renews a session of 100,000 holds: the server's
// work every third of the TTL that the client's one call per thousand
// holds sets off (ms/op is the whole walk).
func BenchmarkSessionRenewal(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			ctx := ctxFor(b, 5*time.Minute)
			p := fmt.Sprintf("%s-b%d", prefix, rand.Uint32())
			s, err := batonredis.Open(ctx, srv.URL, &batonredis.Options{Prefix: p})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			const n, ttl = 100_000, 5 * time.Minute
			if ok, err := s.KeepSession(ctx, "s", ttl, true); !ok || err != nil {
				b.Fatal(ok, err)
			}
			for i := range n {
				if _, bound, err := s.AcquireIn(ctx, &driver.Request{Name: fmt.Sprint("b/", i), Owner: "o", Mode: driver.Exclusive, TTL: ttl}, "s"); !bound || err != nil {
					b.Fatal(bound, err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if ok, err := s.KeepSession(ctx, "s", ttl, false); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
			b.StopTimer()
			_ = batonredis.DeleteKeys(srv.URL, p)
		})
	}
}

// TestCloseDuringRenewal: a client's Close releases every hold of its
// session even when the session's renewal comes due while it does. The
// renewal would find the session ended by the release, and the Keeper
// would then delete its record, and with it the list of holds the
// release goes through.
func TestCloseDuringRenewal(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		p := fmt.Sprintf("%s-c%d", prefix, rand.Uint32())
		s := open(t, &batonredis.Options{Prefix: p})
		ttl := 3 * time.Second
		c, err := baton.New(s, &baton.Options{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const n = 2500 // three calls of the release
		for i := range n {
			if _, err := c.TryLock(ctx, fmt.Sprint("c/", i), nil); err != nil {
				t.Fatal(err)
			}
		}
		rdb := open(t, &batonredis.Options{Prefix: p}).Client() // outlives c's store
		if xs, err := rdb.Keys(ctx, p+":x:*").Result(); err != nil || len(xs) != 1 {
			t.Fatalf("sessions: %q, %v; want one", xs, err)
		}
		// A renewal is due every third of the TTL: one comes during the pause.
		batonredis.SlowSessionRelease(s, ttl/3+ttl/10)
		c.Close()
		left, err := rdb.Keys(ctx, p+":{*}:r").Result()
		if err != nil || len(left) != 0 {
			t.Fatalf("after Close, %d of %d names still held (%v)", len(left), n, err)
		}
		if xs, err := rdb.Keys(ctx, p+":x:*").Result(); err != nil || len(xs) != 0 {
			t.Fatalf("sessions after Close: %q, %v; want none", xs, err)
		}
	})
}
