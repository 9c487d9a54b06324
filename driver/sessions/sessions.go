// Package sessions keeps the store sessions of a store that binds holds
// to sessions of its own (driver.Request.KeepAlive, driver.Grant.Session):
// one session per TTL in use, made in the background after the first
// grant that could have used it, renewed every third of its TTL in place
// of a renewal per hold, and ended on Close. Keeping many locks alive
// then costs what keeping one does.
//
// The store does the rest: it records the binding with the hold, judges a
// hold past its own expiry by its session's, and never makes a session
// live again once it expired, for its holds may have gone to others.
package sessions

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/driver"
)

// Store is what a Keeper needs of the store.
type Store interface {
	// KeepSession sets the expiry of session id to the store's time plus
	// ttl, and reports whether it did. With create set, id is new and its
	// record is created. Without, the session must be live: false means
	// it is not (it expired, or its record is gone), and a session that
	// is not live is never made live again.
	KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error)
	// EndSession deletes the record of session id: its holds live on
	// until their own expiry.
	EndSession(ctx context.Context, id string) error
}

// ErrEnded is the error of a session that the store found expired or
// gone when renewing it, or that was not renewed before its deadline.
var ErrEnded = errors.New("store session ended")

// Session is one of a Keeper's sessions. It implements driver.Session and
// driver.SessionDeadline.
type Session struct {
	id   string
	ttl  time.Duration
	done chan struct{}

	// stop ends the renewals of this session alone (see Keeper.Stop), and
	// kept is closed once they have.
	stop context.CancelFunc
	kept chan struct{}

	mu       sync.Mutex
	deadline time.Time // local monotonic: the last confirmed renewal's send time + ttl, less a margin
	err      error
}

// ID is the session's id in the store: random, unguessable.
func (x *Session) ID() string { return x.id }

// Done implements driver.Session.
func (x *Session) Done() <-chan struct{} { return x.done }

// Err implements driver.Session.
func (x *Session) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

// Deadline implements driver.SessionDeadline.
func (x *Session) Deadline() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.deadline
}

// live reports whether the session may still take holds: it has not
// ended, and has at least half its TTL left.
func (x *Session) live(now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err == nil && x.deadline.Sub(now) > x.ttl/2
}

// renewed records a renewal sent at sent.
func (x *Session) renewed(sent time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deadline = sent.Add(x.ttl - driver.Margin(x.ttl))
}

// end ends the session with err (first caller wins). Its deadline is now
// at the latest: a session ended by Close is deleted from the store next,
// and keeps its holds no longer.
func (x *Session) end(err error) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return false
	}
	x.err = err
	if now := time.Now(); x.deadline.After(now) {
		x.deadline = now
	}
	close(x.done)
	return true
}

// Keeper keeps a store's sessions, one per TTL. The zero value is not
// usable; make one with New.
type Keeper struct {
	st Store

	mu     sync.Mutex
	byTTL  map[time.Duration]*Session // the session each TTL's new holds are bound to
	all    map[*Session]bool          // every session not ended, renewed until it ends
	making map[time.Duration]bool     // a session of that TTL is being made
	closed bool
	ctx    context.Context // ends on Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Keeper of st's sessions.
func New(st Store) *Keeper { return &Keeper{st: st} }

// Session returns the live session of ttl, one with at least half its TTL
// left, to bind a hold of ttl to; nil if there is none yet. Once a hold
// of ttl was granted without one (granted set), it starts one in the
// background for the holds after it: a client that is only refused starts
// none, and no acquire waits for one.
func (k *Keeper) Session(ttl time.Duration, granted bool) *Session {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil
	}
	if x := k.byTTL[ttl]; x != nil && x.live(time.Now()) {
		return x
	}
	if !granted || k.making[ttl] {
		return nil
	}
	if k.making == nil {
		k.making, k.byTTL, k.all = map[time.Duration]bool{}, map[time.Duration]*Session{}, map[*Session]bool{}
		k.ctx, k.stop = context.WithCancel(context.Background())
	}
	k.making[ttl] = true
	k.wg.Add(1)
	go k.start(ttl)
	return nil
}

// start makes a session of ttl, waiting for the store a third of ttl (at
// least a second), and renews it until it ends.
func (k *Keeper) start(ttl time.Duration) {
	defer k.wg.Done()
	x := &Session{id: rand.Text(), ttl: ttl, done: make(chan struct{}), kept: make(chan struct{})}
	defer close(x.kept)
	xctx, stop := context.WithCancel(k.ctx)
	defer stop()
	x.stop = stop
	ctx, cancel := context.WithTimeout(xctx, max(ttl/3, time.Second))
	sent := time.Now()
	made, err := k.st.KeepSession(ctx, x.id, ttl, true)
	cancel()
	k.mu.Lock()
	delete(k.making, ttl)
	if err != nil || !made || k.closed {
		k.mu.Unlock()
		if err == nil && made {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = k.st.EndSession(ctx, x.id)
			cancel()
		}
		return
	}
	x.renewed(sent)
	k.byTTL[ttl], k.all[x] = x, true
	k.mu.Unlock()
	k.keep(xctx, x, sent)
}

// keep renews x every third of its TTL until xctx ends (the Keeper
// closes, or Stop) or x ends: when the store finds it expired, or when no
// renewal succeeds before its deadline. A failed renewal is retried every
// tenth of the TTL, at most every second, and at the deadline.
func (k *Keeper) keep(xctx context.Context, x *Session, sent time.Time) {
	next := sent.Add(x.ttl / 3)
	for {
		if driver.Sleep(xctx, time.Until(next)) != nil {
			return
		}
		deadline := x.Deadline()
		ctx, cancel := context.WithDeadline(xctx, deadline)
		sent := time.Now()
		ok, err := k.st.KeepSession(ctx, x.id, x.ttl, false)
		cancel()
		switch {
		case xctx.Err() != nil:
			return
		case err == nil && ok:
			x.renewed(sent)
			next = sent.Add(x.ttl / 3)
			continue
		case err == nil:
			err = fmt.Errorf("%w: the store no longer has it", ErrEnded)
		case !time.Now().Before(deadline):
			err = fmt.Errorf("%w: not renewed before its deadline: %w", ErrEnded, err)
		default:
			// A store that fails fast ends the session at its deadline,
			// not up to a retry later.
			next = time.Now().Add(min(x.ttl/10, time.Second))
			if next.After(deadline) {
				next = deadline
			}
			continue
		}
		k.drop(x, err)
		return
	}
}

// drop ends x with err, lets the next hold of its TTL start a new
// session, and deletes x's record, which is never renewed again (waiting
// at most a second for the store, and not past Close), so that the store
// forgets it now rather than when it expires.
func (k *Keeper) drop(x *Session, err error) {
	k.mu.Lock()
	if k.byTTL[x.ttl] == x {
		delete(k.byTTL, x.ttl)
	}
	delete(k.all, x)
	k.mu.Unlock()
	x.end(err)
	ctx, cancel := context.WithTimeout(k.ctx, time.Second)
	_ = k.st.EndSession(ctx, x.id)
	cancel()
}

// Stop stops renewing x, whose holds its client is about to release on
// the store (driver.SessionReleaser), and ends it: no hold is bound to it
// any more, and no renewal of it runs after Stop returns, nor the deletion
// of its record that follows a failed one, either of which would race
// with the release. It waits for a renewal in flight to end, up to ctx.
// The caller deletes the record once the holds are released.
func (k *Keeper) Stop(ctx context.Context, x *Session) error {
	k.mu.Lock()
	if k.byTTL[x.ttl] == x {
		delete(k.byTTL, x.ttl)
	}
	delete(k.all, x)
	k.mu.Unlock()
	x.end(fmt.Errorf("%w: its holds are being released", ErrEnded))
	x.stop()
	select {
	case <-x.kept:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("session: stopping its renewal: %w", context.Cause(ctx))
	}
}

// Close stops renewing the sessions, ends them, and deletes their records
// (waiting at most a second for the store): their holds, which the client
// released first, live on until their own expiry otherwise.
func (k *Keeper) Close() {
	k.mu.Lock()
	k.closed = true
	xs := k.all
	k.byTTL, k.all = nil, nil
	if k.stop != nil {
		k.stop()
	}
	k.mu.Unlock()
	k.wg.Wait()
	if len(xs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for x := range xs {
		x.end(fmt.Errorf("%w: %w", ErrEnded, driver.ErrClosed))
		_ = k.st.EndSession(ctx, x.id)
	}
}
