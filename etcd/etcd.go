// Package etcd is baton's etcd store, on the official client
// (go.etcd.io/etcd/client/v3). Import it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/etcd"
//
//	client, err := baton.Open(ctx, "etcd://10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379/myapp", nil)
//
// or build a store over a clientv3.Client you own with [New] and pass it to
// baton.New:
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints})
//	st, err := batonetcd.New(cli, nil)
//	client, err := baton.New(st, nil)
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
// and password, when given, log in with etcd's authentication. The path, when not empty, is the key prefix (a slash is
// appended: "/myapp" puts every key under "/myapp/"). Options:
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
// # Sessions
//
// Every hold of a Store lives in ONE etcd lease, its session: granted when
// the Store first needs it, shared by all its holds and queued requests,
// and kept alive by one goroutine that sends a keepalive every third of
// SessionTTL, whatever the number of holds. The session is judged on this
// machine's monotonic clock: it may be lost (its Done channel closes) when
// no keepalive sent in the last SessionTTL, less 1%, was acknowledged, or as
// soon as the server says the lease is gone. The server cannot have
// expired the lease before then, since it counts from when it received the
// keepalive. baton ends every hold of the session when it closes
// (ErrLeaseLost); later acquisitions take a new lease. A lease judged lost
// is revoked if the server can still be reached, so that its keys do not
// wait for the server to expire them. Close revokes the lease: every key of
// the Store disappears at once.
//
// The LockOptions.TTL of a hold is recorded but does not bound it: a
// session-bound hold lasts until it is released or its session ends. With
// NoKeepAlive, baton still ends the hold after its TTL and releases it.
// Renew only reports whether the hold still exists. The session is the
// grants' driver.Session and implements driver.SessionDeadline, so that a
// lease's Deadline and Err follow the last acknowledged keepalive.
//
// # Keys
//
// A request of owner O for name N is one key, bound to the session's lease:
//
//	<prefix><hex of N>/<O>    {"name":N,"mode":1|2,"limit":L,"host":…,"meta":…,"ttl":…,"created":…}
//
// The name is hex-encoded so that any name ("a/b", "..", "", a name that
// is a prefix of another) is one path segment of [0-9a-f]; hex keeps byte
// order and prefixes, so Status with a name prefix reads one key range.
// The key is created with Txn(If(CreateRevision(key) == 0), Then(Put(key,
// value, WithLease(session)))), and the name's keys, in order of their
// create revision, are its FIFO queue. The grant rules of package
// lockstate become rules over that order:
//
//   - exclusive: granted when its key is the first;
//   - shared with limit L (0: none): granted when no exclusive key is
//     ahead of it and, for L > 0, fewer than L keys are ahead of it.
//
// Holders and waiters are all keys: a key that meets its rule is a holder,
// and stays one until it is deleted (keys ahead only ever disappear). A
// request that is not queued (TryLock) and not granted deletes its key
// again before it returns. An owner that already has a key for the name
// re-acquires it: the value is rewritten (meta, host, TTL) and bound to the
// current session, and the key keeps its create revision; another mode or
// limit is ErrModeConflict. Created times are the clients' clocks, for
// display only; etcd's own decisions use no clock but its leases'.
//
// # Fencing tokens
//
// A hold's fencing token is its key's create revision: etcd's revision
// only grows, for the life of the cluster, so tokens of one name (of every
// name, in fact) increase, and they survive restarts and snapshots. Tokens
// are not consecutive. The token is taken when the request is queued, not
// when it is granted: an exclusive holder's token is above every token
// granted before it, but shared holders of one name that ask with different
// limits can be granted out of queue order (a later request with a higher
// limit may pass an earlier one with a lower limit), and then a holder's
// token may be below one granted before it. Holders of one name should
// agree on the limit, as baton documents.
//
// # Waiting
//
// The store implements driver.Waiter. A waiting request watches only the
// key that blocks it: the key just ahead (exclusive), the last exclusive
// key ahead (shared), or, for a semaphore that is full, the keys ahead of
// it as a range, counting their deletions until fewer than L are left.
// Each wait creates its watch without a start revision, waits for etcd's
// "created" notification, and only then reads the name's keys again,
// returning at once if the blocker is gone: a deletion is either seen by
// that read or reported by the watch, and the watch is served as the
// server's writes commit (a watch created at an older revision would be
// served by etcd's 100 ms catch-up loop, which caps clientv3's
// concurrency.Mutex near ten acquisitions a second per waiter). Only the
// waiter a deletion unblocks wakes: there is no herd.
//
// When the blocker is all that keeps the request out (it is second in
// line), the watch covers the key range from the blocker's key to the
// request's own (skipping deletions of other keys in between): one watch
// delivers its events in revision order, so the blocker's deletion, seen
// before any deletion of the request's own key (a lost session, or a
// Release by its owner elsewhere), grants the request at that revision,
// and its next attempt returns the grant without reading. Each Store keeps
// one idle watch open on its gRPC watch stream, which the client would
// otherwise close and reopen around every wait.
//
// # Cost
//
// An uncontended Lock is one transaction that writes (the key's creation,
// with the read of the name's keys) and its release one delete (a hold this
// Store granted is known to be a holder if the key deleted still has its
// create revision; other releases read the name's keys in the same
// transaction). A refused attempt leaves the key in place; the waiter then
// creates one watch per wait and reads the name's keys once more (a
// serializable read, when the member it reaches is up to date), and its
// next attempt after a wake-up is a read, not a write (and not even that
// for a waiter that was second in line). The hand-off from a release to
// the next holder is thus the release's commit, the watch event and at
// most one read. Keepalives cost one call per third of SessionTTL per
// Store. List without a name reads every key of the prefix (or of the
// name prefix).
//
// # Compaction
//
// Every acquisition creates a key of its own (baton gives each Lock a new
// owner unless one is chosen), and etcd keeps deleted keys in its index
// until the history is compacted: the name's reads walk them all. Measured
// here, on etcd 3.4, an uncontended Lock of one name went from 1.7 ms to
// 3.6 ms after 4,000 to 8,000 acquisitions without compaction, and back to
// 2 ms after one. Run etcd with automatic compaction (for instance
// --auto-compaction-mode=periodic --auto-compaction-retention=5m, or
// revision-based), as etcd recommends for any workload that writes: the
// history also fills the database up to its space quota.
//
// # Releases by others
//
// Client.ForceRelease (an administrator's release) deletes the key: the lock is
// free at once. baton does not renew session-bound holds, so their holder
// is not told until it calls Lease.Renew, which then reports the hold gone.
//
// # Failures
//
// etcd is linearizable: a grant acknowledged by a majority survives the
// loss of any minority of members, and a new leader keeps every lease (it
// extends them by an election timeout). A holder whose keepalives stop
// reaching a majority (its member partitioned, no leader for longer than
// SessionTTL) sees its session end before the server can expire the lease,
// and so before anyone else can be granted the lock.
//
// # Tests
//
// The package's tests simulate dead and cut-off holders with hooks that
// are not part of the API: dropping the session without revoking its
// lease, and black-holing the connections, which Open dials through a gate
// of its own.
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
