// Package elastic is baton's Elasticsearch and OpenSearch store. It talks
// the document REST API through a small [Transport] interface that both
// official Go clients satisfy (*opensearch.Client from opensearch-go,
// *elasticsearch.Client from go-elasticsearch), so it imports neither.
// Import it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/elastic"
//
//	client, err := baton.Open(ctx, "opensearch://user:pass@10.0.0.5:9200/my-locks", nil)
//
// or build a store with [New] over a client you own and pass it to
// baton.New.
//
// It needs the document API with if_seq_no/if_primary_term (Elasticsearch
// 6.7+, OpenSearch 1+) and Painless update scripts (ctx._now). Its tests
// run on Elasticsearch 7.10 and OpenSearch 2.19, single nodes;
// Elasticsearch 8 and later, clusters of several nodes and primary
// failover are not tested.
//
// # URL
//
//	elasticsearch://[user:password@]host[:port][/index][?option=value&…]
//	opensearch://…                            the same (plain HTTP)
//	elasticsearch+https://…, opensearch+https://…   over TLS
//
// The port defaults to 9200 and the index to [DefaultIndex]. Options:
// api_key (sent as "Authorization: ApiKey …", the base64 "id:key" the
// cluster hands out; it wins over a user and password), ca_file (a PEM file
// of CAs to trust), server_name (the TLS server name to expect),
// insecure_skip_verify (true/false), timeout (a Go duration bounding each
// request, default 30s; baton's contexts bound them too), index,
// create_index (true/false, see Options.NoCreateIndex) and clock_step (a Go
// duration, see Options.ClockStep). Unknown options are an error. A store
// opened from a URL owns its HTTP client and checks the cluster with GET /.
//
// # Index
//
// Each lock name is one document of the lock index, holding its holders,
// FIFO queue and fencing counter; documents are never deleted, so each
// name ever locked costs one small document. The index is created on first
// use with one shard and a mapping that indexes only what listings search
// ([IndexBody]); set Options.NoCreateIndex to create it yourself. See
// docs/stores/elastic.md#documents.
//
// # Guarantees and limits
//
// Every decision reads the document by id (real-time) and writes it with
// one update conditional on what was read (if_seq_no and if_primary_term,
// or create-only), so no write is ever blind. An acknowledged update is on
// the primary and every in-sync replica, so it survives the loss of a
// node, and fencing tokens never go back; deleting the index, or restoring
// an older snapshot, loses everything. See docs/stores/elastic.md#durability.
//
// Expiry is judged by the cached clock of the node holding the primary
// shard, whose lag Options.ClockStep bounds: a hold dies in the index
// ClockStep after its TTL, and a crashed holder is taken over up to
// 2×ClockStep after that. No two machines' clocks are compared, but if the
// primary shard moves, the new node's clock takes over: keep the nodes'
// clocks synchronised (NTP). See docs/stores/elastic.md#time.
//
// Waiters poll the document: soon after it moved, the head of the queue
// first, backing off to 100ms while it stays the same.
// Listings other than by name, and Purge, search a refreshed index.
package elastic

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// schemes are the URL schemes the package registers with baton.
var schemes = []string{"elasticsearch", "opensearch", "elasticsearch+https", "opensearch+https"}

func init() {
	for _, scheme := range schemes {
		baton.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Store, error) {
			return Open(ctx, u.String(), nil)
		})
	}
}

// Open returns a store over the cluster at rawURL (see the package
// documentation), with an HTTP client of its own, after checking that the
// cluster answers. Options given in the URL apply where opts leaves the
// field zero.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	tr, o, err := parseURL(rawURL, opts)
	if err != nil {
		return nil, err
	}
	s, err := New(tr, o)
	if err != nil {
		tr.CloseIdleConnections()
		return nil, err
	}
	s.d.owned = tr
	st, b, err := s.d.do(ctx, http.MethodGet, "/", nil, nil, "")
	if err == nil && st >= 300 {
		err = apiError(st, b)
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("elastic: %s: %w", tr.URL.Redacted(), err)
	}
	return s, nil
}

// parseURL returns the transport and options a URL asks for (see the
// package documentation), without connecting. Options given in the URL
// apply where opts leaves the field zero.
func parseURL(rawURL string, opts *Options) (*HTTPTransport, *Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := driver.ParseURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("elastic: bad URL: %w", err)
	}
	scheme := "http"
	switch u.Scheme {
	case "elasticsearch", "opensearch":
	case "elasticsearch+https", "opensearch+https":
		scheme = "https"
	default:
		return nil, nil, fmt.Errorf("elastic: URL scheme %q is not one of %v", u.Scheme, schemes)
	}
	if u.Hostname() == "" {
		return nil, nil, fmt.Errorf("elastic: URL %s has no host", u.Redacted())
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "9200")
	}
	tr := &HTTPTransport{URL: &url.URL{Scheme: scheme, Host: host}}
	if u.User != nil {
		tr.Username = u.User.Username()
		tr.Password, _ = u.User.Password()
	}
	if p := trimSlashes(u.Path); p != "" && o.Index == "" {
		o.Index = p
	}
	var caFile, serverName string
	insecure, timeout := false, 30*time.Second
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		var err error
		switch k {
		case "index":
			if o.Index == "" {
				o.Index = v
			}
		case "api_key":
			tr.APIKey = v
		case "ca_file":
			caFile = v
		case "server_name":
			serverName = v
		case "insecure_skip_verify":
			insecure, err = strconv.ParseBool(v)
		case "timeout":
			timeout, err = time.ParseDuration(v)
			if err == nil && timeout <= 0 {
				err = errors.New("must be above zero")
			}
		case "create_index":
			var create bool
			if create, err = strconv.ParseBool(v); err == nil && !create {
				o.NoCreateIndex = true
			}
		case "clock_step":
			var d time.Duration
			if d, err = time.ParseDuration(v); err == nil && o.ClockStep == 0 {
				o.ClockStep = d
			}
		default:
			return nil, nil, fmt.Errorf("elastic: unknown URL option %q (known: index, api_key, ca_file, server_name, insecure_skip_verify, timeout, create_index, clock_step)", k)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("elastic: URL option %s=%q: %v", k, v, err)
		}
	}
	if scheme == "http" && (caFile != "" || serverName != "" || insecure) {
		return nil, nil, fmt.Errorf("elastic: TLS options in a plain-HTTP URL (use %s+https)", u.Scheme)
	}
	tc, err := tlsConfig(caFile, serverName, insecure)
	if err != nil {
		return nil, nil, fmt.Errorf("elastic: %w", err)
	}
	tr.Client = newHTTPClient(tc, timeout)
	return tr, &o, nil
}

func trimSlashes(p string) string {
	for len(p) > 0 && p[0] == '/' {
		p = p[1:]
	}
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}
