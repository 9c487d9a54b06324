// Package redis is baton's Redis store, on go-redis v9. Import it for its
// URL schemes:
//
//	import _ "github.com/baton-go/baton/redis"
//
//	client, err := baton.Open(ctx, "redis://:password@10.0.0.5:6379/0", nil)
//
// or build a store over a go-redis client you own with [New] (the only way
// to use Sentinel or Cluster) and pass it to baton.New:
//
//	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "locks", SentinelAddrs: addrs})
//	client, err := baton.New(batonredis.New(rdb, nil), nil)
//
//	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
//	client, err := baton.New(batonredis.New(rdb, nil), nil)
//
// It needs Redis 5 or later (its tests run on Redis 7.0 and Valkey 9.1), or a server that
// runs Redis's Lua scripts with the same libraries (struct), TIME and
// writes after TIME in scripts (replication of scripts by their effects,
// the default since Redis 5).
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
// Every key of a lock name starts with "<prefix>:{<tag>}:", where the tag
// is 32 hex digits of the SHA-256 of the name: names may hold any bytes,
// braces included, and the keys of one name always share a cluster hash
// slot. The name itself is kept in the hash, so that listings report it.
//
//	<prefix>:{<tag>}:r          HASH: the name, a summary, and an entry per holder and queued owner
//	<prefix>:{<tag>}:q          ZSET: the queue, owner → ticket
//	<prefix>:{<tag>}:c          the name's last fencing token (see Fencing tokens)
//	<prefix>:{<tag>}:w:<owner>  the mailbox of a queued owner (a list)
//
// The hash and the queue expire Linger after the last entry would have
// expired, or up to that entry's TTL later (their expiry is moved only
// when an entry outlives it, and then by twice as much), and are deleted
// when the last entry is released, so that names nobody uses any more
// clean themselves up. Mailboxes expire after their owner's queue TTL.
// The counter expires a week after the server's clock passes the last
// token it holds (see Fencing tokens); Purge never deletes it.
//
// Run Redis with maxmemory-policy noeviction or a volatile-* policy: an
// allkeys-* policy may evict a hash (its holders vanish, and someone else
// is granted the lock at once).
//
// This layout replaced, before baton's first release, one that kept a
// name's whole state in one string (<prefix>:{<tag>}:s). The two do not
// see each other's holders: stop every process of the old layout before
// one of the new takes locks of the same prefix. The counters are shared,
// so tokens keep growing across the change.
//
// # Fencing tokens
//
// A grant's token is the larger of the name's last token plus one and the
// server's clock in microseconds (a hybrid logical clock), so tokens
// exceed every token of the name handed out before even when the counter
// was lost: a restart without persistence, the last second of an
// appendfsync everysec file, a replica promoted while behind, an evicted
// key. The server's clock has moved past the lost tokens since, unless it
// stepped back by more than the time between the lost grant and the new
// one; keep the servers' clocks synchronised and never stepped back
// (NTP slews). While the clock is ahead of the counter, the counter is
// only needed for grants within the same microsecond, and a week later it
// expires: a name nobody uses costs nothing after that. Tokens are below
// 2^53 (the clock in µs is about 2^51), exact in Lua's numbers.
//
// # Scripts and time
//
// Acquire, Renew, Release, List and Purge are each one Lua script (EVALSHA,
// falling back to EVAL when the server does not have it cached), so each is
// one atomic decision and one round trip. The scripts are the .lua files of
// the package's lua directory. Acquire of a name with no state, and Release
// of a name whose only entry is the caller's, take a fast path of a few
// commands (Acquire: EXISTS, TIME, GET and SET of the counter, HSET,
// PEXPIRE; Release: HMGET, TIME, DEL) before the general path, which
// defines the grant rules' functions each time it runs; TestFastPath shows
// that the fast path writes what the general path would. The scripts apply the grant rules
// of package lockstate: expired holders and queue entries are dropped
// first; an owner that holds the name re-acquires it, keeping its token;
// exclusive requests need no holders and nobody queued ahead; shared ones
// no exclusive holder, no exclusive request queued ahead and, with a limit
// L, fewer than L holders and shared requests ahead; a waiting request
// keeps its FIFO place, refreshed once half its queue TTL is used. An
// operation reads its own entry and the summary (counts, and bounds of the
// earliest and latest expiries), not the whole state: expired entries are
// looked for only once the clock passes the earliest expiry. TestModel
// runs random requests against the scripts and against lockstate and
// compares every outcome. A batch of Renew or Release whose names fall in
// several cluster slots runs one script per slot, pipelined, still one
// round trip. List and Purge without a name SCAN the keyspace (every
// master of a cluster) for hashes of the prefix, then read them with one
// script per slot and per 256 names, pipelined: their cost grows with the
// size of the database, not just with the number of locks.
//
// Expiry is judged by the clock of the Redis server (TIME, read inside the
// scripts, which Redis replicates by their effects), never by the clients'.
// After a failover the new master's clock takes over: if it is behind the
// old one, holds last longer; if it is ahead, they end sooner, by the
// difference. Keep the servers' clocks synchronised (NTP).
//
// # Hand-off
//
// The server hands the lock over. Whenever a script removes a holder or
// queue entry (a release, an expiry it notices, a purge, a waiter that
// gives up), it grants the queued requests that the rules now let in, in
// FIFO order (the exclusive head, or the run of shared requests at the head
// that fit their limits), and pushes each grant (token, time, expiry) into
// its owner's mailbox, where the waiting Lock blocks in BLPOP. A hand-off
// therefore costs the releasing holder's one script and one reply to the
// waiter, with no round trip of the waiter's own: no thundering herd, no
// polling. A grant stays in the mailbox until its owner takes it, so one
// that comes between the refused attempt and the BLPOP is not lost.
// Pub/sub would lose it, and delivers every message to every subscriber of
// a channel. A hold that expires without a script noticing hands nothing
// over: baton tries again on its own when the store's Busy reply said the
// first holder would expire, and that attempt hands the lock to the head
// of the queue.
//
// baton counts a lease from the moment it calls Acquire, later than the
// moment the server granted it, so a handed-over grant lasts a little
// longer in the store than its TTL (1/20 of it, at least 1ms and at most
// 50ms), and it is handed out only if the time between the refused
// attempt (or a TIME sent with the BLPOP) and the Acquire call, less the
// time the server says passed until the grant (taken 1% short, for clocks
// running at different rates), fits in that extra time. Otherwise Acquire
// asks the server again, which finds the owner holding, extends the hold
// and counts its TTL anew.
//
// A waiter that dies while queued may be handed the lock before its queue
// entry expires (10×MaxPoll after its last attempt): the lock then stays
// with it until that hold's TTL runs out, as it would with a holder that
// died. A waiter whose Lock gives up takes itself out of the queue, and
// releases a grant it was handed meanwhile.
//
// A blocked BLPOP holds a connection of the go-redis pool, and blocks for
// at most two seconds (less if the client's read timeout is under 2.7s;
// fractions of a second need Redis 6). At most Options.MaxWaiters of them
// block at once per Store (half the pool by default), so that renewals
// always find a connection; further waiters wait for a turn, and find
// their grant then, up to two seconds late. A BLPOP outlives the Wait that
// sent it, so that a grant it takes is handed to the next Wait.
//
// # Failover, and what it can break
//
// Redis replicates asynchronously. When a master fails and a replica is
// promoted (by Sentinel, by Cluster, or by hand), writes the master
// acknowledged but had not yet sent to that replica are lost. For locks
// this means:
//
//   - A grant can be lost: its holder believes it holds the lock, and the
//     new master grants it to someone else at once. Two holders overlap
//     until the first one's next renewal fails (at most a third of its TTL,
//     plus its renewal's timeout), or until its lease ends.
//   - The counter can be lost with it, but the new grant's token is the
//     new master's clock, past the lost grant's token unless that clock is
//     behind the old master's by more than the time between the two
//     grants: a resource that checks tokens refuses the holder of the lost
//     grant once it has seen the new one.
//   - A release can be lost: the lock stays held until its TTL runs out.
//
// WAIT (after each grant) and min-replicas-to-write / min-replicas-max-lag
// make such a loss less likely, not impossible: WAIT does not roll back a
// write that timed out, and Sentinel or Cluster may still promote a replica
// that is behind. Persistence does not help a promoted replica. A server
// restarted without persistence has lost every hold (they are granted
// again at once); with appendfsync everysec, the last second of grants can
// be lost in a crash. Holds survive a crash only with appendonly yes and
// appendfsync always, and no failover (or one that never promotes a
// replica behind the master). When locks must survive failures of the
// store, use a store that replicates synchronously (etcd, ZooKeeper,
// PostgreSQL with synchronous replication). This package does not
// implement Redlock (locking a majority of independent masters): it adds
// timing assumptions of its own, and the tokens above already survive the
// loss of a master's writes.
//
// # Logs
//
// The store logs nothing. go-redis logs connection trouble through one
// process-wide logger, to stderr by default: a program routes or silences
// it with redis.SetLogger (baton's command passes it to --verbose).
//
// # Cluster and Sentinel
//
// Use New with a go-redis ClusterClient or FailoverClient. All keys of a
// lock name share a hash slot, so every script runs on one node; batches are
// split per slot. Scripts touch keys of a name they do not declare (its
// queue, counter and mailboxes), which Redis allows for keys of the slot
// the script runs in. List and
// Purge SCAN every master. With a Ring (client-side sharding), batches are
// split per name. A Prefix containing braces would put every lock in one
// slot (it still works, on one node). Besides every test on each
// server, the tests run the conformance suite (on Redis 7.0)
// through a ClusterClient on a three-master cluster, through a Ring of two
// servers, and through a FailoverClient on a master, its replica and one
// Sentinel (a FailoverClient is a *redis.Client, which this package treats
// as one server), all started by the tests; TestSentinel also has Sentinel
// promote the replica while a lock is held and another client waits for
// it: the holder renews and releases on the new master and the waiter is
// handed the lock there.
//
// Two names whose tags collide (a chance of 2⁻¹²⁸ per pair) would share
// their keys: Acquire refuses the second with an error instead.
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
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
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
}

// New returns a store over rdb: a *redis.Client (single server, or a
// Sentinel-backed FailoverClient), a *redis.ClusterClient or a *redis.Ring.
// The caller owns rdb: Close leaves it open. Set ContextTimeoutEnabled in
// rdb's options so that the deadlines baton gives its calls (a renewal must
// not outlast the lease) bound their network I/O.
func New(rdb redis.UniversalClient, opts *Options) *Store {
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
	}
	s.ctx, s.stop = context.WithCancel(context.Background())
	return s
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
	s := New(rdb, o)
	s.owned = true
	return s, nil
}

// parseURL splits rawURL into go-redis options and ours.
func parseURL(rawURL string, opts *Options) (*redis.Options, *Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
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
	b := s.base(req.Name)
	sent := time.Now()
	v, err := acquireScript.Run(ctx, s.rdb, []string{b + "r", b + "q", b + "c"},
		req.Name, req.Owner, s.acquireArgs(req), in).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redis: acquire: %w", err)
	}
	switch {
	case len(v) == 6 && v[0] == 1:
		return &driver.Grant{Token: uint64(v[1]), Created: usTime(v[2]), Renewed: usTime(v[3]),
			Expires: usTime(v[4]), Extended: v[5] == 1}, nil
	case len(v) == 3 && v[0] == 0:
		if req.Queue {
			s.setMark(req, mark{sent: sent, at: v[2]})
		}
		return nil, &driver.Busy{After: time.Duration(v[1]) * time.Microsecond}
	case len(v) == 1 && v[0] == -1:
		return nil, driver.ErrModeConflict
	case len(v) == 1 && v[0] == -2:
		return nil, driver.ErrLimitConflict
	}
	return nil, fmt.Errorf("redis: acquire: unexpected reply %v", v)
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
// maxKeys of them), each with common followed by item(i) for every key i
// of the group.
func (s *Store) batch(keys []string, common []any, item func(i int) []any) []*call {
	var calls []*call
	var groups [][]int
	for _, g := range s.groups(keys) {
		for len(g) > maxKeys {
			groups = append(groups, g[:maxKeys])
			g = g[maxKeys:]
		}
		groups = append(groups, g)
	}
	for _, g := range groups {
		c := &call{idx: g, keys: make([]string, len(g)), args: slices.Clone(common)}
		for j, i := range g {
			c.keys[j] = keys[i]
			if item != nil {
				c.args = append(c.args, item(i)...)
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
	keys := make([]string, len(holds))
	for i, h := range holds {
		keys[i] = s.stateKey(h.Name)
	}
	calls := s.batch(keys, []any{s.linger}, func(i int) []any {
		return []any{holds[i].Owner, micros(holds[i].TTL)}
	})
	if err := s.run(ctx, renewScript, calls); err != nil {
		return nil, fmt.Errorf("redis: renew: %w", err)
	}
	for _, c := range calls {
		rs, err := c.cmd.Slice()
		if err != nil || len(rs) != len(c.idx) {
			return nil, fmt.Errorf("redis: renew: unexpected reply %v (%v)", rs, err)
		}
		for j, r := range rs {
			g, ok := r.([]any)
			if !ok {
				continue // not held
			}
			v, err := int64s(g, 4)
			if err != nil {
				return nil, fmt.Errorf("redis: renew: %w", err)
			}
			out[c.idx[j]] = &driver.Grant{Token: uint64(v[0]), Created: usTime(v[1]), Renewed: usTime(v[2]), Expires: usTime(v[3])}
		}
	}
	return out, nil
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
	calls := s.batch(sk, []any{s.linger}, func(i int) []any { return []any{keys[i].Owner} })
	if err := s.run(ctx, releaseScript, calls); err != nil {
		return nil, fmt.Errorf("redis: release: %w", err)
	}
	for _, c := range calls {
		rs, err := c.cmd.Int64Slice()
		if err != nil || len(rs) != len(c.idx) {
			return nil, fmt.Errorf("redis: release: unexpected reply %v (%v)", rs, err)
		}
		for j, r := range rs {
			out[c.idx[j]] = r == 1
		}
	}
	return out, nil
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
