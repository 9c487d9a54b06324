package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/records"
)

// DefaultBucket is the key-value bucket used when Options.Bucket is empty.
const DefaultBucket = "baton-locks"

// Options configure a Store. The zero value works.
type Options struct {
	// Bucket is the key-value bucket of the locks (DefaultBucket if empty):
	// letters, digits, '-' and '_'. Stores with different buckets are
	// independent.
	Bucket string
	// NoCreateBucket stops New from creating the bucket when it is missing;
	// create it yourself with BucketConfig.
	NoCreateBucket bool
	// Replicas is the number of replicas of a bucket New creates (1 if
	// zero): 3 on a cluster, so that an acknowledged write survives the
	// loss of a server.
	Replicas int
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("nats: %w", driver.ErrClosed)

var bucketName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// BucketConfig is the configuration New creates a missing bucket with:
// one value per key (no history), on disk.
func BucketConfig(bucket string, replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "baton locks: one key per lock name",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Store is a lock store in one key-value bucket of a NATS JetStream
// server or cluster. It is safe for concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, Watch, WatchHolders) are its contract with baton's Client, not an application
// API: use the store through baton.New.
type Store struct {
	*records.Store
	b *bucket
}

// bucket is the records the Store works on: one key per lock name.
type bucket struct {
	nc    *natsgo.Conn
	owned bool // made by Open: Close closes it
	kv    jetstream.KeyValue
	name  string
	clk   clock

	kmu         sync.Mutex
	knownValues map[string]knownValue // by key

	wmu      sync.Mutex
	watches  map[string]*keyWatch // by key, for names this Store's waiters wait for
	watching sync.WaitGroup       // the watches' goroutines

	closed atomic.Bool
}

// New returns a store in the bucket opts names (created if missing, unless
// opts.NoCreateBucket) over nc, which the caller keeps: Close leaves it
// open. The connection should not buffer publishes while it reconnects
// (nats.ReconnectBufSize(-1)), so that a write whose call failed is not
// sent later.
func New(ctx context.Context, nc *natsgo.Conn, opts *Options) (*Store, error) {
	if nc == nil {
		return nil, errors.New("nats: New needs a connection")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if !bucketName.MatchString(o.Bucket) {
		return nil, fmt.Errorf("nats: invalid bucket name %q (want letters, digits, '-' and '_')", o.Bucket)
	}
	if o.Replicas < 0 || o.Replicas > 5 {
		return nil, fmt.Errorf("nats: Replicas %d is not between 1 and 5", o.Replicas)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	kv, err := js.KeyValue(ctx, o.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && !o.NoCreateBucket {
		kv, err = js.CreateKeyValue(ctx, BucketConfig(o.Bucket, o.Replicas))
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, o.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("nats: bucket %s: %w", o.Bucket, err)
	}
	b := &bucket{nc: nc, kv: kv, name: o.Bucket, watches: map[string]*keyWatch{}, knownValues: map[string]knownValue{}, clk: clock{turn: make(chan struct{}, 1)}}
	// Waiters are woken by the keys' watchers; records' poll is the
	// fallback for a watcher that could not start.
	return &Store{Store: records.New(b, nil), b: b}, nil
}

// Bucket returns the name of the store's key-value bucket.
func (s *Store) Bucket() string { return s.b.name }

// Close stops the keys' watchers and, for a store made by Open, closes its
// connection.
func (b *bucket) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.wmu.Lock()
	ws := b.watches
	b.watches = map[string]*keyWatch{}
	for _, kw := range ws {
		if kw.idle != nil {
			kw.idle.Stop()
		}
		close(kw.stop)
	}
	b.wmu.Unlock()
	b.watching.Wait()
	if b.owned {
		b.nc.Close()
	}
	return nil
}

func (b *bucket) check() error {
	if b.closed.Load() {
		return ErrClosed
	}
	return nil
}

// connected waits, bounded by ctx, while the connection reconnects: a
// request sent meanwhile would fail at once, as publishes are not buffered.
func (b *bucket) connected(ctx context.Context) error {
	for {
		switch b.nc.Status() {
		case natsgo.CONNECTED:
			return nil
		case natsgo.CLOSED:
			return errors.New("nats: the connection is closed")
		}
		if err := driver.Sleep(ctx, 10*time.Millisecond); err != nil {
			return fmt.Errorf("nats: waiting for the connection to the server: %w", err)
		}
	}
}

// connErr explains the client's error for a request that found the
// connection down.
func connErr(err error) error {
	if errors.Is(err, natsgo.ErrReconnectBufExceeded) || errors.Is(err, natsgo.ErrConnectionReconnecting) {
		return fmt.Errorf("the connection to the server is down: %w", err)
	}
	return err
}

// --- keys ------------------------------------------------------------------

// keyOf is the key of a lock name: letters, digits and '-' as they are,
// every other byte as '_' and two hex digits. Keys keep the order and
// prefixes of names, and no name's key is clockKey.
func keyOf(name string) string { return driver.EscapeName(name, '_', "-") }

// clockKey is the key the store writes to read the server's clock.
const clockKey = "=clock"

// record is the value of a lock name's key.
type record struct {
	Name  string          `json:"name"`
	State lockstate.State `json:"state"`
}

// read returns the state of name and the revision of its key (0 if it has
// none).
func (b *bucket) read(ctx context.Context, name string) (*lockstate.State, uint64, error) {
	if err := b.connected(ctx); err != nil {
		return nil, 0, err
	}
	e, err := b.kv.Get(ctx, keyOf(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &lockstate.State{}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("nats: reading lock %q: %w", name, connErr(err))
	}
	st, err := decode(name, e.Value())
	if err == nil {
		b.remember(e.Key(), e.Revision(), e.Value())
	}
	return st, e.Revision(), err
}

func decode(name string, v []byte) (*lockstate.State, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return nil, fmt.Errorf("nats: decoding lock %q: %w", name, err)
	}
	if r.Name != name {
		return nil, fmt.Errorf("nats: key %s holds lock %q, not %q", keyOf(name), r.Name, name)
	}
	return &r.State, nil
}

// --- records.Records ---------------------------------------------------------

const maxAttempts = 64

// Update implements records.Records: per name, one Get (none when the
// key's last value is known) and, when the state changes, one write
// conditional on the revision read (or create-only).
func (b *bucket) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	if err := b.check(); err != nil {
		return err
	}
	for i, name := range names {
		if err := b.apply(ctx, name, func(st *lockstate.State, now time.Time) error { return fn(i, st, now) }); err != nil {
			return err
		}
	}
	return nil
}

// apply reads the state of name, lets fn change it at a lower bound of the
// server's time, moves the times fn set (equal to that bound) to an upper
// bound, and writes the state back if the key is still at the revision
// read; a conflict reads and decides again.
func (b *bucket) apply(ctx context.Context, name string, fn func(*lockstate.State, time.Time) error) error {
	key := keyOf(name)
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return fmt.Errorf("nats: lock %q: gave up after %d conflicting writes", name, attempt)
		}
		if attempt > 2 {
			if err := driver.Sleep(ctx, time.Duration(rand.Int64N(int64(min(attempt, 20))*int64(time.Millisecond)))); err != nil {
				return err
			}
		}
		if err := b.connected(ctx); err != nil {
			return err
		}
		// The first attempt starts from the key's last known value, if
		// any: the write's revision check catches a stale one.
		st, rev, known := b.known(name, key, attempt)
		if !known {
			var err error
			if st, rev, err = b.read(ctx, name); err != nil {
				return err
			}
		}
		low, high, err := b.clk.bounds(ctx, b.kv)
		if err != nil {
			return err
		}
		ferr := fn(st, low)
		if !st.Dirty {
			if known {
				continue // a decision to write nothing is made on a fresh read
			}
			return ferr
		}
		fix(st, low, high)
		v, err := json.Marshal(record{Name: name, State: *st})
		if err != nil {
			return fmt.Errorf("nats: encoding lock %q: %w", name, err)
		}
		var nrev uint64
		if rev == 0 {
			nrev, err = b.kv.Create(ctx, key, v)
		} else {
			nrev, err = b.kv.Update(ctx, key, v, rev)
		}
		switch {
		case err == nil:
			b.remember(key, nrev, v)
			return ferr
		case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			b.forget(key)
			continue
		default:
			b.forget(key)
			return fmt.Errorf("nats: writing lock %q: %w", name, connErr(err))
		}
	}
}

// The last known value of keys: what this Store wrote or read last, and
// what its watchers saw. A decision that starts from it saves a Get; the
// revision its write is conditional on makes a stale one harmless.
type knownValue struct {
	rev uint64
	v   []byte
}

// maxKnown bounds the known values kept; beyond it they are all dropped.
const maxKnown = 4096

func (b *bucket) known(name, key string, attempt int) (*lockstate.State, uint64, bool) {
	if attempt > 0 {
		return nil, 0, false
	}
	b.kmu.Lock()
	k, ok := b.knownValues[key]
	b.kmu.Unlock()
	if !ok {
		return nil, 0, false
	}
	st, err := decode(name, k.v)
	if err != nil {
		return nil, 0, false
	}
	return st, k.rev, true
}

// remember keeps v as the value of key at revision rev, unless a later
// one is known.
func (b *bucket) remember(key string, rev uint64, v []byte) {
	b.kmu.Lock()
	defer b.kmu.Unlock()
	if k, ok := b.knownValues[key]; ok && k.rev >= rev {
		return
	}
	if len(b.knownValues) >= maxKnown {
		clear(b.knownValues)
	}
	b.knownValues[key] = knownValue{rev, v}
}

func (b *bucket) forget(key string) {
	b.kmu.Lock()
	delete(b.knownValues, key)
	b.kmu.Unlock()
}

// fix moves the times a decision made at now set (equal to now) to high,
// keeping the durations they were given: a hold granted or renewed for TTL
// expires in the bucket no earlier than its holder's own deadline (its
// call's start plus TTL, on its monotonic clock).
func fix(st *lockstate.State, now, high time.Time) {
	d := high.Sub(now)
	for _, es := range [][]lockstate.Entry{st.Holders, st.Queue} {
		for i := range es {
			e := &es[i]
			if e.Renewed.Equal(now) {
				e.Renewed, e.Expires = e.Renewed.Add(d), e.Expires.Add(d)
			}
			if e.Created.Equal(now) {
				e.Created = e.Created.Add(d)
			}
		}
	}
}

// Scan implements records.Records. A name reads its key; a prefix reads
// every key of the bucket through a watcher (one stream of their last
// values) and keeps those of names with the prefix.
func (b *bucket) Scan(ctx context.Context, name, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	if err := b.check(); err != nil {
		return err
	}
	if name != "" {
		st, rev, err := b.read(ctx, name)
		if err != nil || rev == 0 || !strings.HasPrefix(name, prefix) {
			return err
		}
		now, _, err := b.clk.bounds(ctx, b.kv)
		if err != nil {
			return err
		}
		fn(name, st, now)
		return nil
	}
	type rec struct {
		name string
		st   *lockstate.State
	}
	var recs []rec
	if err := b.connected(ctx); err != nil {
		return err
	}
	w, err := b.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("nats: listing bucket %s: %w", b.name, err)
	}
	defer w.Stop()
	want := keyOf(prefix)
	for done := false; !done; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("nats: listing bucket %s: the watcher stopped", b.name)
			}
			if e == nil {
				done = true
				break
			}
			if e.Key() == clockKey || !strings.HasPrefix(e.Key(), want) {
				continue
			}
			var r record
			if err := json.Unmarshal(e.Value(), &r); err != nil {
				return fmt.Errorf("nats: decoding key %s: %w", e.Key(), err)
			}
			if keyOf(r.Name) != e.Key() {
				return fmt.Errorf("nats: key %s holds lock %q", e.Key(), r.Name)
			}
			recs = append(recs, rec{r.Name, &r.State})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	now, _, err := b.clk.bounds(ctx, b.kv)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if !fn(r.name, r.st, now) {
			break
		}
	}
	return nil
}

// --- notifications -----------------------------------------------------------

// keyWatch follows the updates of one key for the waiters of this Store,
// through one watcher (an ordered consumer of the key's subject). It
// outlives its last waiter by linger, so that a waiter that is woken, asks
// and waits again finds it still there.
type keyWatch struct {
	ready   chan struct{} // closed once the watcher runs, or failed (err)
	err     error
	stop    chan struct{} // closed to stop it
	waiters map[*waiter]struct{}
	idle    *time.Timer // stops the watch once it has had no waiter for linger
}

// waiter is one waiting request.
type waiter struct {
	req *driver.Request // nil: any update
	ch  chan struct{}   // closed when an update may grant req
}

const linger = 5 * time.Second

// NotifyRequest implements records.RequestNotifier: a watcher of the
// name's key, one per Store and key with waiters, decodes each update and
// wakes the waiters whose request the new state would grant (by a lower
// bound of the server's time): a release wakes the head of the queue, not
// every waiter. It returns once the watcher follows the key, so that no
// change after the call is missed.
func (b *bucket) NotifyRequest(ctx context.Context, req *driver.Request) (<-chan struct{}, func(), error) {
	r := *req
	return b.notify(ctx, req.Name, &r)
}

// Notify implements records.Notifier: the channel is closed by the next
// update of the name's key, whatever it is (for a holder watch).
func (b *bucket) Notify(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.notify(ctx, name, nil)
}

// notify registers a waiter of name for the updates that may grant req
// (every update if req is nil).
func (b *bucket) notify(ctx context.Context, name string, req *driver.Request) (<-chan struct{}, func(), error) {
	if err := b.check(); err != nil {
		return nil, nil, err
	}
	key := keyOf(name)
	wt := &waiter{req: req, ch: make(chan struct{})}
	b.wmu.Lock()
	if b.closed.Load() {
		b.wmu.Unlock()
		return nil, nil, ErrClosed
	}
	kw := b.watches[key]
	if kw == nil {
		kw = &keyWatch{ready: make(chan struct{}), stop: make(chan struct{}), waiters: map[*waiter]struct{}{}}
		b.watches[key] = kw
		b.watching.Add(1)
		go b.watch(key, kw)
	}
	if kw.idle != nil {
		kw.idle.Stop()
		kw.idle = nil
	}
	kw.waiters[wt] = struct{}{}
	b.wmu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			b.wmu.Lock()
			defer b.wmu.Unlock()
			delete(kw.waiters, wt)
			if len(kw.waiters) == 0 && kw.idle == nil && b.watches[key] == kw {
				kw.idle = time.AfterFunc(linger, func() { b.unwatch(key, kw) })
			}
		})
	}
	select {
	case <-kw.ready:
		if kw.err != nil {
			stop()
			return nil, nil, fmt.Errorf("nats: watching lock %q: %w", name, kw.err)
		}
		return wt.ch, stop, nil
	case <-ctx.Done():
		stop()
		return nil, nil, ctx.Err()
	}
}

// unwatch stops kw if it still has no waiter.
func (b *bucket) unwatch(key string, kw *keyWatch) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if len(kw.waiters) == 0 && b.watches[key] == kw {
		delete(b.watches, key)
		close(kw.stop)
	}
}

// watch starts a watcher of key, then wakes the waiters of key whose
// request an update may grant, until it is stopped or the watcher stops by
// itself.
func (b *bucket) watch(key string, kw *keyWatch) {
	defer b.watching.Done()
	defer func() {
		// A watch that ended wakes its waiters, to ask (and watch) again.
		b.wmu.Lock()
		if b.watches[key] == kw {
			delete(b.watches, key)
		}
		for wt := range kw.waiters {
			close(wt.ch)
			delete(kw.waiters, wt)
		}
		b.wmu.Unlock()
	}()
	// The watcher's creation is bounded by the client's JetStream timeout.
	w, err := b.kv.Watch(context.Background(), key, jetstream.UpdatesOnly())
	kw.err = err
	close(kw.ready)
	if err != nil {
		return
	}
	defer w.Stop()
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case e, ok = <-w.Updates():
			if !ok {
				return
			}
		case <-kw.stop:
			return
		}
		if e == nil {
			continue
		}
		var st *lockstate.State
		if e.Operation() == jetstream.KeyValuePut {
			var r record
			if json.Unmarshal(e.Value(), &r) == nil {
				st = &r.State
				b.remember(key, e.Revision(), e.Value())
			}
		} else {
			b.forget(key)
		}
		now := b.clk.low()
		b.wmu.Lock()
		for wt := range kw.waiters {
			// Anything but a state that refuses the request wakes it.
			if wt.req != nil && st != nil && !now.IsZero() {
				if _, err := st.Clone().Acquire(wt.req, now); err != nil {
					continue
				}
			}
			close(wt.ch)
			delete(kw.waiters, wt)
		}
		b.wmu.Unlock()
	}
}
