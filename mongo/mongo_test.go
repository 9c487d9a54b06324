package mongo_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

// collection keeps this run's documents apart from other runs' on the
// shared server; TestMain drops it.
var collection = fmt.Sprintf("batontest_%08x", rand.Uint32())

func TestMain(m *testing.M) {
	code := m.Run()
	if u := os.Getenv("BATON_TEST_MONGO"); u != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if s, err := batonmongo.Open(ctx, u, &batonmongo.Options{Collection: collection}); err == nil {
			if err := s.Collection().Drop(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "dropping the test collection:", err)
			}
			s.Close()
		}
		cancel()
	}
	os.Exit(code)
}

// serverURL is the test server's URL; the tests need one.
func serverURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("BATON_TEST_MONGO")
	if u == "" {
		t.Fatal("BATON_TEST_MONGO is not set: run `scripts/servers up ferretdb` and export \"$(scripts/servers env ferretdb)\"")
	}
	return u
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB) *batonmongo.Store {
	t.Helper()
	s, err := batonmongo.Open(ctxFor(t, 30*time.Second), serverURL(t), &batonmongo.Options{Collection: collection})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, drivertest.Config{
		Open: func(t testing.TB) driver.Store { return open(t) },
	})
}
