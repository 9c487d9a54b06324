package redis_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
)

// BenchmarkScriptRTT measures one client's round trip to a script that
// spends longer and longer on the server. On this project's machines (2
// virtual CPUs), a round trip costs ~25µs while the server answers within
// a few µs and jumps to ~80µs beyond: an idle CPU that waits longer sleeps,
// and waking it costs that much. A PING or SET NX stays under the jump;
// any Lua script that reads and writes a few keys does not. docs/benchmarks-history.md
// quotes it:
//
//	go test -run XXX -bench ScriptRTT -benchtime 3000x -count 3 ./redis
func BenchmarkScriptRTT(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) { scriptRTT(b) })
	}
}

func scriptRTT(b *testing.B) {
	ctx := context.Background()
	o, err := redis.ParseURL(serverURL(b))
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	loop := redis.NewScript(`local x = 0 for i = 1, tonumber(ARGV[1]) do x = x + i end return x`)
	if err := loop.Load(ctx, rdb).Err(); err != nil {
		b.Fatal(err)
	}
	b.Run("ping", func(b *testing.B) { p50(b, func() { rdb.Ping(ctx) }) })
	for _, n := range []int{0, 300, 1000, 3000, 10000} {
		b.Run(fmt.Sprintf("loop=%d", n), func(b *testing.B) { p50(b, func() { loop.Run(ctx, rdb, nil, n) }) })
	}
}

// p50 runs f b.N times and reports its median time as p50-µs, which says
// more than the mean on a machine this noisy.
func p50(b *testing.B, f func()) {
	ds := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t := time.Now()
		f()
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/1e3, "p50-µs")
}

// BenchmarkRenewMany measures the store's Renew of 1,000 holds (one owner,
// names of their own), the call keepalive makes for a client that holds
// many locks; ns/op is one call, B/op and allocs/op the client's share.
//
//	go test -run XXX -bench RenewMany -benchmem -benchtime 300x -count 3 ./redis
func BenchmarkRenewMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			b.ReportAllocs()
			drivertest.RenewMany(b, open(b, nil), 1000)
		})
	}
}

// BenchmarkCloseMany measures Client.Close of a client that holds 100,000
// locks, bound to its session (-benchtime 1x: taking them is not timed).
//
//	go test -run XXX -bench CloseMany -benchtime 1x -count 3 ./redis
func BenchmarkCloseMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			drivertest.CloseMany(b, func() driver.Store { return open(b, nil) }, 100000)
		})
	}
}

// BenchmarkServerCycle measures the server's time per acquisition, from
// INFO commandstats (so it resets the server's statistics), reported as
// µs per acquisition: evalsha-µs for the scripts, all-µs for every
// command. "contended" is one client's steady state of a contended name
// (the holder's release, which hands the name to the head of a queue of
// seven exclusive requests, then a new request joining the queue), run in
// turn, without waits; "free" an acquire and release of a name nobody
// holds (1,000 names in turn).
//
//	go test -run XXX -bench ServerCycle -benchtime 20000x -count 2 ./redis
func BenchmarkServerCycle(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			ctx := context.Background()
			s := open(b, nil)
			o, err := redis.ParseURL(serverURL(b))
			if err != nil {
				b.Fatal(err)
			}
			rdb := redis.NewClient(o)
			defer rdb.Close()
			req := func(name string) *driver.Request {
				return &driver.Request{Name: name, Owner: rand.Text(), Mode: driver.Exclusive, TTL: 10 * time.Second,
					Queue: true, QueueTTL: 30 * time.Second}
			}
			b.Run("contended", func(b *testing.B) {
				name := "cycle-" + rand.Text()
				var q []*driver.Request
				for range 8 {
					r := req(name)
					_, _ = s.Acquire(ctx, r) // the first holds, the others queue
					q = append(q, r)
				}
				rdb.ConfigResetStat(ctx)
				for b.Loop() {
					h := q[0]
					q = q[1:]
					if _, err := s.Release(ctx, []driver.Key{{Name: name, Owner: h.Owner}}); err != nil {
						b.Fatal(err)
					}
					r := req(name)
					if _, err := s.Acquire(ctx, r); !errors.Is(err, driver.ErrNotGranted) {
						b.Fatalf("a request on a contended name: %v", err)
					}
					q = append(q, r)
				}
				serverTimes(b, rdb)
				var keys []driver.Key
				for _, r := range q {
					keys = append(keys, driver.Key{Name: name, Owner: r.Owner})
				}
				_, _ = s.Release(ctx, keys)
			})
			b.Run("free", func(b *testing.B) {
				var names []string
				for range 1000 {
					names = append(names, "cycle-"+rand.Text())
				}
				rdb.ConfigResetStat(ctx)
				i := 0
				for b.Loop() {
					r := req(names[i%len(names)])
					i++
					if _, err := s.Acquire(ctx, r); err != nil {
						b.Fatal(err)
					}
					if _, err := s.Release(ctx, []driver.Key{{Name: r.Name, Owner: r.Owner}}); err != nil {
						b.Fatal(err)
					}
				}
				serverTimes(b, rdb)
			})
		})
	}
}

// serverTimes reports the server's time in scripts and in all commands
// since its statistics were reset, per iteration.
func serverTimes(b *testing.B, rdb *redis.Client) {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var all, scripts float64
	for l := range strings.Lines(info) {
		cmd, stats, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":")
		if !ok || strings.HasPrefix(cmd, "config") || cmd == "info" {
			continue
		}
		var calls, usec float64
		if _, err := fmt.Sscanf(stats, "calls=%g,usec=%g", &calls, &usec); err != nil {
			continue
		}
		all += usec
		if cmd == "evalsha" || cmd == "eval" {
			scripts += usec
		}
	}
	b.ReportMetric(scripts/float64(b.N), "evalsha-µs")
	b.ReportMetric(all/float64(b.N), "all-µs")
}
