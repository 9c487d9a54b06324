package records

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/driver"
)

// Sessions is implemented by Records that keep sessions: a record per
// session with an expiry by the store's clock. A hold granted with
// Request.KeepAlive is bound to the Store's session of its TTL
// (lockstate.Entry.Session) and lives as long as that session does,
// besides its own expiry. The Store renews the session, one call every
// third of its TTL, in place of a renewal per hold: keeping many locks
// alive then costs what keeping one does.
//
// A store that implements Sessions applies, in Update and Scan, the
// expiries of the live sessions that holders past their own expiry are
// bound to (lockstate.State.Sessions, ApplySessions). In Update it reads
// them in the same atomic step as the states: a session renewed after a
// state was read could otherwise keep alive a hold the rules dropped.
type Sessions interface {
	// KeepSession sets the expiry of session id to the store's time plus
	// ttl, and reports whether it did. With create set, id is new and its
	// record is created. Without, the session must be live: false means
	// it is not (it expired, or its record is gone), and a session that
	// is not live is never made live again: the holds bound to it may have
	// gone to others.
	KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error)
	// EndSession deletes the record of session id: its holds live on
	// until their own expiry.
	EndSession(ctx context.Context, id string) error
}

// ErrSessionEnded is the error of a session that the store found expired
// or gone when renewing it, or that was not renewed before its deadline.
var ErrSessionEnded = errors.New("records: store session ended")

// session is one of a Store's sessions. It implements driver.Session and
// driver.SessionDeadline.
type session struct {
	id   string
	ttl  time.Duration
	done chan struct{}

	mu       sync.Mutex
	deadline time.Time // local monotonic: the last confirmed renewal's send time + ttl, less a margin
	err      error
}

func (x *session) Done() <-chan struct{} { return x.done }

func (x *session) Err() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err
}

func (x *session) Deadline() time.Time {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.deadline
}

// live reports whether the session may still take holds: it has not
// ended, and has at least half its TTL left.
func (x *session) live(now time.Time) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.err == nil && x.deadline.Sub(now) > x.ttl/2
}

// renewed records a renewal sent at sent.
func (x *session) renewed(sent time.Time) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deadline = sent.Add(x.ttl - driver.Margin(x.ttl))
}

// end ends the session with err (first caller wins). Its deadline is now
// at the latest: a session ended by Close is deleted from the store next,
// and keeps its holds no longer.
func (x *session) end(err error) bool {
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

// sessions are a Store's sessions, one per TTL in use.
type sessions struct {
	mu     sync.Mutex
	byTTL  map[time.Duration]*session // the session each TTL's new holds are bound to
	all    map[*session]bool          // every session not ended, renewed until it ends
	making map[time.Duration]bool     // a session of that TTL is being made
	closed bool
	ctx    context.Context // ends on Close
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// session returns the live session of ttl; nil if there is none yet, or
// the store keeps no sessions: the hold is then renewed on its own. Once a
// hold of ttl was granted without one (granted set), it starts one in the
// background for the holds after it: a client that is only refused
// starts none, and no acquire waits for one.
func (s *Store) session(ttl time.Duration, granted bool) *session {
	ks, ok := s.r.(Sessions)
	if !ok {
		return nil
	}
	ss := &s.ss
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.closed {
		return nil
	}
	if x := ss.byTTL[ttl]; x != nil && x.live(time.Now()) {
		return x
	}
	if !granted || ss.making[ttl] {
		return nil
	}
	if ss.making == nil {
		ss.making, ss.byTTL, ss.all = map[time.Duration]bool{}, map[time.Duration]*session{}, map[*session]bool{}
		ss.ctx, ss.stop = context.WithCancel(context.Background())
	}
	ss.making[ttl] = true
	ss.wg.Add(1)
	go s.startSession(ks, ttl)
	return nil
}

// startSession makes a session of ttl, waiting for the store a third of
// ttl (at least a second), and renews it until it ends.
func (s *Store) startSession(ks Sessions, ttl time.Duration) {
	ss := &s.ss
	defer ss.wg.Done()
	x := &session{id: rand.Text(), ttl: ttl, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(ss.ctx, max(ttl/3, time.Second))
	sent := time.Now()
	made, err := ks.KeepSession(ctx, x.id, ttl, true)
	cancel()
	ss.mu.Lock()
	delete(ss.making, ttl)
	if err != nil || !made || ss.closed {
		ss.mu.Unlock()
		if err == nil && made {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = ks.EndSession(ctx, x.id)
			cancel()
		}
		return
	}
	x.renewed(sent)
	ss.byTTL[ttl], ss.all[x] = x, true
	ss.mu.Unlock()
	s.keepSession(ks, x, sent)
}

// keepSession renews x every third of its TTL until the Store closes or x
// ends: when the store finds it expired, or when no renewal succeeds
// before its deadline. A failed renewal is retried every tenth of the
// TTL, at most every second.
func (s *Store) keepSession(ks Sessions, x *session, sent time.Time) {
	ss := &s.ss
	next := sent.Add(x.ttl / 3)
	for {
		if driver.Sleep(ss.ctx, time.Until(next)) != nil {
			return
		}
		deadline := x.Deadline()
		ctx, cancel := context.WithDeadline(ss.ctx, deadline)
		sent := time.Now()
		ok, err := ks.KeepSession(ctx, x.id, x.ttl, false)
		cancel()
		switch {
		case ss.ctx.Err() != nil:
			return
		case err == nil && ok:
			x.renewed(sent)
			next = sent.Add(x.ttl / 3)
			continue
		case err == nil:
			err = fmt.Errorf("%w: the store no longer has it", ErrSessionEnded)
		case !time.Now().Before(deadline):
			err = fmt.Errorf("%w: not renewed before its deadline: %w", ErrSessionEnded, err)
		default:
			next = time.Now().Add(min(x.ttl/10, time.Second))
			continue
		}
		s.dropSession(x, err)
		return
	}
}

// dropSession ends x with err and lets the next hold of its TTL start a
// new session.
func (s *Store) dropSession(x *session, err error) {
	ss := &s.ss
	ss.mu.Lock()
	if ss.byTTL[x.ttl] == x {
		delete(ss.byTTL, x.ttl)
	}
	delete(ss.all, x)
	ss.mu.Unlock()
	x.end(err)
}

// closeSessions stops renewing the sessions, ends them, and deletes their
// records (waiting at most a second for the store): their holds, which
// Client.Close released first, live on until their own expiry otherwise.
func (s *Store) closeSessions() {
	ss := &s.ss
	ss.mu.Lock()
	ss.closed = true
	xs := ss.all
	ss.byTTL, ss.all = nil, nil
	if ss.stop != nil {
		ss.stop()
	}
	ss.mu.Unlock()
	ss.wg.Wait()
	if len(xs) == 0 {
		return
	}
	ks := s.r.(Sessions)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for x := range xs {
		x.end(fmt.Errorf("%w: %w", ErrSessionEnded, driver.ErrClosed))
		_ = ks.EndSession(ctx, x.id)
	}
}
