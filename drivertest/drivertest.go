// Package drivertest is baton's conformance suite: every store's tests call
// Run with a way to open clients of that store.
package drivertest

import (
	"testing"

	"github.com/baton-go/baton/driver"
)

// Config says how to reach the store under test.
type Config struct {
	// Open returns a new client (its own connection or session) of the
	// store under test. Every call must reach the same backing store, so
	// that locks taken through one client are seen by all others.
	Open func(t testing.TB) driver.Store
	// Slow multiplies the suite's timeouts and TTLs, for stores whose
	// round trips are slow (default 1).
	Slow float64
}

// Run runs the conformance suite.
func Run(t *testing.T, cfg Config) {
	t.Helper()
}
