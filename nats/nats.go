// Package nats is baton's NATS store: locks in a JetStream key-value
// bucket, through the official client (github.com/nats-io/nats.go). Import
// it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/nats"
//
//	client, err := baton.Open(ctx, "nats://10.0.0.5:4222/my-locks", nil)
//
// or build a store with [New] over a connection you own and pass it to
// baton.New.
//
// It needs a server with JetStream enabled, 2.10 or later; its tests run
// on 2.10 and 2.15, single servers.
//
// # URL
//
//	nats://[user:password@]host[:port][,host[:port]…][/bucket][?option=value&…]
//	nats+tls://…                               the same, over TLS
//
// The port defaults to 4222 and the bucket to [DefaultBucket]. Options:
// token, creds_file (a .creds file: JWT and NKey seed), nkey_file (an NKey
// seed file), ca_file (a PEM file of CAs to trust), cert_file and key_file
// (a client certificate), timeout (a Go duration bounding the connection
// attempt, default 5s; the context of Open bounds it too), replicas (of a
// bucket the store creates) and create_bucket (true/false, see
// Options.NoCreateBucket). Unknown options are an error. A store opened
// from a URL owns its connection, which reconnects for ever and never
// buffers writes while it does.
//
// # Keys
//
// Each lock name is one key of the bucket, holding its holders, FIFO queue
// and fencing counter as JSON; keys are never deleted, so each name ever
// locked costs one small message. A name's key keeps letters, digits and
// '-', and writes every other byte as '_' and two hex digits. The bucket
// is created on first use with one value per key, on disk
// ([BucketConfig]); the key "=clock" is the store's own (below).
//
// # Guarantees and limits
//
// Every decision reads the name's key (or starts from the value this
// Store last saw of it) and writes it back only if its revision is still
// the one read (or creates it only if absent), so no write is ever blind. Fencing tokens survive a restart of the server
// only if its acknowledged writes do: on a single server that needs
// JetStream's sync_interval set to always (the default syncs every two
// minutes, so a crash of the machine may lose the last writes); on a
// cluster, a bucket with 3 replicas acknowledges a write once a majority
// has it. See docs/stores/nats.md.
//
// Expiry is judged by the server's clock, as read from the time it stamps
// on messages it stores: each client samples it (one write and one read)
// every two seconds and bounds the server's time from the round trip and
// its own monotonic clock. No two clients' clocks are compared; a step of
// the server's clock (or a new cluster leader whose clock differs) moves
// every expiry with it, so keep servers' clocks synchronised (NTP).
//
// Waiters are woken by a watcher of the name's key (one per Store and
// name, started by its first waiter), and only those whose request the
// new state would grant: a release wakes the head of the queue, not every
// waiter. Client.WatchHolders is woken by the same watcher.
package nats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// schemes are the URL schemes the package registers with baton.
var schemes = []string{"nats", "nats+tls"}

func init() {
	for _, scheme := range schemes {
		baton.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Store, error) {
			return Open(ctx, u.String(), nil)
		})
	}
}

// DefaultTimeout bounds the connection attempt of Open when the URL gives
// no timeout.
const DefaultTimeout = 5 * time.Second

// Open connects to the server or cluster at rawURL (see the package
// documentation) and returns a store in its bucket that owns the
// connection. Options given in the URL apply where opts leaves the field
// zero.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	servers, nopts, o, err := parseURL(rawURL, opts)
	if err != nil {
		return nil, err
	}
	timeout := nopts.Timeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("nats: connecting: %w", context.DeadlineExceeded)
	}
	nopts.Timeout = timeout
	nopts.Servers = servers
	type result struct {
		nc  *natsgo.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nopts.Connect()
		done <- result{nc, err}
	}()
	var nc *natsgo.Conn
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("nats: connecting to %s: %w", strings.Join(servers, ","), r.err)
		}
		nc = r.nc
	case <-ctx.Done():
		go func() { // the attempt ends within timeout
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("nats: connecting: %w", ctx.Err())
	}
	s, err := New(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.b.owned = true
	return s, nil
}

// parseURL returns the servers, connection options and store options a
// URL asks for, without connecting.
func parseURL(rawURL string, opts *Options) ([]string, *natsgo.Options, *Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := driver.ParseURL(rawURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("nats: bad URL: %w", err)
	}
	nopts := natsgo.GetDefaultOptions()
	nopts.Name = "baton"
	nopts.Timeout = DefaultTimeout
	nopts.MaxReconnect = -1
	nopts.ReconnectWait = 250 * time.Millisecond
	nopts.ReconnectBufSize = -1 // a write whose call failed is never sent later
	scheme := "nats"
	switch u.Scheme {
	case "nats":
	case "nats+tls":
		scheme = "tls"
		nopts.Secure = true
	default:
		return nil, nil, nil, fmt.Errorf("nats: URL scheme %q is not one of %v", u.Scheme, schemes)
	}
	if u.Host == "" {
		return nil, nil, nil, fmt.Errorf("nats: URL %s has no host", u.Redacted())
	}
	var servers []string
	for h := range strings.SplitSeq(u.Host, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, nil, nil, fmt.Errorf("nats: URL %s has an empty host", u.Redacted())
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "4222")
		}
		servers = append(servers, scheme+"://"+h)
	}
	if u.User != nil {
		nopts.User = u.User.Username()
		nopts.Password, _ = u.User.Password()
	}
	if p := strings.Trim(u.Path, "/"); p != "" && o.Bucket == "" {
		o.Bucket = p
	}
	if o.Bucket != "" && !bucketName.MatchString(o.Bucket) {
		return nil, nil, nil, fmt.Errorf("nats: invalid bucket name %q (want letters, digits, '-' and '_')", o.Bucket)
	}
	var certFile, keyFile string
	q := u.Query()
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "token":
			nopts.Token = v
		case "creds_file":
			if err := natsgo.UserCredentials(v)(&nopts); err != nil {
				return nil, nil, nil, fmt.Errorf("nats: creds_file: %w", err)
			}
		case "nkey_file":
			opt, err := natsgo.NkeyOptionFromSeed(v)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("nats: nkey_file: %w", err)
			}
			if err := opt(&nopts); err != nil {
				return nil, nil, nil, fmt.Errorf("nats: nkey_file: %w", err)
			}
		case "ca_file":
			if err := natsgo.RootCAs(v)(&nopts); err != nil {
				return nil, nil, nil, fmt.Errorf("nats: ca_file: %w", err)
			}
		case "cert_file":
			certFile = v
		case "key_file":
			keyFile = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, nil, nil, fmt.Errorf("nats: timeout %q is not a positive Go duration", v)
			}
			nopts.Timeout = d
		case "replicas":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 5 {
				return nil, nil, nil, fmt.Errorf("nats: replicas %q is not between 1 and 5", v)
			}
			if o.Replicas == 0 {
				o.Replicas = n
			}
		case "create_bucket":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return nil, nil, nil, fmt.Errorf("nats: create_bucket %q is not true or false", v)
			}
			o.NoCreateBucket = o.NoCreateBucket || !b
		default:
			return nil, nil, nil, fmt.Errorf("nats: unknown URL option %q", k)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, nil, nil, errors.New("nats: cert_file and key_file go together")
	}
	if certFile != "" {
		if err := natsgo.ClientCert(certFile, keyFile)(&nopts); err != nil {
			return nil, nil, nil, fmt.Errorf("nats: cert_file: %w", err)
		}
	}
	if (certFile != "" || q.Has("ca_file")) && u.Scheme != "nats+tls" {
		return nil, nil, nil, errors.New("nats: ca_file, cert_file and key_file need the nats+tls scheme")
	}
	if nopts.Secure && nopts.TLSConfig == nil {
		nopts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return servers, &nopts, &o, nil
}
