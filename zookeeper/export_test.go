package zookeeper

import (
	"context"
	"net/url"
	"time"
)

// Escape, Unescape and ParseURL expose internals to the tests.
func Escape(s string) string           { return escape(s) }
func Unescape(s string) (string, bool) { return unescape(s) }
func ChildPrefix(owner string, shared bool, limit int) string {
	if shared {
		return childPrefix(owner, 2, limit)
	}
	return childPrefix(owner, 1, limit)
}

func ParseChild(name string) (owner string, shared bool, limit int, seq int64, ok bool) {
	c, ok := parseChild(name)
	return c.owner, c.mode == 2, c.limit, c.seq, ok
}

func ParseURL(raw string) ([]string, *Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	return parseURL(u)
}

// Backoff is the wait before retry n+1.
func (s *Store) Backoff(n int) time.Duration { return s.backoff(n) }

// Retry runs attempt with the store's retry policy, outside any session.
func (s *Store) Retry(ctx context.Context, attempt func() error) error {
	sess := s.newSession(nil, false, 0)
	return s.retry(ctx, sess, attempt)
}

// Root is the store's root node.
func (s *Store) Root() string { return s.root }

// SessionID is the current session's id (0 if none).
func (s *Store) SessionID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.sessionID()
}

// Timeout is the current session's negotiated timeout.
func (s *Store) Timeout() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return 0
	}
	return s.cur.timeout()
}

// DropConnection closes the TCP connection(s) of the current session;
// go-zookeeper reconnects to the same session.
func (s *Store) DropConnection() {
	s.mu.Lock()
	sess := s.cur
	s.mu.Unlock()
	if sess != nil && sess.tracker != nil {
		sess.tracker.closeAll()
	}
}

// DropAfterNextMulti makes the next multi request (a lock request's
// create) break the connection once written, so that its reply is lost.
func (s *Store) DropAfterNextMulti() { s.dropAfterMulti.Store(true) }

// Waiting returns the node the request (name, owner) waits for ("" for
// the parent's children), and whether it waits.
func (s *Store) Waiting(name, owner string) (string, bool) {
	s.mu.Lock()
	sess := s.cur
	s.mu.Unlock()
	if sess == nil {
		return "", false
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	w := sess.waits[nodeKey{name, owner}]
	if w == nil {
		return "", false
	}
	return w.path, true
}

// Faulty is a store with the test hooks drivertest looks for
// (drivertest.Crasher, drivertest.Partitioner).
type Faulty struct{ *Store }

func (f Faulty) Crash()                   { f.Store.crash() }
func (f Faulty) SetPartitioned(down bool) { f.Store.setPartitioned(down) }
