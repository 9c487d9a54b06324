package mysql_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
)

// BenchmarkRenewMany measures the store's Renew of 1,000 holds (one owner,
// names of their own), the call keepalive makes for a client that holds
// many locks; ns/op is one call. docs/benchmarks-history.md quotes it.
func BenchmarkRenewMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			ctx := context.Background()
			s := open(b, freshTable(b))
			holds := make([]driver.Hold, 1000)
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
		})
	}
}
