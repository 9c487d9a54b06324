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
// or build a store over a client you own with [New]:
//
//	os, _ := opensearch.NewClient(opensearch.Config{Addresses: addrs})
//	st, err := elastic.New(os, nil)
//	client, err := baton.New(st, nil)
//
// It needs the document API with if_seq_no/if_primary_term (Elasticsearch
// 6.7+, OpenSearch 1+) and Painless update scripts (ctx._now). Its tests
// run on Elasticsearch 7.10 and OpenSearch 2.19.
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
// # Documents
//
// Each lock name is one document of the lock index, whose id is "x" and
// the base64url encoding of the name (so names never need escaping in a
// URL), holding the name, its holders, its FIFO queue, its fencing counter
// and the owners, indexed for listings. Documents are read by id (GET is
// real-time: no refresh is needed), never by search, for every decision.
// Every change is one Painless update of the document that first checks
// what was read: if_seq_no and if_primary_term when it existed, creation
// only (a scripted upsert that refuses an existing document) when it did
// not. A conflict means someone else wrote first: the store reads again and
// decides again. So no write is ever blind, and a late renewal or release
// can never touch a hold that was taken over.
//
// Acquire costs one GET and one update (just the GET when the request is
// refused without joining the queue); Renew and Release, one GET and one
// update per name. The grant rules are those of package lockstate,
// evaluated in Go. Documents stay after their last holder leaves, so that
// fencing tokens keep growing for the life of the index: each name ever
// locked costs one small document. Deleting the index resets them.
//
// The index is created on first use with one shard (every lock judged by
// one node's clock), auto_expand_replicas 0-1, and a mapping that indexes
// only name, owners and now (dynamic: false): see [IndexBody]. Set
// Options.NoCreateIndex to create it yourself.
//
// # Time
//
// Expiry is judged by the server's clock: ctx._now in the update script,
// the clock of the node holding the index's primary shard. Elasticsearch
// and OpenSearch cache that clock and advance it every
// thread_pool.estimated_time_interval (200ms by default), so it lags the
// real time by up to that much. The script therefore stamps the times it
// writes with ctx._now + ClockStep (an upper bound of the real time: a
// hold never expires in the index before its holder's own deadline, its
// call's start plus its TTL on its monotonic clock), and drops an expired
// holder only once ctx._now itself (a lower bound) has passed its expiry.
// Decisions are made in Go with an estimate of the server's clock, and the
// script refuses a write whose estimate ran ahead; the store then decides
// again by the clock the refusal reported. No two machines' clocks are
// compared. Costs: a hold dies in the index ClockStep after its TTL, and a
// crashed holder is taken over up to 2×ClockStep after that; listings
// report times up to ClockStep ahead. If the primary shard moves to another
// node, that node's clock takes over: keep the nodes' clocks synchronised
// (NTP), and raise ClockStep if you raised estimated_time_interval.
//
// # Waiting
//
// A waiting Lock polls the version of the name's document (a GET without
// its source, from 2ms apart backing off to 100ms) and tries again as soon
// as it changes: no push from the server, but a hand-off within a few
// milliseconds, for one small request per waiter per poll.
//
// # Durability
//
// An acknowledged update is on the primary and every in-sync replica (and
// in their translogs, fsynced per request by default), so it survives the
// loss of a node, and fencing tokens never go back. Lost: everything, if
// the index is deleted or restored from an older snapshot.
//
// # Listings
//
// List with a name reads that document. Other listings, and Purge, refresh
// the index (one more request) and search it by name prefix or owner, then
// Purge rewrites each name that has expired holders as Acquire would. A
// listing is as fresh as its refresh.
//
// # What the tests show
//
// The conformance suite, walk-throughs of es-distributed-lock's and
// Kestra's locks, and faultcheck pass against a real Elasticsearch 7.10.2
// node and a real OpenSearch 2.19 node, each started by scripts/servers in
// one JVM (codelibs' runners, from Maven Central): from a URL, and through
// go-elasticsearch (v7; since v7.14 it refuses a server that sends no
// X-Elastic-Product header, as 7.10 does, so the tests' client adds it to
// the replies) and opensearch-go. Not tested: Elasticsearch 8 and later
// (no runnable node with Painless can be had here), TLS and API keys
// against a real cluster (their configuration is unit-tested), clusters of
// several nodes, and primary failover.
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

// Schemes are the URL schemes the package registers with baton.
var Schemes = []string{"elasticsearch", "opensearch", "elasticsearch+https", "opensearch+https"}

func init() {
	for _, scheme := range Schemes {
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
	tr, o, err := ParseURL(rawURL, opts)
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

// ParseURL returns the transport and options a URL asks for (see the
// package documentation), without connecting. Options given in the URL
// apply where opts leaves the field zero.
func ParseURL(rawURL string, opts *Options) (*HTTPTransport, *Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, nil, fmt.Errorf("elastic: bad URL: %w", err)
	}
	scheme := "http"
	switch u.Scheme {
	case "elasticsearch", "opensearch":
	case "elasticsearch+https", "opensearch+https":
		scheme = "https"
	default:
		return nil, nil, fmt.Errorf("elastic: URL scheme %q is not one of %v", u.Scheme, Schemes)
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
