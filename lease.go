package baton

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/baton-go/baton/driver"
)

// Lease is one granted hold. Its methods are safe for concurrent use.
type Lease struct {
	c         *Client
	mode      driver.Mode
	keepAlive bool
	ownTTL    bool // the hold has a TTL of its own in the store, session or not
	limit     int
	delay     time.Duration // lock-delay: the store keeps the hold this much longer than the lease
	token     uint64
	session   driver.Session // non-nil: lives in a store session
	done      chan struct{}
	granted   time.Time // local monotonic

	mu       sync.Mutex
	ttl      time.Duration
	info     LockInfo      // as last granted or renewed
	deadline time.Time     // local monotonic, by the hold's own TTL; zero: none (session-bound)
	renewAt  time.Time     // when keepalive renews next
	retrying bool          // the last renewal failed
	over     bool          // finish has ended the lease: a context made from now on starts cancelled
	lastLeft time.Duration // time left when the last successful renewal was sent (-1: none yet)
	minUntil time.Time     // local monotonic: a release before keeps the hold until then (LockOptions.MinHold)
	err      error
	ctx      context.Context // made by the first call of Context
	cancel   context.CancelCauseFunc
	asks     *asks // made by the first call of followAsks

	// keepalive's, guarded by c.mu
	slot    *slot // where the lease waits for its renewal; nil: not queued
	slotIdx int   // its index in slot.leases

	// the timer of its deadline, guarded by c.emu
	exp    *expiry // nil: no deadline armed
	expIdx int     // its index in exp.leases
}

// margin is how much earlier than the store a holder gives up: room for
// the holder's and the store's clocks to run at rates up to 1% apart.
func margin(ttl time.Duration) time.Duration { return driver.Margin(ttl) }

func (c *Client) newLease(req *driver.Request, g *driver.Grant, sent time.Time, keepAlive bool, delay time.Duration) *Lease {
	k := driver.Key{Name: req.Name, Owner: req.Owner}
	ttl := req.TTL - delay // the store's TTL has the delay on top
	c.mu.Lock()
	if l := c.leases[k]; l != nil && !g.Extended {
		// The store granted anew what this client thought it held: the old
		// lease ended in the store before its deadline here (an
		// administrator released it).
		c.mu.Unlock()
		l.end(ErrLeaseLost, false)
		c.mu.Lock()
	}
	if l := c.leases[k]; l != nil && g.Extended {
		c.mu.Unlock()
		l.mu.Lock()
		l.info.Host, l.info.Meta = req.Host, maps.Clone(req.Meta)
		l.mu.Unlock()
		l.renewed(g, sent, ttl)
		c.schedule(l)
		return l
	}
	l := &Lease{
		c: c, mode: req.Mode, limit: req.Limit, keepAlive: keepAlive, delay: delay,
		token: g.Token, session: g.Session, ownTTL: g.Session == nil || !g.Expires.IsZero(),
		done: make(chan struct{}), ttl: ttl, granted: sent, lastLeft: -1,
		info: LockInfo{
			Name: req.Name, Owner: req.Owner, Mode: Mode(req.Mode), Limit: req.Limit, Token: g.Token,
			Host: req.Host, Meta: maps.Clone(req.Meta), TTL: ttl,
			Created: g.Created, Renewed: g.Renewed, Expires: g.Expires,
		},
	}
	c.leases[k] = l
	c.mu.Unlock()

	l.mu.Lock()
	if l.ownTTL || !keepAlive {
		l.setDeadline(sent.Add(ttl - margin(ttl)))
	}
	l.mu.Unlock()
	if g.Session != nil {
		c.watchSession(g.Session)
	} else if keepAlive {
		l.mu.Lock()
		l.renewAt = c.renewTime(sent, ttl)
		l.mu.Unlock()
		c.schedule(l)
	}
	c.emit(Event{Kind: EventAcquired, Name: k.Name, Owner: k.Owner, Token: g.Token})
	return l
}

// setDeadline moves the lease's deadline to d, or up to a thousandth of
// its TTL earlier, and the lease to the timer of that time (see expiry).
// A lease kept alive in a session that knows its deadline needs no timer:
// it is not due before the session's deadline (deadlineLocked), and the
// session ends by then, ending the lease (watchSession). A timer per lease
// would wake a client holding many locks once per batch of grants, only
// to find each lease still held. l.mu is held.
func (l *Lease) setDeadline(d time.Time) {
	if _, ok := l.session.(driver.SessionDeadline); ok && l.keepAlive {
		l.deadline = d
		return
	}
	l.deadline = l.c.expireAt(l, d, l.ttl/1000)
}

// expire ends the lease if its deadline has come (a renewal, or its
// session's, may have moved it meanwhile), and reports whether the hold
// should then be released in the store, as it may still be there: unless
// the store must keep it for the lock-delay, for the loss was involuntary.
func (l *Lease) expire() (release bool) {
	l.mu.Lock()
	early := l.c.clock.Now().Before(l.deadlineLocked())
	l.mu.Unlock()
	if early {
		return false
	}
	err := ErrExpired
	if l.keepAlive {
		err = ErrLeaseLost
	}
	return l.finish(err) && l.delay == 0
}

// renewed records a successful renewal sent at sent. The caller then puts
// the lease into the keepalive queue at its new renew time (Client.schedule).
func (l *Lease) renewed(g *driver.Grant, sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	if !l.deadline.IsZero() {
		l.lastLeft = l.deadline.Sub(sent)
	}
	l.ttl = ttl
	l.info.TTL, l.info.Renewed, l.info.Expires = ttl, g.Renewed, g.Expires
	if l.ownTTL || !l.keepAlive {
		l.setDeadline(sent.Add(ttl - margin(ttl)))
	}
	l.renewAt, l.retrying = l.c.renewTime(sent, ttl), false
}

// end ends the lease with err (first caller wins). With release set, it
// also releases the hold in the store, in case the store still has it.
func (l *Lease) end(err error, release bool) {
	if l.finish(err) && release {
		c := l.c
		ctx, cancel := c.withTimeout(context.Background(), c.opTimeout())
		_, _ = c.store.Release(ctx, []driver.Key{l.dkey()})
		cancel()
	}
}

// finish ends the lease with err, unless it ended already, and reports
// whether it did.
func (l *Lease) finish(err error) bool {
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return false
	}
	l.err = err
	l.c.noExpiry(l)
	l.mu.Unlock()

	c := l.c
	kind := EventReleased
	switch {
	case errors.Is(err, ErrLeaseLost):
		kind = EventLost
	case errors.Is(err, ErrExpired):
		kind = EventExpired
	}
	// The event and the context's cause come first, so that whoever wakes
	// on Done finds them.
	c.emit(Event{Kind: kind, Name: l.info.Name, Owner: l.info.Owner, Token: l.token, Err: err, Held: c.clock.Now().Sub(l.granted)})
	l.mu.Lock()
	l.over = true
	cancel := l.cancel
	l.mu.Unlock()
	if cancel != nil {
		cancel(err)
	}
	close(l.done)

	c.mu.Lock()
	if c.leases[l.dkey()] == l {
		delete(c.leases, l.dkey())
	}
	c.unschedule(l)
	c.mu.Unlock()
	if l.session != nil {
		c.unwatchSession(l.session)
	}
	return true
}

// Name is the lock's name.
func (l *Lease) Name() string { return l.info.Name }

// Owner is the owner id the hold was granted to.
func (l *Lease) Owner() string { return l.info.Owner }

// Token is the fencing token: larger than the token of every earlier grant
// of this name, by any owner. Pass it to whatever the lock protects.
func (l *Lease) Token() uint64 { return l.token }

// Mode is Exclusive or Shared; Limit is the semaphore limit (0: none).
func (l *Lease) Mode() Mode { return Mode(l.mode) }

// Limit is the semaphore limit the lease was taken with (0: none).
func (l *Lease) Limit() int { return l.limit }

// TTL is the lease length.
func (l *Lease) TTL() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// Info describes the hold as last granted or renewed (store times).
func (l *Lease) Info() LockInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.info
	i.Meta = maps.Clone(i.Meta)
	if d := l.deadlineLocked(); !d.IsZero() {
		i.Left = d.Sub(l.c.clock.Now())
	}
	return i
}

// Deadline is the time, on this machine's clock, until which the lease is
// certainly held; it moves with every renewal. For a lease that lives in a
// store session it is the session's deadline, zero if the store cannot say.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadlineLocked()
}

// deadlineLocked is the later of the deadline by the hold's own TTL and
// its session's, for a keepalive lease in a session. l.mu is held.
func (l *Lease) deadlineLocked() time.Time {
	if l.session != nil && (l.deadline.IsZero() || l.ownTTL && l.keepAlive) {
		if d, ok := l.session.(driver.SessionDeadline); ok && d.Deadline().After(l.deadline) {
			return d.Deadline()
		}
	}
	return l.deadline
}

// Done is closed when the lease ends: released, lost, or expired.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Context returns a context that is cancelled when the lease ends; its
// cause is the lease's Err.
func (l *Lease) Context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil { // made on demand: most holders never ask for it
		l.ctx, l.cancel = context.WithCancelCause(context.Background())
		if l.over {
			l.cancel(l.err)
		}
	}
	return l.ctx
}

// dkey is the lease's key in the store.
func (l *Lease) dkey() driver.Key { return driver.Key{Name: l.info.Name, Owner: l.info.Owner} }

// Err is nil while the lease is held, and says why once it ended:
// ErrReleased, ErrLeaseLost or ErrExpired (or a store session's error).
// It reads the clock, so it is exact even if Done has not fired yet.
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	if d := l.deadlineLocked(); !d.IsZero() && !l.c.clock.Now().Before(d) {
		if l.keepAlive {
			return ErrLeaseLost
		}
		return ErrExpired
	}
	return nil
}

// Renew extends the lease by its TTL now. Keepalive does this on its own
// unless the lease was taken with NoKeepAlive. It returns ErrNotHeld if the
// store no longer has the hold (the lease then ends with ErrLeaseLost).
func (l *Lease) Renew(ctx context.Context) (err error) {
	if err := l.Err(); err != nil {
		return storeErr("renew", l.info.Name, ErrNotHeld)
	}
	c := l.c
	ctx, end := c.observe(ctx, Op{Kind: "renew", Name: l.info.Name, Mode: Mode(l.mode), Limit: l.limit})
	defer func() { end(OpResult{Err: err, Token: l.token}) }()
	l.mu.Lock()
	sent := c.clock.Now()
	ttl, left := l.ttl, l.deadlineLocked().Sub(sent)
	l.mu.Unlock()
	done := c.call(ctx, "renew", l.info.Name)
	gs, err := c.store.Renew(ctx, []driver.Hold{{Name: l.info.Name, Owner: l.info.Owner, TTL: ttl + l.delay}})
	done(err)
	if err != nil {
		return storeErr("renew", l.info.Name, err)
	}
	if gs[0] == nil {
		l.end(ErrLeaseLost, false)
		return storeErr("renew", l.info.Name, ErrNotHeld)
	}
	l.renewed(gs[0], sent, ttl)
	c.schedule(l) // a shorter TTL moves the next renewal earlier
	c.emit(Event{Kind: EventRenewed, Name: l.info.Name, Owner: l.info.Owner, Token: l.token, Left: left})
	return nil
}

// Release releases the hold if it is still held, and does nothing
// otherwise. It fails only if the store could not be reached, and even then
// the lease ends here and the store lets the hold expire.
func (l *Lease) Release(ctx context.Context) error {
	err := l.ReleaseStrict(ctx)
	if errors.Is(err, ErrNotHeld) {
		return nil
	}
	return err
}

// ReleaseStrict is Release that returns ErrNotHeld when nothing was held:
// the lease had already ended, or the store no longer had the hold
// (es-distributed-lock's MustRelease).
func (l *Lease) ReleaseStrict(ctx context.Context) (err error) {
	if err := l.Err(); err != nil {
		l.end(err, false) // the deadline may have passed before the timer fired
		return storeErr("release", l.info.Name, ErrNotHeld)
	}
	ctx, end := l.c.observe(ctx, Op{Kind: "release", Name: l.info.Name, Mode: Mode(l.mode), Limit: l.limit})
	defer func() { end(OpResult{Err: err, Token: l.token}) }()
	var early error // the minimum hold was cut short
	if left := l.minLeft(l.c.clock.Now()); left > 0 {
		if l.session == nil {
			return l.keepFor(ctx, left)
		}
		if early = l.waitFor(ctx, left); early != nil {
			var cancel context.CancelFunc
			ctx, cancel = l.c.withTimeout(context.WithoutCancel(ctx), l.c.opTimeout())
			defer cancel()
		}
	}
	done := l.c.call(ctx, "release", l.info.Name)
	held, err := l.c.store.Release(ctx, []driver.Key{l.dkey()})
	done(err)
	l.end(ErrReleased, false)
	switch {
	case err != nil:
		return storeErr("release", l.info.Name, err)
	case !held[0]:
		return storeErr("release", l.info.Name, ErrNotHeld)
	case early != nil:
		return storeErr("release", l.info.Name, fmt.Errorf("released before its minimum hold had passed: %w", early))
	}
	return nil
}

// holdAtLeast makes a release before until keep the hold until then.
func (l *Lease) holdAtLeast(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until.After(l.minUntil) {
		l.minUntil = until
	}
}

// minLeft is how long the minimum hold lasts after now (0: over).
func (l *Lease) minLeft(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.minUntil.IsZero() {
		return 0
	}
	return max(l.minUntil.Sub(now), 0)
}

// minHoldTTL is the TTL that keeps a hold in the store for at least left
// by this machine's clock: the store's clock may run up to 1% slower.
func minHoldTTL(left time.Duration) time.Duration {
	return max(left+left/50+time.Millisecond, MinTTL)
}

// keepFor ends the lease here and leaves its hold in the store for left
// more, renewing it for that long instead of releasing it.
func (l *Lease) keepFor(ctx context.Context, left time.Duration) error {
	c := l.c
	l.end(ErrReleased, false)
	done := c.call(ctx, "release", l.info.Name)
	gs, err := c.store.Renew(ctx, []driver.Hold{{Name: l.info.Name, Owner: l.info.Owner, TTL: minHoldTTL(left)}})
	done(err)
	switch {
	case err != nil:
		return storeErr("release", l.info.Name, err)
	case gs[0] == nil:
		return storeErr("release", l.info.Name, ErrNotHeld)
	}
	return nil
}

// waitFor waits until left has passed, the lease ended, or ctx ended (its
// cause is returned).
func (l *Lease) waitFor(ctx context.Context, left time.Duration) error {
	ch := make(chan struct{})
	t := l.c.clock.AfterFunc(left, func() { close(ch) })
	defer t.Stop()
	select {
	case <-ch:
	case <-l.done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	return nil
}
