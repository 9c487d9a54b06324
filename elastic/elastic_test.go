package elastic_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/elastic"
)

// index keeps this run's locks apart from other runs' on the shared server.
var index = fmt.Sprintf("batontest-%08x", rand.Uint32())

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range drivertest.Servers(serversEnv) {
		req, _ := http.NewRequest(http.MethodDelete, strings.TrimSuffix(s.URL, "/")+"/"+index+"*", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	os.Exit(code)
}

// serversEnv lists the servers the tests run on (scripts/servers env), by
// their http:// URLs.
const serversEnv = "BATON_TEST_ELASTIC"

// serverURL is the http:// URL of the server t runs on.
func serverURL(t testing.TB) string {
	t.Helper()
	return strings.TrimSuffix(drivertest.ServerOf(t, serversEnv).URL, "/")
}

// storeURL is the URL of the server t runs on in this package's scheme
// for it: elasticsearch:// or opensearch://.
func storeURL(t testing.TB, idx string) string {
	t.Helper()
	scheme := "opensearch://"
	if strings.HasPrefix(drivertest.ServerOf(t, serversEnv).Name, "elasticsearch") {
		scheme = "elasticsearch://"
	}
	return scheme + strings.TrimPrefix(serverURL(t), "http://") + "/" + idx
}

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, o *elastic.Options) *elastic.Store {
	t.Helper()
	s, err := elastic.Open(context.Background(), storeURL(t, index), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The cached server clock makes expiry coarse (see the package doc):
// Slow 5 gives the suite's short TTLs room for ClockStep on both sides.
const slow = 5

func TestConformance(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return open(t, nil) },
			Slow: slow,
		})
	})
}

func TestBadOptions(t *testing.T) {
	tr := &elastic.HTTPTransport{}
	for _, idx := range []string{"Upper", "-x", "_x", "a b", "a/b", "a*", ".", "..", strings.Repeat("i", 256), "a,b", "é"} {
		if _, err := elastic.New(tr, &elastic.Options{Index: idx}); err == nil || !strings.Contains(err.Error(), "index") {
			t.Errorf("index %q: %v, want an error naming the index", idx, err)
		}
	}
	if _, err := elastic.New(nil, nil); err == nil {
		t.Error("New(nil): no error")
	}
	if _, err := elastic.New(tr, &elastic.Options{ClockStep: -time.Second}); err == nil {
		t.Error("negative ClockStep: no error")
	}
	for _, u := range []string{
		"postgres://h/x", "opensearch://", "opensearch://h?bogus=1", "opensearch://h?timeout=-1s",
		"opensearch://h?insecure_skip_verify=maybe", "opensearch://h?ca_file=/x.pem",
		"opensearch+https://h?ca_file=/nonexistent.pem", "opensearch://h?clock_step=x",
	} {
		if _, _, err := elastic.ParseURL(u, nil); err == nil {
			t.Errorf("ParseURL(%q): no error", u)
		}
	}
	_, err := elastic.Open(context.Background(), "opensearch://u:secret@h:1/Bad", nil)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("Open with a bad index: %v (want an error, without the password)", err)
	}
}

func TestParseURL(t *testing.T) {
	tr, o, err := elastic.ParseURL("elasticsearch+https://u:p%40ss@es.example:9243/locks?api_key=QUJD&server_name=es&create_index=false&clock_step=400ms&timeout=5s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.URL.String() != "https://es.example:9243" || tr.Username != "u" || tr.Password != "p@ss" || tr.APIKey != "QUJD" {
		t.Errorf("transport %+v", tr)
	}
	if o.Index != "locks" || !o.NoCreateIndex || o.ClockStep != 400*time.Millisecond {
		t.Errorf("options %+v", o)
	}
	tls := tr.Client.Transport.(*http.Transport).TLSClientConfig
	if tls.ServerName != "es" || tls.InsecureSkipVerify || tr.Client.Timeout != 5*time.Second {
		t.Errorf("TLS %+v, timeout %v", tls, tr.Client.Timeout)
	}
	tr, o, err = elastic.ParseURL("opensearch://localhost", &elastic.Options{Index: "mine"})
	if err != nil || tr.URL.String() != "http://localhost:9200" || o.Index != "mine" {
		t.Errorf("defaults: %v %+v %v", tr.URL, o, err)
	}
}

// An API key goes in the Authorization header, and wins over a password.
func TestTransportAuth(t *testing.T) {
	var got []string
	tr := &elastic.HTTPTransport{
		Client: &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
			got = append(got, r.URL.String(), r.Header.Get("Authorization"))
			return nil, errors.New("stop")
		})},
	}
	tr.URL, _ = url.Parse("https://h:1/prefix")
	tr.Username, tr.Password, tr.APIKey = "u", "p", "KEY"
	req, _ := http.NewRequest(http.MethodGet, "/idx/_doc/x?a=b", nil)
	tr.Perform(req)
	if len(got) != 2 || got[0] != "https://h:1/prefix/idx/_doc/x?a=b" || got[1] != "ApiKey KEY" {
		t.Errorf("sent %q", got)
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The server's clock decides: a hold that the driver grants for a TTL is
// not taken over before TTL has passed on this machine's clock, whatever
// the lag of the server's cached clock; and a late renewal of a hold that
// was taken over changes nothing.
func TestTakeoverNotEarly(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		a, b := open(t, nil), open(t, nil)
		ttl := 300 * time.Millisecond
		for i := range 10 {
			n := fmt.Sprintf("takeover/%s/%d", index, i)
			sent := time.Now()
			g, err := a.Acquire(ctx, &driver.Request{Name: n, Owner: "a", Mode: driver.Exclusive, TTL: ttl})
			if err != nil {
				t.Fatal(err)
			}
			for {
				g2, err := b.Acquire(ctx, &driver.Request{Name: n, Owner: "b", Mode: driver.Exclusive, TTL: ttl})
				if err == nil {
					if since := time.Since(sent); since < ttl {
						t.Fatalf("taken over %v after the grant, before its TTL %v", since, ttl)
					}
					if g2.Token <= g.Token {
						t.Fatalf("token %d after %d", g2.Token, g.Token)
					}
					break
				}
				if !errors.Is(err, driver.ErrNotGranted) {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			gs, err := a.Renew(ctx, []driver.Hold{{Name: n, Owner: "a", TTL: ttl}})
			if err != nil || gs[0] != nil {
				t.Fatalf("late renew: %v %v", gs, err)
			}
		}
	})
}

// Racing acquirers of a fresh name: exactly one creates the document.
func TestRaceOnCreate(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		for round := range 5 {
			n := fmt.Sprintf("race/%s/%d", index, round)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var tokens []uint64
			for i := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s := open(t, nil)
					g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: fmt.Sprint("o", i), Mode: driver.Exclusive, TTL: time.Minute})
					if err == nil {
						mu.Lock()
						tokens = append(tokens, g.Token)
						mu.Unlock()
					} else if !errors.Is(err, driver.ErrNotGranted) {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if len(tokens) != 1 || tokens[0] != 1 {
				t.Fatalf("round %d: granted tokens %v, want exactly [1]", round, tokens)
			}
		}
	})
}

// The index name comes from the URL or the options; stores on different
// indexes do not see each other's locks.
func TestIndexes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		a := open(t, nil)
		b, err := elastic.Open(ctx, storeURL(t, index+"-other"), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		if b.Index() != index+"-other" {
			t.Errorf("Index() = %q", b.Index())
		}
		n := "indexes/" + index
		for _, s := range []*elastic.Store{a, b} {
			if _, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "o" + s.Index(), Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
				t.Fatalf("%s: %v", s.Index(), err)
			}
		}
	})
}

// Open fails clearly when nothing listens.
func TestOpenUnreachable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 10*time.Second)
		if _, err := elastic.Open(ctx, "opensearch://127.0.0.1:1", nil); err == nil {
			t.Fatal("Open of a closed port: no error")
		}
		c, err := baton.Open(ctx, storeURL(t, index), nil)
		if err != nil {
			t.Fatalf("baton.Open: %v", err)
		}
		c.Close()
	})
}

// TestModel checks the store, on the record layer, against lockstate.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.Model(t, drivertest.ModelConfig{Open: func(t testing.TB) driver.Store { return open(t, nil) }, Steps: 300})
	})
}
