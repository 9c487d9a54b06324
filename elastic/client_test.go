package elastic_test

import (
	"net/http"
	"strings"
	"testing"

	elasticsearch7 "github.com/elastic/go-elasticsearch/v7"
	"github.com/opensearch-project/opensearch-go/v4"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/elastic"
)

// eachServerOf runs f on each listed server whose name starts with
// product, and fails t if there is none.
func eachServerOf(t *testing.T, product string, f func(t *testing.T)) {
	ran := false
	for _, s := range drivertest.Servers(serversEnv) {
		if strings.HasPrefix(s.Name, product) {
			ran = true
			t.Run(s.Name, f)
		}
	}
	if !ran {
		t.Fatalf("%s lists no %s server", serversEnv, product)
	}
}

// clientSuite runs the conformance suite's core checks (to keep the run
// short) through a store made over an official client.
func clientSuite(t *testing.T, c elastic.Transport) {
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
		// The caller's client keeps its idle connections after Close.
		IgnoreGoroutines: []string{
			"net/http.(*persistConn).readLoop",
			"net/http.(*persistConn).writeLoop",
		},
	})
}

// The official opensearch-go client is a Transport.
func TestOpenSearchGoClient(t *testing.T) {
	eachServerOf(t, "opensearch", func(t *testing.T) {
		c, err := opensearch.NewClient(opensearch.Config{Addresses: []string{serverURL(t)}})
		if err != nil {
			t.Fatal(err)
		}
		clientSuite(t, c)
	})
}

// The official go-elasticsearch client is one too. Since v7.14 it refuses
// a server that does not send X-Elastic-Product, which 7.10 does not: the
// client's own transport adds the header to the replies, as its users do
// with such servers.
func TestElasticsearchGoClient(t *testing.T) {
	eachServerOf(t, "elasticsearch", func(t *testing.T) {
		c, err := elasticsearch7.NewClient(elasticsearch7.Config{
			Addresses: []string{serverURL(t)},
			Transport: productHeader{http.DefaultTransport},
		})
		if err != nil {
			t.Fatal(err)
		}
		clientSuite(t, c)
	})
}

type productHeader struct{ rt http.RoundTripper }

func (p productHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.rt.RoundTrip(r)
	if err == nil {
		resp.Header.Set("X-Elastic-Product", "Elasticsearch")
	}
	return resp, err
}
