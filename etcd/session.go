package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/driver"
)

// session is one etcd lease that every hold of a Store lives in. It is the
// driver.Session of the grants.
type session struct {
	s    *Store
	id   clientv3.LeaseID
	ttl  time.Duration // as granted by the server
	done chan struct{}

	mu       sync.Mutex
	deadline time.Time   // local monotonic: lost from then on
	timer    *time.Timer // fires at deadline
	err      error       // set when done is closed
	gone     bool        // the server said the lease does not exist
}

// Done is closed when the session may be lost.
func (ss *session) Done() <-chan struct{} { return ss.done }

// Err says why the session ended (nil while it lives).
func (ss *session) Err() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.err
}

// Deadline is the time, on this machine's monotonic clock, until which the
// session is certainly alive: the send time of the last keepalive the
// server acknowledged, plus the lease's TTL, less a margin
// (driver.SessionDeadline). Once the session ended it is no later than
// when it ended.
func (ss *session) Deadline() time.Time {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.deadline
}

// alive reports whether the session is live now, by the clock as well.
func (ss *session) alive() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.err == nil && time.Now().Before(ss.deadline)
}

// margin is how much earlier than the server a session gives up: room for
// this machine's clock and the server's to run at rates up to 1% apart.
func margin(ttl time.Duration) time.Duration { return driver.Margin(ttl) }

// session returns the store's live session, granting a new lease if there
// is none (at first use, or after the last one was lost).
func (s *Store) session(ctx context.Context) (*session, error) {
	s.mu.Lock()
	ss, closed := s.sess, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if ss != nil && ss.alive() {
		return ss, nil
	}
	s.sessMu.Lock()
	defer s.sessMu.Unlock()
	s.mu.Lock()
	ss = s.sess
	s.mu.Unlock()
	if ss != nil && ss.alive() {
		return ss, nil // made while we waited for sessMu
	}
	if ss != nil {
		ss.end(fmt.Errorf("%w: keepalive deadline passed", ErrSessionLost))
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	sent := time.Now()
	resp, err := s.cli.Grant(gctx, s.ttl)
	if err != nil {
		if s.ctx.Err() != nil {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("etcd: granting the session lease: %w", err)
	}
	ttl := time.Duration(resp.TTL) * time.Second
	ss = &session{s: s, id: resp.ID, ttl: ttl, done: make(chan struct{})}
	ss.deadline = sent.Add(ttl - margin(ttl))
	ss.mu.Lock()
	ss.timer = time.AfterFunc(time.Until(ss.deadline), ss.expire)
	ss.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ss.end(ErrClosed)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), defaultDialTimeout)
		_, _ = s.cli.Revoke(rctx, resp.ID)
		rcancel()
		return nil, ErrClosed
	}
	s.sess = ss
	// Forget what lived in ended sessions: their keys are gone, or will
	// be, unless an acquisition moves them to this one.
	for k, h := range s.held {
		if h.sess.Err() != nil {
			delete(s.held, k)
		}
	}
	for k, p := range s.pending {
		if p.sess.Err() != nil {
			delete(s.pending, k)
		}
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go ss.keepalive()
	return ss, nil
}

// currentSession returns the store's session, live or not (nil if none).
func (s *Store) currentSession() *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sess
}

// expire ends the session when its deadline passed without a keepalive
// acknowledged in time.
func (ss *session) expire() {
	ss.mu.Lock()
	early := time.Now().Before(ss.deadline) // a renewal moved it meanwhile
	ss.mu.Unlock()
	if early {
		return
	}
	ss.end(fmt.Errorf("%w: lease %x: no keepalive acknowledged within its TTL of %v; the server may have expired it",
		ErrSessionLost, int64(ss.id), ss.ttl))
}

// end closes the session with err (first caller wins) and reports whether
// it was still live.
func (ss *session) end(err error) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.err != nil {
		return false
	}
	ss.err = err
	if now := time.Now(); now.Before(ss.deadline) {
		ss.deadline = now // ended early: the lease may be gone from now on
	}
	if ss.timer != nil {
		ss.timer.Stop()
	}
	close(ss.done)
	return true
}

// renewed records a keepalive sent at sent and acknowledged with ttl.
func (ss *session) renewed(sent time.Time, ttl time.Duration) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.err != nil {
		return // too late: the session was given up
	}
	if d := sent.Add(ttl - margin(ttl)); d.After(ss.deadline) {
		ss.deadline = d
		ss.timer.Reset(time.Until(d))
	}
}

// keepalive is the session's one goroutine: it renews the lease every
// third of its TTL, and more often while renewals fail, until the session
// ends or the store closes. A session that was lost, not closed, has its
// lease revoked if the server can still be reached.
func (ss *session) keepalive() {
	s := ss.s
	defer s.wg.Done()
	interval := ss.ttl / 3
	retry := min(interval/4, 250*time.Millisecond)
	next := time.Now().Add(interval)
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-ss.done:
			ss.revokeLost()
			return
		case <-t.C:
		}
		ss.mu.Lock()
		deadline := ss.deadline
		ss.mu.Unlock()
		ctx, cancel := context.WithDeadline(s.ctx, deadline)
		sent := time.Now()
		resp, err := s.cli.KeepAliveOnce(ctx, ss.id)
		cancel()
		switch {
		case err == nil:
			ss.renewed(sent, time.Duration(resp.TTL)*time.Second)
			next = sent.Add(interval)
			cctx, cancel := context.WithTimeout(s.ctx, interval)
			s.cleanOrphans(cctx)
			cancel()
		case isLeaseNotFound(err):
			ss.mu.Lock()
			ss.gone = true
			ss.mu.Unlock()
			ss.end(fmt.Errorf("%w: lease %x expired or was revoked on the server", ErrSessionLost, int64(ss.id)))
			return
		default:
			next = time.Now().Add(retry)
		}
		t.Reset(time.Until(next))
	}
}

// revokeLost revokes the lease of a session given up, so that its keys go
// at once if the lease still exists on the server.
func (ss *session) revokeLost() {
	ss.mu.Lock()
	gone := ss.gone
	ss.mu.Unlock()
	if gone {
		return
	}
	ctx, cancel := context.WithTimeout(ss.s.ctx, ss.ttl)
	defer cancel()
	_, _ = ss.s.cli.Revoke(ctx, ss.id)
}

// lost gives up the session because the server refused its lease.
func (ss *session) lost(err error) {
	ss.mu.Lock()
	ss.gone = true
	ss.mu.Unlock()
	ss.end(fmt.Errorf("%w: lease %x: %v", ErrSessionLost, int64(ss.id), err))
}

func isLeaseNotFound(err error) bool {
	return err != nil && (errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(err, rpctypes.ErrGRPCLeaseNotFound) ||
		strings.Contains(err.Error(), rpctypes.ErrLeaseNotFound.Error()))
}

var _ driver.SessionDeadline = (*session)(nil)
