package postgres_test

import (
	"testing"

	"github.com/baton-go/baton/drivertest"
)

// BenchmarkRenewMany measures the store's Renew of 1,000 inline holds (one
// owner, names of their own), the call keepalive makes for a client that
// holds many locks; ns/op is one call. docs/benchmarks-history.md quotes
// it.
func BenchmarkRenewMany(b *testing.B) {
	for _, srv := range drivertest.Servers(serversEnv) {
		b.Run(srv.Name, func(b *testing.B) {
			drivertest.RenewMany(b, open(b, freshTable(b)), 1000)
		})
	}
}
