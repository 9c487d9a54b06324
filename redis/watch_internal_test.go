package redis

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
)

func TestPrefetchUsable(t *testing.T) {
	base := time.Now()
	ms := time.Millisecond
	for _, tc := range []struct {
		elapsed, blocked, extra time.Duration
		want                    bool
	}{
		{elapsed: 10 * ms, blocked: 9 * ms, extra: 50 * ms, want: true}, // woken after 9ms, 1ms round trip
		{elapsed: 2 * time.Second, blocked: 1990 * ms, extra: 50 * ms, want: true},
		{elapsed: 2 * time.Second, blocked: 1000 * ms, extra: 50 * ms, want: false}, // a second between grant and use
		{elapsed: 100 * ms, blocked: 0, extra: 50 * ms, want: false},
		{elapsed: 10 * ms, blocked: -1 * ms, extra: 50 * ms, want: false}, // clocks of two servers
		{elapsed: 10 * ms, blocked: 20 * ms, extra: 50 * ms, want: false}, // a server clock that ran ahead
		{elapsed: 40 * ms, blocked: 0, extra: 50 * ms, want: true},
		// The server's clock is taken to run up to 1% fast.
		{elapsed: 10 * time.Second, blocked: 9990 * ms, extra: 50 * ms, want: false},
		{elapsed: 10 * time.Second, blocked: 10000 * ms, extra: 150 * ms, want: true},
	} {
		p := &prefetch{sent: base, blocked: tc.blocked, extra: tc.extra}
		if got := p.usable(base.Add(tc.elapsed)); got != tc.want {
			t.Errorf("elapsed %v, blocked %v, extra %v: usable %v, want %v", tc.elapsed, tc.blocked, tc.extra, got, tc.want)
		}
	}
	for _, tc := range []struct{ ttl, extra time.Duration }{
		{10 * ms, ms}, {100 * ms, 5 * ms}, {time.Second, 50 * ms}, {time.Minute, 50 * ms},
	} {
		if got := extraFor(tc.ttl); got != tc.extra {
			t.Errorf("extraFor(%v) = %v, want %v", tc.ttl, got, tc.extra)
		}
	}
}

func TestBlockArg(t *testing.T) {
	for _, tc := range []struct {
		rt   time.Duration
		want string
	}{
		{0, "2"}, // go-redis's default read timeout, 5s
		{2 * time.Second, "1.500"},
		{time.Second, "0.750"},
		{-1, "2"}, // no read timeout
	} {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: tc.rt})
		if got := blockArg(rdb); got != tc.want {
			t.Errorf("read timeout %v: BLPOP timeout %s, want %s", tc.rt, got, tc.want)
		}
		rdb.Close()
	}
}

// A grant obtained by a waiter's pipeline but taken too late is not handed
// out: Acquire asks the server, which extends the hold and counts its TTL
// from then.
func TestStalePrefetch(t *testing.T) {
	drivertest.EachServer(t, "BATON_TEST_REDIS", func(t *testing.T, srv drivertest.Server) {
		u := srv.URL
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := Open(ctx, u, &Options{Prefix: fmt.Sprintf("batontest-internal-%d", time.Now().UnixNano())})
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			s.rdb.Del(ctx, s.base("n")+"c")
			s.Close()
		}()
		h := &driver.Request{Name: "n", Owner: "h", Mode: driver.Exclusive, TTL: time.Minute}
		if _, err := s.Acquire(ctx, h); err != nil {
			t.Fatal(err)
		}
		w := &driver.Request{Name: "n", Owner: "w", Mode: driver.Exclusive, TTL: time.Minute, Queue: true, QueueTTL: time.Minute}
		if _, err := s.Acquire(ctx, w); err == nil {
			t.Fatal("second owner granted")
		}
		watch, _ := s.Watch(ctx, w)
		defer watch.Close()
		s.Release(ctx, []driver.Key{{Name: "n", Owner: "h"}})
		if err := watch.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		p := s.prefetched[w]
		if p == nil {
			s.mu.Unlock()
			t.Fatal("no grant prefetched")
		}
		if d := p.grant.Expires.Sub(p.grant.Renewed); d != time.Minute+extraFor(time.Minute) {
			t.Errorf("prefetched grant lasts %v, want the TTL plus %v", d, extraFor(time.Minute))
		}
		p.sent = p.sent.Add(-time.Second) // as if baton took it a second late
		s.mu.Unlock()
		g, err := s.Acquire(ctx, w)
		if err != nil {
			t.Fatal(err)
		}
		if !g.Extended || g.Token != p.grant.Token || !g.Renewed.After(p.grant.Renewed) {
			t.Errorf("Acquire = %+v, want the prefetched hold (token %d) extended by the server", g, p.grant.Token)
		}
		s.Release(ctx, []driver.Key{{Name: "n", Owner: "w"}})
	})
}
