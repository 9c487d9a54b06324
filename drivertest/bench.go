package drivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

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
