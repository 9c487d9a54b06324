package drivertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// RenewMany benchmarks s's Renew of n holds of one owner, on names of
// their own that it takes first: the call keepalive makes for a client
// that holds many locks. ns/op is one call.
func RenewMany(b *testing.B, s driver.Store, n int) {
	b.Helper()
	ctx := context.Background()
	holds := make([]driver.Hold, n)
	for i := range holds {
		req := &driver.Request{Name: fmt.Sprintf("renew-%04d", i), Owner: "owner", Mode: driver.Exclusive, TTL: time.Minute}
		if _, err := s.Acquire(ctx, req); err != nil {
			b.Fatal(err)
		}
		holds[i] = driver.Hold{Name: req.Name, Owner: req.Owner, TTL: time.Minute}
	}
	for b.Loop() {
		gs, err := s.Renew(ctx, holds)
		if err != nil {
			b.Fatal(err)
		}
		if gs[len(gs)-1] == nil {
			b.Fatal("a hold was not renewed")
		}
	}
}

// ReleaseMany benchmarks s's Release of n holds of one owner, on names of
// their own that it takes again before each call (not timed): the calls
// Close makes for a client that holds many locks. ns/op is one call.
func ReleaseMany(b *testing.B, s driver.Store, n int) {
	b.Helper()
	ctx := context.Background()
	keys := make([]driver.Key, n)
	for i := range keys {
		keys[i] = driver.Key{Name: fmt.Sprintf("release-%04d", i), Owner: "owner"}
	}
	for b.Loop() {
		b.StopTimer()
		for _, k := range keys {
			if _, err := s.Acquire(ctx, &driver.Request{Name: k.Name, Owner: k.Owner, Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		held, err := s.Release(ctx, keys)
		if err != nil {
			b.Fatal(err)
		}
		if !held[len(held)-1] {
			b.Fatal("a hold was not released")
		}
	}
}

// CloseMany benchmarks Client.Close of a client that holds n locks, which
// it takes first (not timed), four at a time, over a store from open (the
// Close closes it). It reports the Close as close-ms.
func CloseMany(b *testing.B, open func() driver.Store, n int) {
	b.Helper()
	ctx := context.Background()
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		c, err := baton.New(open(), &baton.Options{TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 4 {
					if _, err := c.TryLock(ctx, fmt.Sprintf("close-%d-%06d", round, i), nil); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		c.Close()
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "close-ms")
		b.ReportMetric(0, "ns/op")
	}
}
