package redis_test

import (
	"context"
	"fmt"
	"slices"
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
