package baton

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton/driver"
)

// Options configure a Client. The zero value works.
type Options struct {
	// TTL is the default lease length (15s if zero). A holder that stops
	// renewing (it crashed, or lost the store) blocks others for up to TTL.
	TTL time.Duration
	// Host is recorded with every hold (os.Hostname if empty).
	Host string
	// MaxPoll bounds the time between two attempts of a waiting acquire: the
	// backoff cap where the store cannot wake waiters, and the fallback poll
	// where it can (500ms if zero). A waiting request keeps its place in the
	// queue for 10×MaxPoll without an attempt, so a waiter that dies leaves
	// the queue within that time.
	MaxPoll time.Duration
	// Retries is how many times Lock and TryLock retry a store call that
	// failed (a lost connection, a restarting server) before they give up,
	// backing off exponentially with jitter from 8ms up to MaxPoll. They
	// retry with the same owner, so a retry finds its earlier attempt's
	// queue entry or grant. 3 if zero; negative for none. Keepalive retries
	// on its own until the lease's deadline.
	Retries int
	// OnEvent, if set, is called for lease events: quickly, and never
	// concurrently for one lease.
	OnEvent func(Event)
	// Logger receives the library's own diagnostics: renewals that failed,
	// leases lost or expired (nil: none). Stores' drivers log through
	// their stores' options.
	Logger *slog.Logger
	// Observer, if set, sees every operation, store call and event, for
	// metrics and traces.
	Observer Observer
	// LockDelay is every lock's lock-delay (LockOptions.LockDelay) unless
	// its LockOptions give one. Zero: none.
	LockDelay time.Duration
}

// LockOptions configure one acquisition. A nil *LockOptions takes an
// exclusive lock with the client's defaults.
type LockOptions struct {
	// Shared takes a shared lock: many shared holders at once, none
	// together with an exclusive one.
	Shared bool
	// Limit > 0 takes one of Limit slots of a semaphore (a shared lock
	// that at most Limit holders hold at once). While a name is held
	// shared, a request with another limit (0 for a plain shared lock)
	// fails with ErrLimitConflict: it would exceed someone's limit.
	Limit int
	// TTL overrides the client's default lease length.
	TTL time.Duration
	// Owner identifies the holder. Empty means a new unguessable owner for
	// this acquisition. A chosen owner groups holds (see Client.RenewOwner
	// and Client.ReleaseOwner), and acquiring a name the owner already
	// holds extends that hold and keeps its token. Anyone who knows an owner
	// can renew or release its holds: keep chosen owners unguessable.
	Owner string
	// Meta is free-form metadata stored with the hold and shown by Status.
	Meta map[string]string
	// NoKeepAlive turns automatic renewal off: the lease ends, with
	// ErrExpired, when its TTL runs out, and is then released, unless the
	// holder calls Renew in time.
	NoKeepAlive bool
	// MinHold keeps the name held for at least this long after the grant,
	// even if the lease is released earlier (ShedLock's lockAtLeastFor):
	// a job scheduled on many machines, whose clocks and schedulers differ
	// by less than MinHold, runs once per period. An earlier Release ends
	// the lease here at once and leaves the hold in the store, under its
	// owner, until MinHold has passed: on stores whose holds have a TTL,
	// by renewing the hold for the time left, so that it stays even if
	// this process exits; on stores whose holds live in a session (etcd,
	// ZooKeeper), by releasing it only then: Release waits, bounded by its
	// context, and Client.Close releases at once. (A renewal by keepalive
	// in flight during the Release may keep the hold up to one TTL
	// longer.) Zero: none.
	MinHold time.Duration
	// LockDelay, if positive, keeps the name from everyone for this long
	// after the lease is lost involuntarily (Chubby's and Consul's
	// lock-delay): when its holder died, was paused or cut off and stopped
	// renewing, the store grants the name to nobody until LockDelay after
	// the hold's TTL ran out, by the store's clock; a Release frees it at
	// once. It protects resources that cannot check fencing tokens from a
	// holder that acts on after its lease ended. The store keeps the hold
	// for TTL + LockDelay from each renewal, while the lease lasts TTL, and
	// a lease that ends lost or expired is not released. Stores whose
	// holds live in a session (etcd, ZooKeeper) cannot keep a hold past
	// its session: Lock refuses it there with errors.ErrUnsupported.
	// Zero: Options.LockDelay.
	LockDelay time.Duration
	// Revocable makes Do follow asks to release the lock (Client.Ask,
	// Lease.Asked): an ask cancels fn's context with an *AskedError as its
	// cause (errors.Is(cause, ErrAsked)). Do starts watching for asks
	// MaxPoll after the grant, so a shorter fn costs no store call more.
	Revocable bool
}

// EventKind says what happened to a lease.
type EventKind string

const (
	EventWaiting     EventKind = "waiting" // a Lock was refused and waits (Token is zero)
	EventAcquired    EventKind = "acquired"
	EventRenewed     EventKind = "renewed"
	EventRenewFailed EventKind = "renew-failed" // will retry until the deadline
	EventLost        EventKind = "lost"
	EventExpired     EventKind = "expired"
	EventReleased    EventKind = "released"
	// EventAsked: another client asked the holder to release the lock
	// (Client.Ask); Err is the *AskedError. Reported only for leases that
	// follow asks (Lease.Asked).
	EventAsked EventKind = "asked"
)

// Event reports a change to a lease, or a request that waits.
type Event struct {
	Kind  EventKind
	Name  string
	Owner string
	Token uint64
	Err   error
	// Left, for EventRenewed, is the time the lease had left when the
	// renewal was sent: a renewal that comes ever closer to the deadline
	// is the warning before a lease is lost.
	Left time.Duration
	// Held, for the events that end a lease, is how long it was held.
	Held time.Duration
}

// Client takes locks in one store. It is safe for concurrent use.
type Client struct {
	store  driver.Store
	waiter driver.Waiter // nil: the store cannot wake waiters
	opts   Options
	log    *slog.Logger
	clock  clock // realClock but in tests

	ctx  context.Context // cancelled by Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	epoch time.Time // origin of the grid of renew times (see renewTime)

	mu     sync.Mutex
	closed bool
	leases map[driver.Key]*Lease
	// keepalive state, guarded by mu
	slots      slotHeap                // leases to keep alive, by renew time
	slotAt     map[time.Duration]*slot // the same slots, by time (from epoch)
	kaTimer    clockTimer              // made at the first renew time
	kaAt       time.Time               // when kaTimer fires; zero when it is stopped
	kaRunning  bool                    // the keepalive goroutine runs
	ka         kaBuffers               // the keepalive goroutine's own
	spareSlots spares
	// sessions watched for stores whose holds live in a store session
	sessions map[driver.Session]*sessionWatch

	// the timers that end leases at their deadlines (see expiry); emu is
	// taken last, after c.mu and any Lease.mu
	emu       sync.Mutex
	expiries  map[time.Duration]*expiry // by deadline (from epoch)
	lastExp   *expiry                   // the one a lease last joined
	spareExps spares
}

// New returns a Client over store, which it owns: Close closes it.
func New(store driver.Store, opts *Options) (*Client, error) {
	return newClient(store, opts, realClock{})
}

// newClient is New on clock k (tests pass a fake one).
func newClient(store driver.Store, opts *Options, k clock) (*Client, error) {
	if store == nil {
		return nil, invalid("store is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.TTL == 0 {
		o.TTL = 15 * time.Second
	}
	if err := checkTTL("default TTL", o.TTL); err != nil {
		return nil, err
	}
	if o.MaxPoll == 0 {
		o.MaxPoll = 500 * time.Millisecond
	}
	if o.MaxPoll < time.Millisecond {
		return nil, invalid("MaxPoll %v is below 1ms", o.MaxPoll)
	}
	if o.LockDelay < 0 {
		return nil, invalid("LockDelay %v is negative", o.LockDelay)
	}
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	switch {
	case o.Retries == 0:
		o.Retries = 3
	case o.Retries < 0:
		o.Retries = 0
	}
	c := &Client{
		store:    store,
		opts:     o,
		clock:    k,
		epoch:    k.Now(),
		log:      cmp.Or(o.Logger, discardLogger),
		leases:   make(map[driver.Key]*Lease),
		slotAt:   make(map[time.Duration]*slot),
		sessions: make(map[driver.Session]*sessionWatch),
		expiries: make(map[time.Duration]*expiry),
	}
	c.ctx, c.stop = context.WithCancel(context.Background())
	c.waiter, _ = store.(driver.Waiter)
	return c, nil
}

// NewOwner returns a new unguessable owner id, for LockOptions.Owner.
func NewOwner() string { return rand.Text() }

// Lock takes the lock, waiting until it is granted or ctx ends.
func (c *Client) Lock(ctx context.Context, name string, o *LockOptions) (*Lease, error) {
	return c.acquire(ctx, name, o, true)
}

// TryLock takes the lock if it can be granted at once, and returns
// ErrLocked otherwise. A request is refused while others wait in the queue,
// even if the lock is free at that moment (FIFO fairness).
func (c *Client) TryLock(ctx context.Context, name string, o *LockOptions) (*Lease, error) {
	return c.acquire(ctx, name, o, false)
}

// Do takes the lock (waiting as Lock does), runs fn with a context that is
// cancelled when ctx ends or the lease may be lost, then releases the lock.
// When the lease was lost while fn ran, the error wraps ErrLeaseLost (or
// ErrExpired) besides fn's own error. Bound the whole with ctx's deadline.
func (c *Client) Do(ctx context.Context, name string, o *LockOptions, fn func(ctx context.Context, l *Lease) error) (err error) {
	ctx, end := c.observe(ctx, opOf("do", name, o))
	var token uint64
	defer func() { end(OpResult{Err: err, Token: token}) }()
	l, err := c.Lock(ctx, name, o)
	if err != nil {
		return err
	}
	token = l.Token()
	fctx, cancel := context.WithCancelCause(ctx)
	lctx := l.Context()
	stop := context.AfterFunc(lctx, func() { cancel(context.Cause(lctx)) })
	if o != nil && o.Revocable {
		stopAsks := l.cancelOnAsk(fctx, cancel, c.opts.MaxPoll)
		defer stopAsks()
	}
	ferr := fn(fctx, l)
	stop()
	cancel(nil)
	if asked := l.AskCause(); asked != nil && ferr != nil && !errors.Is(ferr, ErrAsked) {
		ferr = errors.Join(ferr, asked)
	}
	lost := l.Err()
	rctx, rcancel := c.withTimeout(context.WithoutCancel(ctx), c.opTimeout()+l.minLeft(c.clock.Now()))
	defer rcancel()
	rerr := l.Release(rctx)
	if lost != nil && !errors.Is(lost, ErrReleased) {
		return errors.Join(ferr, fmt.Errorf("%w: lock %q", lost, name))
	}
	return errors.Join(ferr, rerr)
}

func (c *Client) request(name string, o *LockOptions, queue bool) (*driver.Request, bool, error) {
	if o == nil {
		o = &LockOptions{}
	}
	if err := checkName(name); err != nil {
		return nil, false, err
	}
	req := &driver.Request{
		Name: name, Owner: o.Owner, Mode: driver.Exclusive, TTL: c.opts.TTL,
		Queue: queue, QueueTTL: 10 * c.opts.MaxPoll, Host: c.opts.Host, Meta: o.Meta,
	}
	if o.TTL != 0 {
		if err := checkTTL("TTL", o.TTL); err != nil {
			return nil, false, err
		}
		req.TTL = o.TTL
	}
	switch {
	case o.Limit < 0:
		return nil, false, invalid("semaphore limit %d is negative", o.Limit)
	case o.Limit > 0 || o.Shared:
		req.Mode, req.Limit = driver.Shared, o.Limit
	}
	if req.Owner == "" {
		req.Owner = NewOwner()
	} else if err := checkOwner(req.Owner); err != nil {
		return nil, false, err
	}
	if err := checkMeta(o.Meta); err != nil {
		return nil, false, err
	}
	if o.MinHold < 0 {
		return nil, false, invalid("minimum hold %v is negative", o.MinHold)
	}
	if o.LockDelay < 0 {
		return nil, false, invalid("lock-delay %v is negative", o.LockDelay)
	}
	return req, !o.NoKeepAlive, nil
}

// opOf describes an acquisition of name with o, for the Observer.
func opOf(kind, name string, o *LockOptions) Op {
	op := Op{Kind: kind, Name: name, Mode: Exclusive}
	if o != nil && (o.Shared || o.Limit > 0) {
		op.Mode, op.Limit = Shared, o.Limit
	}
	return op
}

func (c *Client) acquire(ctx context.Context, name string, o *LockOptions, wait bool) (l *Lease, err error) {
	kind := "trylock"
	if wait {
		kind = "lock"
	}
	ctx, end := c.observe(ctx, opOf(kind, name, o))
	var waitStart time.Time
	defer func() {
		r := OpResult{Err: err}
		if l != nil {
			r.Token = l.Token()
		}
		if !waitStart.IsZero() {
			r.Waited = c.clock.Now().Sub(waitStart)
		}
		end(r)
	}()
	req, keepAlive, err := c.request(name, o, wait)
	if err != nil {
		return nil, err
	}
	delay := c.opts.LockDelay
	if o != nil && o.LockDelay > 0 {
		delay = o.LockDelay
	}
	// A store may keep the hold in a session of its own only while the
	// lease lasts: not past it, as a lock-delay or a minimum hold would.
	// And only once the client holds another lease: a session pays where
	// holds overlap, and a process that holds one lock at a time (a job,
	// the CLI) would renew a session besides its lease.
	c.mu.Lock()
	others := len(c.leases) > 0
	c.mu.Unlock()
	req.KeepAlive = keepAlive && delay == 0 && (o == nil || o.MinHold == 0) && others
	ttl := req.TTL // the lease's; the store keeps the hold for the delay longer
	req.TTL += delay
	if c.isClosed() {
		return nil, storeErr("lock", name, ErrClosed)
	}
	chosenOwner := o != nil && o.Owner != ""
	var watch driver.Watch
	watched := false
	defer func() {
		if watch != nil {
			watch.Close()
		}
	}()
	bo := backoff{max: c.opts.MaxPoll}
	retry := backoff{n: 3, max: c.opts.MaxPoll}
	for {
		sent := c.clock.Now()
		// What Replay compares with the store's changes: the process's
		// real clock, which the store shares, even where c.clock is fake.
		storeSent := realClock{}.Now()
		done := c.call(ctx, "acquire", name)
		g, err := c.store.Acquire(ctx, req)
		if err == nil && g.Session == nil && !c.clock.Now().Before(sent.Add(ttl-margin(ttl))) {
			// The answer came after the lease it grants had ended here:
			// the store may have granted the name to another since. That
			// is no grant; ask again (the store grants it anew if nobody
			// took it meanwhile).
			err = errLate
		}
		done(err)
		if err == nil && g.Session != nil && delay > 0 {
			if !g.Extended {
				c.abandon(ctx, req)
			}
			return nil, storeErr("lock", name, fmt.Errorf("lock-delay needs holds with a TTL, and this store's live in a session: %w", errors.ErrUnsupported))
		}
		if err == nil {
			l := c.newLease(req, g, sent, keepAlive, delay)
			if o != nil && o.MinHold > 0 {
				// From the answer, which came after the grant.
				l.holdAtLeast(c.clock.Now().Add(o.MinHold))
			}
			return l, nil
		}
		if retryable(ctx, err) && retry.n-3 < c.opts.Retries {
			if !c.sleep(ctx, retry.next()) {
				c.abandon(ctx, req)
				return nil, storeErr("lock", name, cmp.Or(context.Cause(ctx), ErrClosed))
			}
			continue
		}
		if !errors.Is(err, driver.ErrNotGranted) || !wait {
			if !errors.Is(err, driver.ErrNotGranted) && !chosenOwner {
				// The store may have granted or queued the request before
				// the error: the owner is ours alone, so undo either.
				c.abandon(ctx, req)
			}
			return nil, storeErr("lock", name, err)
		}
		if waitStart.IsZero() {
			waitStart = c.clock.Now()
			c.emit(Event{Kind: EventWaiting, Name: name, Owner: req.Owner})
		}
		if !watched && c.waiter != nil {
			// Refused once: start watching the store, then try again at once,
			// which covers any change made before the watch began (unless the
			// watch can replay those changes itself). An uncontended Lock
			// thus costs one call and no watch. Without a watch the wait
			// falls back to polling, which still works.
			watched = true
			done := c.call(ctx, "watch", name)
			w, err := c.waiter.Watch(ctx, req)
			done(err)
			if err == nil {
				watch = w
				if r, ok := w.(driver.Replayer); !ok || !r.Replay(storeSent) {
					continue
				}
			}
		}
		d := bo.next()
		if after := busyAfter(err); after > 0 && after < d {
			d = after // the blocking hold expires then
		}
		if watch != nil {
			// The store wakes us on changes; a hold that expires is no
			// change it reports, so wake then too.
			t := c.opts.MaxPoll
			if after := busyAfter(err); after > 0 && after < t {
				t = after
			}
			wctx, cancel := c.withTimeout(ctx, t)
			stop := context.AfterFunc(c.ctx, cancel) // Close ends the wait
			done := c.call(wctx, "wait", name)
			werr := watch.Wait(wctx)
			if ctx.Err() == nil && errors.Is(context.Cause(wctx), context.DeadlineExceeded) {
				werr = nil // woken by the timer, as asked
			}
			done(werr)
			stop()
			cancel()
		} else {
			c.sleep(ctx, d)
		}
		if ctx.Err() != nil || c.isClosed() {
			c.abandon(ctx, req) // leave the queue at once
			if ctx.Err() != nil {
				return nil, storeErr("lock", name, context.Cause(ctx))
			}
			return nil, storeErr("lock", name, ErrClosed)
		}
	}
}

// retryable reports whether a failed store call is worth trying again:
// not a refusal, not the caller's end, not a rule the store enforced.
func retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, driver.ErrNotGranted) && !errors.Is(err, driver.ErrClosed) &&
		!errors.Is(err, driver.ErrModeConflict) && !errors.Is(err, driver.ErrLimitConflict) && !errors.Is(err, ErrInvalid)
}

// busyAfter is the store's hint of when the blocking hold expires (0: none).
func busyAfter(err error) time.Duration {
	if busy := (*driver.Busy)(nil); errors.As(err, &busy) && busy.After > 0 {
		return busy.After
	}
	return 0
}

// abandon removes a request's queue entry, or a grant whose reply was lost.
func (c *Client) abandon(ctx context.Context, req *driver.Request) {
	rctx, cancel := c.withTimeout(context.WithoutCancel(ctx), c.opTimeout())
	defer cancel()
	_, _ = c.store.Release(rctx, []driver.Key{{Name: req.Name, Owner: req.Owner}})
}

// opTimeout bounds clean-up calls made after the caller's context ended.
func (c *Client) opTimeout() time.Duration { return min(c.opts.TTL, 5*time.Second) }

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Status lists holds (and, with f.Queued, waiting requests) matching f,
// sorted by name, then holders before waiters, then token (as Purge,
// RenewOwner and ReleaseOwner sort theirs).
func (c *Client) Status(ctx context.Context, f *Filter) ([]LockInfo, error) {
	if f == nil {
		f = &Filter{}
	}
	if f.Name != "" {
		if err := checkName(f.Name); err != nil {
			return nil, err
		}
	}
	return c.status(ctx, f)
}

// status is Status of a filter already checked. Asks (see askName) are
// listed only when f names one.
func (c *Client) status(ctx context.Context, f *Filter) ([]LockInfo, error) {
	hs, err := c.store.List(ctx, f.driver())
	if err != nil {
		return nil, storeErr("status", f.Prefix+f.Name, err)
	}
	out := make([]LockInfo, 0, len(hs))
	for _, h := range hs {
		if i := infoOf(h); match(f, &i) && (f.Name != "" || !isAskName(i.Name)) {
			out = append(out, i)
		}
	}
	sortInfos(out)
	return out, nil
}

// sortInfos sorts by name, then holders before waiters, then token.
func sortInfos(is []LockInfo) {
	slices.SortFunc(is, func(a, b LockInfo) int {
		if c := cmp.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if a.Queued != b.Queued {
			if a.Queued {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Token, b.Token), a.Created.Compare(b.Created))
	})
}

// expired reports whether a listed hold expired; holds that live as long as
// a store session (Expires zero) never do.
func expired(h *LockInfo) bool { return !h.Expires.IsZero() && h.Left <= 0 }

func match(f *Filter, h *LockInfo) bool {
	switch {
	case f.Name != "" && h.Name != f.Name,
		len(h.Name) < len(f.Prefix) || h.Name[:len(f.Prefix)] != f.Prefix,
		f.Owner != "" && h.Owner != f.Owner,
		h.Queued && !f.Queued,
		!f.Expired && expired(h),
		!f.CreatedBefore.IsZero() && !h.Created.Before(f.CreatedBefore),
		!f.CreatedAfter.IsZero() && !h.Created.After(f.CreatedAfter),
		f.LeftBelow > 0 && !(!h.Expires.IsZero() && h.Left < f.LeftBelow),
		f.LeftAtLeast > 0 && !h.Expires.IsZero() && h.Left < f.LeftAtLeast:
		return false
	}
	return true
}

// Purge deletes holds and queue entries that expired without being
// released (their holders died) and returns them. Expired holds never
// block anyone, so purging only saves space. Fencing counters are kept.
func (c *Client) Purge(ctx context.Context) ([]LockInfo, error) {
	hs, err := c.store.Purge(ctx)
	if err != nil {
		return nil, storeErr("purge", "", err)
	}
	out := slices.DeleteFunc(infosOf(hs), func(h LockInfo) bool { return isAskName(h.Name) })
	sortInfos(out)
	return out, nil
}

// RenewOwner renews every hold of owner for ttl (its lock-id group, in
// mongo-lock's terms) and returns them as renewed. Holds that could not be
// renewed are missing from the result: compare it with what you expect, and
// treat every hold of the group as lost if one is missing.
func (c *Client) RenewOwner(ctx context.Context, owner string, ttl time.Duration) ([]LockInfo, error) {
	if err := checkOwner(owner); err != nil {
		return nil, err
	}
	if err := checkTTL("TTL", ttl); err != nil {
		return nil, err
	}
	dhs, err := c.store.List(ctx, &driver.Filter{Owner: owner})
	if err != nil {
		return nil, storeErr("renew owner", owner, err)
	}
	hs := slices.DeleteFunc(infosOf(dhs), func(h LockInfo) bool { return h.Queued || expired(&h) || h.Owner != owner })
	sortInfos(hs)
	holds := make([]driver.Hold, len(hs))
	for i, h := range hs {
		holds[i] = driver.Hold{Name: h.Name, Owner: owner, TTL: ttl}
		if l := c.lease(driver.Key{Name: h.Name, Owner: owner}); l != nil {
			holds[i].TTL += l.delay // this client's lease keeps its lock-delay
		}
	}
	sent := c.clock.Now()
	gs, err := c.renewHolds(ctx, holds)
	out := hs[:0]
	for i, g := range gs { // those renewed before any error
		if g == nil {
			continue
		}
		h := hs[i]
		h.TTL, h.Renewed, h.Expires, h.Left = ttl, g.Renewed, g.Expires, ttl
		out = append(out, h)
		if l := c.lease(driver.Key{Name: h.Name, Owner: owner}); l != nil {
			l.renewed(g, sent, ttl)
			c.schedule(l)
		}
	}
	if err != nil {
		return nil, storeErr("renew owner", owner, err)
	}
	return out, nil
}

// renewHolds renews holds in calls of at most maxBatch holds. After an
// error, it returns the grants of the calls that succeeded before it.
func (c *Client) renewHolds(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	gs := make([]*driver.Grant, 0, len(holds))
	for part := range slices.Chunk(holds, maxBatch) {
		g, err := c.store.Renew(ctx, part)
		if err != nil {
			return gs, err
		}
		gs = append(gs, g...)
	}
	return gs, nil
}

// releaseKeys releases keys in calls of at most maxBatch keys. After an
// error, it returns the results of the calls that succeeded before it.
func (c *Client) releaseKeys(ctx context.Context, keys []driver.Key) ([]bool, error) {
	held := make([]bool, 0, len(keys))
	for part := range slices.Chunk(keys, maxBatch) {
		h, err := c.store.Release(ctx, part)
		if err != nil {
			return held, err
		}
		held = append(held, h...)
	}
	return held, nil
}

// closeCalls is how many release calls Close has in flight at once: a
// client holding many locks lets them go in calls of maxBatch, and the
// store serves several such calls in the time of one.
const closeCalls = 4

// releaseAll ends the leases ls and releases them in the store, in calls of
// maxBatch, closeCalls at a time. Each call goes out once its leases have
// ended here (a holder learns first), while the next ones end. Each call
// may take the client's opTimeout; once one fails, the store is in
// trouble, and the calls not yet sent are not sent: their holds expire.
func (c *Client) releaseAll(ls []*Lease) {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	call := func(f func(ctx context.Context) error) {
		cctx, cancel := c.withTimeout(ctx, c.opTimeout())
		defer cancel()
		if err := f(cctx); err != nil {
			stop()
		}
	}
	// Holds within their minimum hold stay in the store for the time left.
	now := c.clock.Now()
	var keep []driver.Hold
	rest := ls[:0:0]
	for _, l := range ls {
		if left := l.minLeft(now); left > 0 && l.session == nil {
			l.end(ErrReleased, false)
			keep = append(keep, driver.Hold{Name: l.info.Name, Owner: l.info.Owner, TTL: minHoldTTL(left)})
		} else {
			rest = append(rest, l)
		}
	}
	for part := range slices.Chunk(keep, maxBatch) {
		if ctx.Err() == nil {
			call(func(ctx context.Context) error { _, err := c.store.Renew(ctx, part); return err })
		}
	}
	// The leases in a session of a store that releases a session's holds
	// at once: one call per session.
	if sr, ok := c.store.(driver.SessionReleaser); ok {
		bySession := map[driver.Session][]*Lease{}
		others := rest[:0]
		for _, l := range rest {
			if l.session != nil {
				bySession[l.session] = append(bySession[l.session], l)
			} else {
				others = append(others, l)
			}
		}
		rest = others
		for x, sl := range bySession {
			for _, l := range sl {
				l.end(ErrReleased, false)
			}
			if ctx.Err() == nil {
				call(func(ctx context.Context) error { return sr.ReleaseSession(ctx, x) })
			}
		}
	}
	// In name order, so that each batch touches neighbouring records:
	// on SQLite a batch of scattered names rewrites a page per name.
	ls = rest
	slices.SortFunc(ls, func(a, b *Lease) int { return strings.Compare(a.info.Name, b.info.Name) })
	// Nothing here reads which keys were held: a store that releases for
	// less without saying so does.
	release := func(ctx context.Context, keys []driver.Key) error {
		_, err := c.store.Release(ctx, keys)
		return err
	}
	if q, ok := c.store.(driver.QuietReleaser); ok {
		release = q.ReleaseQuiet
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeCalls)
	for part := range slices.Chunk(ls, maxBatch) {
		keys := make([]driver.Key, len(part))
		for i, l := range part {
			keys[i] = l.dkey()
			l.end(ErrReleased, false)
		}
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			continue // the leases end here all the same
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(func(ctx context.Context) error { return release(ctx, keys) })
			<-sem
		}()
	}
	wg.Wait()
}

// ReleaseOwner releases every hold and queued request of owner and returns
// the holds it released.
func (c *Client) ReleaseOwner(ctx context.Context, owner string) ([]LockInfo, error) {
	if err := checkOwner(owner); err != nil {
		return nil, err
	}
	dhs, err := c.store.List(ctx, &driver.Filter{Owner: owner, Queued: true})
	if err != nil {
		return nil, storeErr("release owner", owner, err)
	}
	hs := slices.DeleteFunc(infosOf(dhs), func(h LockInfo) bool { return h.Owner != owner })
	sortInfos(hs)
	keys := make([]driver.Key, len(hs))
	for i, h := range hs {
		keys[i] = driver.Key{Name: h.Name, Owner: owner}
	}
	held, err := c.releaseKeys(ctx, keys)
	out := hs[:0]
	for i, ok := range held { // those released before any error
		if l := c.lease(keys[i]); l != nil {
			l.end(ErrReleased, false)
		}
		if ok {
			out = append(out, hs[i])
		}
	}
	if err != nil {
		return nil, storeErr("release owner", owner, err)
	}
	return out, nil
}

// ForceRelease releases owner's hold of name, whoever holds that owner: it
// is for administrators, as a way out for a lock whose holder is stuck (a
// holder releases its own lease with Lease.Release). The holder is not told
// until its next renewal fails. It returns ErrNotHeld if owner held nothing.
func (c *Client) ForceRelease(ctx context.Context, name, owner string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkOwner(owner); err != nil {
		return err
	}
	k := driver.Key{Name: name, Owner: owner}
	held, err := c.store.Release(ctx, []driver.Key{k})
	if err != nil {
		return storeErr("release", name, err)
	}
	if l := c.lease(k); l != nil {
		l.end(ErrReleased, false)
	}
	if !held[0] {
		return storeErr("release", name, ErrNotHeld)
	}
	return nil
}

func (c *Client) lease(k driver.Key) *Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leases[k]
}

// Close ends and releases every lease the client holds (in calls of at
// most a thousand, four at a time, each waiting at most a few seconds for
// the store; after a call that fails, the holds not yet released are left
// to expire), stops its goroutines and closes the store.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.stop()
	for _, s := range c.slots { // all at once, rather than one by one as each ends
		for _, l := range s.leases {
			l.slot = nil
		}
	}
	c.slots, c.slotAt = nil, nil
	c.disarm()
	ls := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	if len(ls) > 0 {
		c.releaseAll(ls)
	}
	c.wg.Wait()
	return c.store.Close()
}

// backoff is capped exponential backoff with full jitter, starting at 1ms.
type backoff struct {
	n   int
	max time.Duration
}

func (b *backoff) next() time.Duration {
	d := time.Millisecond << min(b.n, 20)
	b.n++
	d = min(d, b.max)
	return driver.Jitter(d)
}
