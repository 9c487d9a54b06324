package elastic_test

import (
	"testing"

	"github.com/opensearch-project/opensearch-go/v4"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/elastic"
)

// The official opensearch-go client is a Transport: the conformance suite
// passes through it too (its core checks, to keep the run short).
func TestOpenSearchGoClient(t *testing.T) {
	c, err := opensearch.NewClient(opensearch.Config{Addresses: []string{serverURL(t)}})
	if err != nil {
		t.Fatal(err)
	}
	drivertest.Run(t, drivertest.Config{
		Open: func(t testing.TB) driver.Store {
			s, err := elastic.New(c, &elastic.Options{Index: index})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		Slow:       slow,
		Contenders: 3,
	})
}
