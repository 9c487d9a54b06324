package mongo_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

// collection keeps this run's documents apart from other runs' on the
// shared server; TestMain drops it, and the conformance cases' own
// collections, named after it.
var collection = fmt.Sprintf("batontest_%08x", rand.Uint32())

// caseCollection is the collection of one conformance case.
func caseCollection(t testing.TB) string {
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	return fmt.Sprintf("%s_%08x", collection, h.Sum32())
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, srv := range drivertest.Servers(serversEnv) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if s, err := batonmongo.Open(ctx, srv.URL, &batonmongo.Options{Collection: collection}); err == nil {
			db := s.Collection().Database()
			names, err := db.ListCollectionNames(ctx, bson.D{})
			if err != nil {
				fmt.Fprintln(os.Stderr, "listing the test collections:", err)
			}
			for _, n := range names {
				if strings.HasPrefix(n, collection) {
					if err := db.Collection(n).Drop(ctx); err != nil {
						fmt.Fprintln(os.Stderr, "dropping a test collection:", err)
					}
				}
			}
			s.Close()
		}
		cancel()
	}
	os.Exit(code)
}

// serversEnv lists the servers the tests run on (scripts/servers env).
const serversEnv = "BATON_TEST_MONGO"

// serverURL is the URL of the server t runs on.
func serverURL(t testing.TB) string {
	t.Helper()
	return drivertest.ServerOf(t, serversEnv).URL
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB) *batonmongo.Store {
	t.Helper()
	return openIn(t, collection)
}

func openIn(t testing.TB, coll string) *batonmongo.Store {
	t.Helper()
	s, err := batonmongo.Open(ctxFor(t, 30*time.Second), serverURL(t), &batonmongo.Options{Collection: coll})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) { conformance(t) })
}

func conformance(t *testing.T) {
	drivertest.Run(t, drivertest.Config{
		Open: func(t testing.TB) driver.Store { return openIn(t, caseCollection(t)) },
	})
}

// TestModel checks the store against lockstate's rules, through its
// documents, with the hand-off to queued requests (lockstate.Promote) that
// every write letting an entry go does.
func TestModel(t *testing.T) {
	// Every command first tries the small ones (acquireAlone,
	// releaseAlone), so that the model checks them and the pipelines.
	defer batonmongo.SetBusyFor(0)()
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Model(t, drivertest.ModelConfig{
			Open:     func(t testing.TB) driver.Store { return openIn(t, caseCollection(t)) },
			HandsOff: true,
			Steps:    300,
		})
	})
}
