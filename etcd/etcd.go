// Package etcd is baton's etcd store, on the official client
// (go.etcd.io/etcd/client/v3). Import it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/etcd"
//
//	client, err := baton.Open(ctx, "etcd://10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379/myapp", nil)
//
// or build a store with [New] over a clientv3.Client you own and pass it to
// baton.New.
//
// It needs etcd 3.4 or later: every test runs on etcd 3.4 (Debian's) and
// 3.7, and a three-member cluster test on 3.4; it uses the client of etcd
// 3.6.
//
// # URL
//
//	etcd://[user:password@]host[:port][,host[:port]…][/prefix][?option=value&…]
//	etcds://…   the same over TLS
//
// Hosts are the cluster's client endpoints, separated by commas (port 2379
// if none is given). Go's URL parser checks the text after the last colon
// as a port, so give every host a port or none, and use at most one IPv6
// literal; Open's bare endpoint lists and New have no such limits. User
// and password, when given, log in with etcd's authentication. The path,
// when not empty, is the key prefix (a slash is appended: "/myapp" puts
// every key under "/myapp/"). Options:
//
//	session_ttl   Options.SessionTTL, a Go duration ("10s")
//	dial_timeout  how long Open waits for the cluster (default 5s)
//	cacert        etcds only: PEM file of the CAs that sign the servers' certificates
//	              (default: the system's roots)
//	cert, key     etcds only: PEM files of a client certificate and its key
//	server_name   etcds only: the name to verify the servers' certificates against
//
// Unknown options are refused. Options passed to Open win over the URL's.
// Open also accepts a bare list of endpoints ("127.0.0.1:2379,10.0.0.6:2379").
// A store opened with Open owns its client and closes it on Close.
//
// # Keys
//
// A request of owner O for name N is one key, <prefix><hex of N>/<O>,
// bound to the Store's session lease; the name's keys, in order of their
// create revision, are its FIFO queue, and the grant rules of package
// lockstate are applied to that order. Deleted keys stay in etcd's history
// until it is compacted, and every acquisition creates a key: run etcd
// with automatic compaction (--auto-compaction-mode and
// --auto-compaction-retention), or reads slow down and the database fills
// up. See docs/stores/etcd.md#keys-and-the-queue.
//
// # Guarantees and limits
//
// Holds live in the Store's session, one etcd lease kept alive every third
// of SessionTTL, not in per-hold TTLs: a hold lasts until it is released
// or its session ends (LockOptions.TTL is recorded, and bounds a hold only
// with NoKeepAlive). The session is judged lost, on this machine's
// monotonic clock, when no keepalive sent in the last SessionTTL less 1%
// was acknowledged, which is before the server can expire the lease and
// grant the lock to someone else; baton then ends its leases with
// ErrLeaseLost. Close revokes the lease. A holder that dies or is cut off
// blocks others for up to SessionTTL. See docs/stores/etcd.md#sessions.
//
// etcd is linearizable: a grant acknowledged by a majority survives the
// loss of any minority of members, and a new leader keeps every lease.
// Decisions use no clock but the leases'. See docs/stores/etcd.md#failures.
//
// Fencing tokens are the keys' create revisions: they grow for the life of
// the cluster, across restarts and snapshots, but are not consecutive.
// Taken when a request is queued, they can go back between shared holders
// of one name that ask with different limits; holders of a name should
// agree on its limit. See docs/stores/etcd.md#fencing-tokens.
//
// Waking waiters: a waiter watches only the key that blocks it, so a
// release wakes only the waiter it lets in. See docs/stores/etcd.md#waiting.
//
// Client.ForceRelease deletes the key, freeing the lock at once; its
// holder learns of it only when it calls Lease.Renew.
package etcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

func init() {
	for _, scheme := range []string{"etcd", "etcds"} {
		baton.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Store, error) {
			return Open(ctx, u.String(), nil)
		})
	}
}

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "/baton/"

// DefaultSessionTTL is the session lease's TTL when Options.SessionTTL is
// zero.
const DefaultSessionTTL = 10 * time.Second

// defaultDialTimeout bounds Open's first contact with the cluster.
const defaultDialTimeout = 5 * time.Second

// Options configure a Store. The zero value works.
type Options struct {
	// Prefix starts every key (DefaultPrefix if empty; a slash is appended
	// if it does not end with one). Stores with different prefixes are
	// independent.
	Prefix string
	// SessionTTL is the TTL of the store's lease (DefaultSessionTTL if
	// zero), rounded up to whole seconds; the server may raise it to its
	// minimum (1.5 election timeouts, 2s with etcd's defaults). A holder
	// that dies or is cut off blocks others for up to SessionTTL.
	SessionTTL time.Duration
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("etcd: %w", driver.ErrClosed)

// ErrSessionLost is wrapped by the error of a session that ended.
var ErrSessionLost = errors.New("etcd: session lost")

// Store is a lock store in an etcd cluster. It is safe for concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	cli    *clientv3.Client
	owned  bool
	prefix string
	ttl    int64    // session lease TTL asked for, seconds
	gate   *netGate // nil unless Open made the client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	sessMu sync.Mutex // serialises session creation
	sess   *session   // guarded by mu

	mu      sync.Mutex
	closed  bool
	crashed bool
	// pending holds the keys this store queued and has not seen granted:
	// their next attempt reads instead of writing, and the last snapshot
	// seeds the next Wait.
	pending map[string]*pendingKey
	// held holds the keys this store granted, with their create revision
	// and session: releasing one that still has that revision needs no
	// read to know it was a holder.
	held map[string]heldKey
	// orphans are keys of this store whose release failed, with their
	// create revision: the session's goroutine deletes them later.
	orphans map[string]int64
	// streams holds the idle watch that keeps each gRPC watch stream open
	// (see keepStream).
	streams map[string]clientv3.WatchChan
}

type heldKey struct {
	rev  int64
	sess *session
}

type pendingKey struct {
	rev     int64    // the key's create revision
	snap    []entry  // the name's keys as last read (nil once used)
	snapRev int64    // the revision snap was read at
	sess    *session // the session the key was last bound to
	watched bool     // Watch was called since the last attempt
	woke    int64    // revision of the deletion that ended the last Wait
	// granted is the key as it was when its blocker's deletion (at woke)
	// granted it, seen by a watch that would have seen the key's own
	// deletion first (see watch.Wait); nil if the next attempt must read.
	granted *entry
}

// New returns a Store over cli, which the caller owns: Close does not
// close it. Stores made by New cannot be partitioned by tests.
func New(cli *clientv3.Client, opts *Options) (*Store, error) {
	if cli == nil {
		return nil, errors.New("etcd: client is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.SessionTTL < 0 {
		return nil, fmt.Errorf("etcd: SessionTTL %v is negative", o.SessionTTL)
	}
	if o.SessionTTL == 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	s := &Store{
		cli:     cli,
		prefix:  o.Prefix,
		ttl:     int64((o.SessionTTL + time.Second - 1) / time.Second),
		pending: make(map[string]*pendingKey),
		held:    make(map[string]heldKey),
		orphans: make(map[string]int64),
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	return s, nil
}

// Open connects to the cluster named by target, an etcd:// or etcds:// URL
// (see the package documentation) or a comma-separated list of endpoints,
// and returns a Store that owns its client. Fields of opts that are set
// win over the URL's options.
func Open(ctx context.Context, target string, opts *Options) (*Store, error) {
	cfg, o, err := parseTarget(target, opts)
	if err != nil {
		return nil, err
	}
	gate := newNetGate()
	cfg.DialOptions = append(cfg.DialOptions, grpc.WithContextDialer(gate.dial))
	cfg.Logger = zap.NewNop()
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	s, err := New(cli, o)
	if err != nil {
		cli.Close()
		return nil, err
	}
	s.owned, s.gate = true, gate
	// Check that the cluster answers (and that the credentials work).
	cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, s.prefix, clientv3.WithCountOnly()); err != nil {
		s.Close()
		return nil, fmt.Errorf("etcd: %s: %w", strings.Join(cfg.Endpoints, ","), err)
	}
	return s, nil
}

// parseTarget turns Open's target into a client configuration and options.
func parseTarget(target string, opts *Options) (clientv3.Config, *Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	cfg := clientv3.Config{DialTimeout: defaultDialTimeout}
	if !strings.Contains(target, "://") {
		eps, err := endpoints(target)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Endpoints = eps
		return cfg, &o, nil
	}
	u, err := url.Parse(target)
	if err != nil {
		return cfg, nil, fmt.Errorf("etcd: invalid URL: %w", err)
	}
	secure := false
	switch u.Scheme {
	case "etcd":
	case "etcds":
		secure = true
	default:
		return cfg, nil, fmt.Errorf("etcd: URL scheme %q is not etcd or etcds", u.Scheme)
	}
	if u.Opaque != "" {
		return cfg, nil, fmt.Errorf("etcd: URL %q has no host (want etcd://host:port)", u.Redacted())
	}
	if cfg.Endpoints, err = endpoints(u.Host); err != nil {
		return cfg, nil, err
	}
	if u.User != nil {
		cfg.Username = u.User.Username()
		cfg.Password, _ = u.User.Password()
	}
	if p := u.Path; p != "" && p != "/" && o.Prefix == "" {
		o.Prefix = p
	}
	q := u.Query()
	var caFile, certFile, keyFile, serverName string
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "session_ttl":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return cfg, nil, fmt.Errorf("etcd: URL option session_ttl %q is not a positive duration", v)
			}
			if o.SessionTTL == 0 {
				o.SessionTTL = d
			}
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return cfg, nil, fmt.Errorf("etcd: URL option dial_timeout %q is not a positive duration", v)
			}
			cfg.DialTimeout = d
		case "cacert":
			caFile = v
		case "cert":
			certFile = v
		case "key":
			keyFile = v
		case "server_name":
			serverName = v
		default:
			return cfg, nil, fmt.Errorf("etcd: unknown URL option %q (known: session_ttl, dial_timeout, cacert, cert, key, server_name)", k)
		}
	}
	tlsSet := caFile != "" || certFile != "" || keyFile != "" || serverName != ""
	if !secure {
		if tlsSet {
			return cfg, nil, errors.New("etcd: URL options cacert, cert, key and server_name need the etcds scheme")
		}
		return cfg, &o, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return cfg, nil, fmt.Errorf("etcd: cacert: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return cfg, nil, fmt.Errorf("etcd: cacert %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return cfg, nil, errors.New("etcd: URL options cert and key go together")
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return cfg, nil, fmt.Errorf("etcd: client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	cfg.TLS = tc
	return cfg, &o, nil
}

// endpoints splits a comma-separated host list, adding port 2379 where
// none is given.
func endpoints(list string) ([]string, error) {
	var eps []string
	for _, h := range strings.Split(list, ",") {
		h = strings.TrimSpace(h)
		if h == "" {
			continue
		}
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			host, port = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), "2379"
		}
		if host == "" || strings.ContainsAny(host, "/?#@ ") {
			return nil, fmt.Errorf("etcd: bad endpoint %q", h)
		}
		eps = append(eps, net.JoinHostPort(host, port))
	}
	if len(eps) == 0 {
		return nil, errors.New("etcd: no endpoint given")
	}
	return eps, nil
}

// Client returns the store's etcd client.
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the key prefix the store uses.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Close revokes the store's session (every hold and queued request of the
// store ends at once), stops its goroutines and, for a store made by Open,
// closes its client. It returns the revoke's error if the server could not
// be reached: the lease then expires after SessionTTL.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ss := s.sess
	s.sess = nil
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	var err error
	if ss != nil {
		alive := ss.end(ErrClosed)
		if alive {
			ctx, cancel := context.WithTimeout(context.Background(), defaultDialTimeout)
			if _, rerr := s.cli.Revoke(ctx, ss.id); rerr != nil && !isLeaseNotFound(rerr) {
				err = fmt.Errorf("etcd: revoking session lease %x (it expires by itself): %w", int64(ss.id), rerr)
			}
			cancel()
		}
	}
	if s.owned {
		if cerr := s.cli.Close(); cerr != nil && err == nil && !errors.Is(cerr, context.Canceled) {
			err = cerr
		}
	}
	return err
}
