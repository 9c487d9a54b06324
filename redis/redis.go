// Package redis is baton's Redis store, on go-redis v9. Import it for its
// URL schemes:
//
//	import _ "github.com/baton-go/baton/redis"
//
//	client, err := baton.Open(ctx, "redis://:password@10.0.0.5:6379/0", nil)
//
// or build a store with [New] over a go-redis client you own, the only way
// to use Sentinel (a FailoverClient), Cluster (a ClusterClient) or a Ring,
// and pass it to baton.New.
//
// It needs Redis 5 or later (its tests run on Redis 7.0 and Valkey 9.1),
// or a server that runs Redis's Lua scripts with the same libraries
// (struct), TIME and writes after TIME in scripts (replication of scripts
// by their effects, the default since Redis 5).
//
// # URL
//
//	redis://[[user]:password@]host[:port][/db][?option=value&…]
//	rediss://…   the same over TLS
//
// The URL is parsed by go-redis's ParseURL, so user, password, database and
// TLS come from it, and its query options (dial_timeout, pool_size, …) work.
// Three more options set [Options]: prefix (Prefix), linger (Linger, a Go
// duration) and max_waiters (MaxWaiters); context_timeout_enabled (a
// boolean, true unless the URL says otherwise) sets go-redis's
// ContextTimeoutEnabled, so that the deadlines of baton's calls bound their
// network I/O. A store opened from a URL owns its go-redis client, and
// checks the server with PING.
//
// # Keys
//
// The keys of a lock name start with "<prefix>:{<tag>}:", the tag a hash
// of the name, so that they share a cluster slot: a hash of holders and
// queued owners (r), the queue (q), the fencing counter (c) and a mailbox
// per queued owner (w:<owner>). They expire on their own once unused (the
// counter a week after its last token). Run Redis with maxmemory-policy
// noeviction or volatile-*: an allkeys-* policy may evict a hash, and the
// lock with it. See docs/stores/redis.md#keys.
//
// # Guarantees and limits
//
// Each operation is one Lua script: one atomic decision by the grant rules
// of package lockstate, one round trip. Expiry is judged by the server's
// clock (TIME), never the clients'; after a failover the new master's
// clock takes over, so keep the servers' clocks synchronised (NTP). Why:
// docs/stores/redis.md#scripts-and-time.
//
// Fencing tokens are the larger of the name's last token plus one and the
// server's clock in microseconds, so they keep growing even when the
// counter is lost (a restart without persistence, a failover, eviction),
// unless the server's clock stepped back by more than the time between the
// two grants. See docs/stores/redis.md#fencing-tokens.
//
// Redis replicates asynchronously, so a failover can lose a grant (two
// holders overlap until the first one's next renewal fails, at most a
// third of its TTL plus the renewal's timeout later; the new grant's token
// is still the larger, unless the new master's clock is behind) or a
// release (the lock stays held until its TTL). Holds survive a crash only
// with appendonly yes, appendfsync always and no failover that promotes a
// replica behind the master. WAIT and min-replicas-to-write make losses
// rarer, not impossible. Where locks must survive failures of the store,
// use a store that replicates synchronously. This package does not
// implement Redlock. See docs/stores/redis.md#failover-and-what-it-can-break.
//
// Waking waiters: the releasing script hands the lock to the next waiters
// in FIFO order and pushes the grant to a mailbox each waits on with
// BLPOP. A blocked BLPOP holds a pool connection for up to two seconds; at
// most Options.MaxWaiters block at once per Store. See
// docs/stores/redis.md#hand-off.
//
// Sessions: on one server (a plain client, or Sentinel's FailoverClient),
// the holds a client keeps alive while it holds other leases are bound to
// a session of the Store's, which the client renews every third of the
// TTL in place of each hold; the server then extends the holds, a
// thousand a call. A session that lost a hold, or whose server lost a
// grant or release of this client, ends, and so do its leases. A Store
// over a Cluster or a Ring keeps no sessions. See
// docs/stores/redis.md#sessions.
//
// The store logs nothing. go-redis logs connection trouble to stderr
// unless a program routes or silences it with redis.SetLogger.
package redis

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/sessions"
)

func init() {
	for _, scheme := range []string{"redis", "rediss"} {
		baton.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Store, error) {
			return Open(ctx, u.String(), nil)
		})
	}
}

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "baton"

// DefaultLinger is used when Options.Linger is zero.
const DefaultLinger = time.Minute

// Options configure a Store. The zero value works.
type Options struct {
	// Prefix starts every key (DefaultPrefix if empty). Stores with
	// different prefixes on one database are independent.
	Prefix string
	// Linger is how long the state of a name outlives its last holder's
	// or waiter's expiry, so that List (with Filter.Expired) and Purge can
	// still report holders that died without releasing. DefaultLinger if
	// zero; a negative Linger keeps nothing past the expiry.
	Linger time.Duration
	// MaxWaiters bounds the BLPOPs this store keeps blocked at once, each
	// on a connection of the go-redis pool (half the pool size if zero).
	MaxWaiters int
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("redis: %w", driver.ErrClosed)

// Store is a lock store in one Redis database (or cluster). It is safe for
// concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	rdb    redis.UniversalClient
	owned  bool
	prefix string
	linger int64 // ms

	sem  chan struct{} // one token per blocked BLPOP
	ctx  context.Context
	stop context.CancelFunc
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	blockArg string // BLPOP's timeout argument

	mu         sync.Mutex
	closed     bool
	blocked    map[*watch]struct{} // watches with a pipeline in flight
	prefetched map[*driver.Request]*prefetch
	marks      map[*driver.Request]mark
	counted    map[string]*counts // by session id: what the client saw the server count

	sessions     *sessions.Keeper // nil on a Cluster or Ring
	partitioned  atomic.Bool      // a test's: session renewals fail
	releasePause time.Duration    // a test's: ReleaseSession pauses after its first call
}

// counts are the bindings and unbindings of a session that the client
// saw the server count (see session.lua).
type counts struct{ binds, unbinds atomic.Int64 }

// New returns a store over rdb: a *redis.Client (single server, or a
// Sentinel-backed FailoverClient), a *redis.ClusterClient or a *redis.Ring.
// The caller owns rdb: Close leaves it open. Set ContextTimeoutEnabled in
// rdb's options so that the deadlines baton gives its calls (a renewal must
// not outlast the lease) bound their network I/O.
func New(rdb redis.UniversalClient, opts *Options) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("redis: client is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	switch {
	case o.Linger == 0:
		o.Linger = DefaultLinger
	case o.Linger < 0:
		o.Linger = 0
	}
	if o.MaxWaiters <= 0 {
		o.MaxWaiters = max(poolSize(rdb)/2, 1)
	}
	s := &Store{
		rdb:        rdb,
		prefix:     o.Prefix,
		linger:     o.Linger.Milliseconds(),
		sem:        make(chan struct{}, o.MaxWaiters),
		done:       make(chan struct{}),
		blockArg:   blockArg(rdb),
		blocked:    map[*watch]struct{}{},
		prefetched: map[*driver.Request]*prefetch{},
		marks:      map[*driver.Request]mark{},
		counted:    map[string]*counts{},
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if _, ok := rdb.(*redis.Client); ok {
		s.sessions = sessions.New(s)
	}
	return s, nil
}

// poolSize is the size of rdb's connection pool (per node, for clusters).
func poolSize(rdb redis.UniversalClient) int {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	case *redis.Ring:
		return c.Options().PoolSize
	}
	return 10
}

// Open connects to the Redis server at rawURL (see the package
// documentation) and returns a store that owns its client. Options given in
// the URL apply where opts leaves the field zero.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	ropts, o, err := parseURL(rawURL, opts)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(ropts)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: %s: %w", ropts.Addr, err)
	}
	s, err := New(rdb, o)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// parseURL splits rawURL into go-redis options and ours.
func parseURL(rawURL string, opts *Options) (*redis.Options, *Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := driver.ParseURL(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("redis: invalid URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, nil, fmt.Errorf("redis: URL scheme %q is not redis or rediss", u.Scheme)
	}
	q := u.Query()
	if q.Has("prefix") {
		if o.Prefix == "" {
			o.Prefix = q.Get("prefix")
		}
		q.Del("prefix")
	}
	if q.Has("linger") {
		d, err := time.ParseDuration(q.Get("linger"))
		if err != nil {
			return nil, nil, fmt.Errorf("redis: URL option linger: %w", err)
		}
		if o.Linger == 0 {
			o.Linger = d
		}
		q.Del("linger")
	}
	if q.Has("max_waiters") {
		n, err := strconv.Atoi(q.Get("max_waiters"))
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("redis: URL option max_waiters %q is not a count", q.Get("max_waiters"))
		}
		if o.MaxWaiters == 0 {
			o.MaxWaiters = n
		}
		q.Del("max_waiters")
	}
	ctxTimeout := true
	if q.Has("context_timeout_enabled") {
		b, err := strconv.ParseBool(q.Get("context_timeout_enabled"))
		if err != nil {
			return nil, nil, fmt.Errorf("redis: URL option context_timeout_enabled %q is not a boolean", q.Get("context_timeout_enabled"))
		}
		ctxTimeout = b
		q.Del("context_timeout_enabled")
	}
	u.RawQuery = q.Encode()
	ropts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, nil, err
	}
	ropts.ContextTimeoutEnabled = ctxTimeout
	return ropts, &o, nil
}

// Client returns the go-redis client the store uses.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Prefix returns the key prefix of the store.
func (s *Store) Prefix() string { return s.prefix }

func (s *Store) check() error {
	select {
	case <-s.done:
		return ErrClosed
	default:
		return nil
	}
}

// micros converts d to whole microseconds, rounding up.
func micros(d time.Duration) int64 { return int64((d + time.Microsecond - 1) / time.Microsecond) }

func usTime(v int64) time.Time { return time.UnixMicro(v) }

// info is what the scripts store, opaque, with each entry.
type info struct {
	Host string            `json:"h,omitempty"`
	Meta map[string]string `json:"m,omitempty"`
}

func encodeInfo(host string, meta map[string]string) (string, error) {
	if len(meta) == 0 && host == "" {
		return "", nil
	}
	b, err := json.Marshal(info{host, meta})
	return string(b), err
}

func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if p := s.takePrefetched(req); p != nil {
		return p.grant, nil
	}
	in, err := encodeInfo(req.Host, req.Meta)
	if err != nil {
		return nil, err
	}
	var x *sessions.Session
	if req.KeepAlive && s.sessions != nil {
		x = s.sessions.Session(req.TTL, false)
	}
	sid := ""
	if x != nil {
		sid = x.ID()
	}
	g, bound, err := s.acquire(ctx, req, in, sid)
	switch {
	case err != nil:
	case bound:
		g.Session = x
	case x == nil && req.KeepAlive && s.sessions != nil:
		s.sessions.Session(req.TTL, true) // makes one, for the grants to come
	}
	return g, err
}

// acquire runs the acquire script for req. A new hold is bound to session
// sid if sid is not empty and the session is live on the server; bound
// says whether the hold granted or extended is bound to sid.
func (s *Store) acquire(ctx context.Context, req *driver.Request, in, sid string) (*driver.Grant, bool, error) {
	b := s.base(req.Name)
	keys := []string{b + "r", b + "q", b + "c"}
	if sid != "" {
		keys = append(keys, s.sessionKey(sid))
	}
	sent := time.Now()
	v, err := acquireScript.Run(ctx, s.rdb, keys, req.Name, req.Owner, s.acquireArgs(req), in, sid).Int64Slice()
	if err != nil {
		return nil, false, fmt.Errorf("redis: acquire: %w", err)
	}
	switch {
	case len(v) == 7 && v[0] == 1:
		g := &driver.Grant{Token: uint64(v[1]), Created: usTime(v[2]), Renewed: usTime(v[3]),
			Expires: usTime(v[4]), Extended: v[5] == 1}
		bound := v[6] == 1
		if bound && !g.Extended {
			s.count(sid, 1, 0)
		}
		return g, bound, nil
	case len(v) == 3 && v[0] == 0:
		if req.Queue {
			s.setMark(req, mark{sent: sent, at: v[2]})
		}
		return nil, false, &driver.Busy{After: time.Duration(v[1]) * time.Microsecond}
	case len(v) == 1 && v[0] == -1:
		return nil, false, driver.ErrModeConflict
	case len(v) == 1 && v[0] == -2:
		return nil, false, driver.ErrLimitConflict
	}
	return nil, false, fmt.Errorf("redis: acquire: unexpected reply %v", v)
}

// acquireArgs packs the numbers the acquire script needs as big-endian
// doubles, which it unpacks in one call (cheaper than a tonumber each).
func (s *Store) acquireArgs(req *driver.Request) []byte {
	queue := 0.0
	if req.Queue {
		queue = 1
	}
	b := make([]byte, 0, 48)
	for _, f := range []float64{float64(req.Mode), float64(req.Limit), float64(micros(req.TTL)),
		queue, float64(micros(req.QueueTTL)), float64(s.linger)} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(f))
	}
	return b
}

// takePrefetched returns the grant a waiting watch of req obtained, if it
// may be used now (see watch.go), and forgets it.
func (s *Store) takePrefetched(req *driver.Request) *prefetch {
	s.mu.Lock()
	p := s.prefetched[req]
	delete(s.prefetched, req)
	s.mu.Unlock()
	if p != nil && !p.usable(time.Now()) {
		return nil
	}
	return p
}

// setMark records the server time of req's refused attempt, for the BLPOP
// of its watch (see watch.go).
func (s *Store) setMark(req *driver.Request, m mark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.marks) >= 4096 {
		for r, x := range s.marks {
			if time.Since(x.sent) > markAge {
				delete(s.marks, r)
			}
		}
	}
	s.marks[req] = m
}

// mark returns req's last mark if it is young enough.
func (s *Store) mark(req *driver.Request) (mark, bool) {
	s.mu.Lock()
	m, ok := s.marks[req]
	s.mu.Unlock()
	return m, ok && time.Since(m.sent) < markAge
}

// call is one script call of a batch.
type call struct {
	idx  []int // positions in the caller's batch
	keys []string
	args []any
	cmd  *redis.Cmd
}

// maxKeys bounds the keys of one script call, so that a listing or purge
// of many names does not stop the server for long at a time.
const maxKeys = 256

// batch makes one call per group of keys that can run together (at most
// maxKeys of them), each with common followed by what item(i, args)
// appends to args for every key i of the group.
func (s *Store) batch(keys []string, common []any, item func(i int, args []any) []any) []*call {
	var calls []*call
	for _, g := range s.groups(len(keys), func(i int) string { return keys[i] }) {
		c := &call{idx: g, keys: make([]string, len(g)), args: append(make([]any, 0, len(common)+2*len(g)), common...)}
		for j, i := range g {
			c.keys[j] = keys[i]
			if item != nil {
				c.args = item(i, c.args)
			}
		}
		calls = append(calls, c)
	}
	return calls
}

// run runs script for every call: one call directly, several in one
// pipeline (calls the server had no script for are sent again with EVAL).
func (s *Store) run(ctx context.Context, script *redis.Script, calls []*call) error {
	if len(calls) == 1 {
		c := calls[0]
		c.cmd = script.Run(ctx, s.rdb, c.keys, c.args...)
		return c.cmd.Err()
	}
	pipe := s.rdb.Pipeline()
	for _, c := range calls {
		c.cmd = script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, c := range calls {
		err := c.cmd.Err()
		if err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
			c.cmd = script.Run(ctx, s.rdb, c.keys, c.args...)
			err = c.cmd.Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]*driver.Grant, len(holds))
	if len(holds) == 0 {
		return out, nil
	}
	calls := s.renewCalls(holds)
	if err := s.run(ctx, renewScript, calls); err != nil {
		return nil, fmt.Errorf("redis: renew: %w", err)
	}
	gs := make([]driver.Grant, len(holds))
	for _, c := range calls {
		rs, err := c.cmd.Text()
		if err != nil || len(rs) != renewRecord*len(c.idx) {
			return nil, fmt.Errorf("redis: renew: unexpected reply of %d bytes for %d holds (%v)", len(rs), len(c.idx), err)
		}
		for j, i := range c.idx {
			r := rs[j*renewRecord:]
			if r[0] != 1 {
				continue // not held
			}
			v := func(k int) int64 { return int64(math.Float64frombits(be64(r[1+8*k:]))) }
			gs[i] = driver.Grant{Token: uint64(v(0)), Created: usTime(v(1)), Renewed: usTime(v(2)), Expires: usTime(v(3))}
			out[i] = &gs[i]
		}
	}
	return out, nil
}

// renewCalls makes renew.lua's calls for holds: one per group of names
// that can run together (see groups), each hold packed into one argument.
func (s *Store) renewCalls(holds []driver.Hold) []*call {
	start := s.prefix + ":{"
	var calls []*call
	for _, g := range s.groups(len(holds), func(i int) string { return s.stateKey(holds[i].Name) }) {
		ttl := holds[g[0]].TTL
		n := 0
		for _, i := range g {
			n += tagLen + 4 + len(holds[i].Owner) + 8
			if holds[i].TTL != ttl {
				ttl = 0
			}
		}
		b := make([]byte, 0, n)
		for _, i := range g {
			b = s.appendTag(b, holds[i].Name)
			b = binary.BigEndian.AppendUint32(b, uint32(len(holds[i].Owner)))
			b = append(b, holds[i].Owner...)
			if ttl == 0 {
				b = binary.BigEndian.AppendUint64(b, math.Float64bits(float64(micros(holds[i].TTL))))
			}
		}
		calls = append(calls, &call{idx: g, keys: []string{s.stateKey(holds[g[0]].Name)},
			args: []any{s.linger, micros(ttl), start, b}})
	}
	return calls
}

// renewRecord is the length of renew.lua's reply per hold.
const renewRecord = 33

// be64 reads a big-endian uint64 from the start of s.
func be64(s string) uint64 {
	_ = s[7]
	return uint64(s[0])<<56 | uint64(s[1])<<48 | uint64(s[2])<<40 | uint64(s[3])<<32 |
		uint64(s[4])<<24 | uint64(s[5])<<16 | uint64(s[6])<<8 | uint64(s[7])
}

func int64s(vs []any, n int) ([]int64, error) {
	if len(vs) != n {
		return nil, fmt.Errorf("unexpected reply %v", vs)
	}
	out := make([]int64, n)
	for i, v := range vs {
		x, ok := v.(int64)
		if !ok {
			return nil, fmt.Errorf("unexpected reply %v", vs)
		}
		out[i] = x
	}
	return out, nil
}

func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	sk := make([]string, len(keys))
	for i, k := range keys {
		sk[i] = s.stateKey(k.Name)
	}
	calls := s.batch(sk, []any{s.linger}, func(i int, args []any) []any { return append(args, keys[i].Owner) })
	if err := s.run(ctx, releaseScript, calls); err != nil {
		return nil, fmt.Errorf("redis: release: %w", err)
	}
	for _, c := range calls {
		rs, err := c.cmd.Slice()
		if err != nil || len(rs) < len(c.idx) {
			return nil, fmt.Errorf("redis: release: unexpected reply %v (%v)", rs, err)
		}
		for j, i := range c.idx {
			out[i] = rs[j] == int64(1)
		}
		for _, r := range rs[len(c.idx):] { // the sessions of bound holds released
			if sid, ok := r.(string); ok {
				s.count(sid, 0, 1)
			}
		}
	}
	return out, nil
}

// sessionKey is the key of session id (see head.lua).
func (s *Store) sessionKey(id string) string { return s.prefix + ":x:" + id }

// count adds to what the client saw the server count of session sid.
func (s *Store) count(sid string, binds, unbinds int64) {
	s.mu.Lock()
	c := s.counted[sid]
	s.mu.Unlock()
	if c != nil {
		c.binds.Add(binds)
		c.unbinds.Add(unbinds)
	}
}

// KeepSession implements sessions.Store: it makes the session, or renews
// it and then extends its holds, a thousand a call (session.lua). The
// session ends if the server has not counted every binding and unbinding
// the client saw it count: it lost writes.
//
// A renewal of many holds pauses after every walkBurst calls for three
// times as long as they took, keeping within a sixth of the TTL, so that
// it takes a quarter of the server's time, not all of it at once, and
// costs the client few wake-ups. Holds not yet extended carry the
// previous renewal's expiry, at least half the TTL away.
func (s *Store) KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error) {
	if s.partitioned.Load() {
		return false, errors.New("redis: partitioned (a test's fault)")
	}
	if err := s.check(); err != nil {
		return false, err
	}
	keys := []string{s.sessionKey(id)}
	start, us := s.prefix+":{", micros(ttl)
	if create {
		if err := sessionScript.Run(ctx, s.rdb, keys, start, s.linger, id, us, "new").Err(); err != nil {
			return false, fmt.Errorf("redis: session: %w", err)
		}
		s.mu.Lock()
		s.counted[id] = &counts{}
		s.mu.Unlock()
		return true, nil
	}
	s.mu.Lock()
	c := s.counted[id]
	s.mu.Unlock()
	if c == nil {
		return false, nil
	}
	op := "renew"
	binds, unbinds := c.binds.Load(), c.unbinds.Load()
	var n int
	var pause time.Duration
	began := time.Now()
	for {
		v, err := sessionScript.Run(ctx, s.rdb, keys, start, s.linger, id, us, op, binds, unbinds).Slice()
		if err != nil {
			return false, fmt.Errorf("redis: session: %w", err)
		}
		if len(v) == 1 && v[0] == int64(0) {
			return false, nil // the Keeper ends it (EndSession)
		}
		var fields int64
		cursor, ok := v[1].(string)
		if len(v) == 3 {
			fields, _ = v[2].(int64)
		}
		if len(v) != 3 || v[0] != int64(1) || !ok || fields < 2 {
			return false, fmt.Errorf("redis: session: unexpected reply %v", v)
		}
		if cursor == "0" {
			return true, nil
		}
		if n++; n == 1 {
			pause = ttl / 6 / time.Duration(fields/(walkCount*walkBurst)+1)
		}
		if n%walkBurst == 0 {
			if err := driver.Sleep(ctx, min(pause, 3*time.Since(began))); err != nil {
				return false, fmt.Errorf("redis: session: %w", err)
			}
			began = time.Now()
		}
		op = cursor
	}
}

// A session's renewal extends up to walkCount holds a call (HSCAN's COUNT
// in session.lua), and pauses after every walkBurst calls.
const walkCount, walkBurst = 1000, 10

// ReleaseSession implements driver.SessionReleaser: it ends session x and
// releases its holds on the server, a thousand a call, as Release would,
// without the client sending their names (endsession.lua). The session's
// renewal stops first: one that found the session ended would delete its
// record, and with it the list of holds still to release.
func (s *Store) ReleaseSession(ctx context.Context, x driver.Session) error {
	xs, ok := x.(*sessions.Session)
	if !ok || s.sessions == nil {
		return errors.New("redis: release session: not a session of this store")
	}
	if err := s.check(); err != nil {
		return err
	}
	if err := s.sessions.Stop(ctx, xs); err != nil {
		return fmt.Errorf("redis: release session: %w", err)
	}
	keys := []string{s.sessionKey(xs.ID())}
	for cursor := "0"; ; {
		next, err := endScript.Run(ctx, s.rdb, keys, s.prefix+":{", s.linger, xs.ID(), cursor).Text()
		if err != nil {
			return fmt.Errorf("redis: release session: %w", err)
		}
		if next == "0" {
			s.mu.Lock()
			delete(s.counted, xs.ID())
			s.mu.Unlock()
			return nil
		}
		if cursor == "0" && s.releasePause > 0 {
			_ = driver.Sleep(ctx, s.releasePause)
		}
		cursor = next
	}
}

// EndSession implements sessions.Store: it deletes the session, and the
// client's counts of it. Its holds stay until their expiry, which is no
// later than the session's was.
func (s *Store) EndSession(ctx context.Context, id string) error {
	s.mu.Lock()
	delete(s.counted, id)
	s.mu.Unlock()
	if err := s.rdb.Del(ctx, s.sessionKey(id)).Err(); err != nil {
		return fmt.Errorf("redis: end session: %w", err)
	}
	return nil
}

func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	var keys []string
	if f.Name != "" {
		keys = []string{s.stateKey(f.Name)}
	} else {
		var err error
		if keys, err = s.scan(ctx); err != nil {
			return nil, fmt.Errorf("redis: list: %w", err)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	queued := "0"
	if f.Queued {
		queued = "1"
	}
	calls := s.batch(keys, []any{f.Prefix, f.Owner, queued}, nil)
	if err := s.run(ctx, listScript, calls); err != nil {
		return nil, fmt.Errorf("redis: list: %w", err)
	}
	var out []driver.Holder
	for _, c := range calls {
		hs, err := holders(c.cmd)
		if err != nil {
			return nil, fmt.Errorf("redis: list: %w", err)
		}
		for _, h := range hs {
			if f.Name == "" || h.Name == f.Name {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	keys, err := s.scan(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: purge: %w", err)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	calls := s.batch(keys, []any{s.linger}, nil)
	if err := s.run(ctx, purgeScript, calls); err != nil {
		return nil, fmt.Errorf("redis: purge: %w", err)
	}
	var out []driver.Holder
	for _, c := range calls {
		hs, err := holders(c.cmd)
		if err != nil {
			return nil, fmt.Errorf("redis: purge: %w", err)
		}
		out = append(out, hs...)
	}
	return out, nil
}

// holders decodes the reply of the list and purge scripts: the server's
// time, then 11 fields per entry (see emit in the scripts).
func holders(cmd *redis.Cmd) ([]driver.Holder, error) {
	vs, err := cmd.Slice()
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 || (len(vs)-1)%11 != 0 {
		return nil, fmt.Errorf("unexpected reply of %d values", len(vs))
	}
	now, ok := vs[0].(int64)
	if !ok {
		return nil, fmt.Errorf("unexpected time %v", vs[0])
	}
	out := make([]driver.Holder, 0, (len(vs)-1)/11)
	for e := vs[1:]; len(e) > 0; e = e[11:] {
		name, ok1 := e[0].(string)
		owner, ok2 := e[2].(string)
		in, ok3 := e[10].(string)
		n, err := int64s([]any{e[1], e[3], e[4], e[5], e[6], e[7], e[8], e[9]}, 8)
		if !ok1 || !ok2 || !ok3 || err != nil {
			return nil, fmt.Errorf("unexpected entry %v", e[:11])
		}
		h := driver.Holder{
			Name: name, Owner: owner, Mode: driver.Mode(n[1]), Limit: int(n[2]), Queued: n[0] == 1,
			TTL: time.Duration(n[4]) * time.Microsecond, Created: usTime(n[5]), Renewed: usTime(n[6]),
			Expires: usTime(n[7]), Left: time.Duration(n[7]-now) * time.Microsecond,
		}
		if !h.Queued {
			h.Token = uint64(n[3])
		}
		if in != "" {
			var i info
			if err := json.Unmarshal([]byte(in), &i); err != nil {
				return nil, fmt.Errorf("entry of %q: %w", name, err)
			}
			h.Host, h.Meta = i.Host, i.Meta
		}
		out = append(out, h)
	}
	return out, nil
}

// scan returns the state keys of the prefix, from every master.
func (s *Store) scan(ctx context.Context) ([]string, error) {
	pattern := s.scanPattern()
	var mu sync.Mutex
	var keys []string
	one := func(ctx context.Context, c redis.Cmdable) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			if k := it.Val(); s.isStateKey(k) {
				mu.Lock()
				keys = append(keys, k)
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n) })
	case *redis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return one(ctx, n) })
	default:
		err = one(ctx, s.rdb)
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(keys) // SCAN may return a key twice
	return slices.Compact(keys), nil
}

// Close stops the store's waits and, for a store made by Open, closes its
// client. It waits for the goroutines the store started.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.sessions != nil {
		s.sessions.Close() // ends and deletes them, while the client is open
	}
	s.mu.Lock()
	close(s.done)
	var ws []*watch
	for w := range s.blocked {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	if len(ws) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.poke(ctx, ws)
		cancel()
	}
	var err error
	if s.owned {
		err = s.rdb.Close() // breaks the connections of BLPOPs still blocked
	}
	s.wg.Wait()
	s.stop()
	return err
}
