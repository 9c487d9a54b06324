package zookeeper

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// session is one ZooKeeper session: for a store that dials its own
// connections, one zk.Conn, closed when the session is lost. It is the
// driver.Session of the holds taken in it.
type session struct {
	s       *Store
	conn    *zk.Conn
	owned   bool
	tracker *tracker // nil for a caller-owned connection

	ready chan struct{} // closed once the session is established (and authenticated)
	done  chan struct{} // closed when the session is lost
	// lastHeard: nanoseconds after s.epoch at which the server last
	// certainly heard from the client.
	lastHeard atomic.Int64
	timeoutNs atomic.Int64 // negotiated session timeout
	wake      chan struct{}
	readyOnce sync.Once
	connSet   chan struct{} // closed once conn is set
	drained   chan struct{} // closed when go-zookeeper's event channel closes (owned)

	mu           sync.Mutex
	id           int64
	err          error
	established  bool
	connected    bool
	disconnected time.Time // when the connection last broke (caller-owned judging)
	epoch        uint64    // connections broken so far
	server       string
	nodes        map[nodeKey]*node   // nodes this session created, by name and owner
	waits        map[nodeKey]*waitOn // what a queued node waits for
	fresh        map[nodeKey]bool    // refused just now; the next attempt may reuse the verdict
}

type nodeKey struct{ name, owner string }

func (s *Store) newSession(conn *zk.Conn, owned bool, id int64) *session {
	sess := &session{
		s: s, conn: conn, owned: owned,
		ready: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1),
		drained: make(chan struct{}), connSet: make(chan struct{}),
		nodes: map[nodeKey]*node{}, waits: map[nodeKey]*waitOn{}, fresh: map[nodeKey]bool{},
	}
	sess.timeoutNs.Store(int64(s.opts.SessionTimeout))
	sess.id = id
	if conn != nil {
		close(sess.connSet)
	}
	return sess
}

// Done is closed when the session may be lost (driver.Session).
func (sess *session) Done() <-chan struct{} { return sess.done }

// Err says why the session ended: ErrSessionExpired, ErrSessionTimeout,
// ErrClosed; nil while it lives.
func (sess *session) Err() error {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.err
}

func (sess *session) isReady() bool {
	select {
	case <-sess.ready:
		return true
	default:
		return false
	}
}

func (sess *session) lost() bool {
	select {
	case <-sess.done:
		return true
	default:
		return false
	}
}

func (sess *session) timeout() time.Duration { return time.Duration(sess.timeoutNs.Load()) }

// margin is how much sooner than the server the store gives up a session.
func margin(timeout time.Duration) time.Duration { return max(timeout/10, 10*time.Millisecond) }

func (sess *session) heard(t time.Time) {
	ns := int64(t.Sub(sess.s.epoch))
	for {
		old := sess.lastHeard.Load()
		if ns <= old || sess.lastHeard.CompareAndSwap(old, ns) {
			return
		}
	}
}

func (sess *session) sessionID() int64 {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.id
}

// lose ends the session with err (first caller wins): Done closes, and a
// connection the store owns is closed, which deletes the session's nodes
// if the server can still be reached, and never reconnects.
func (sess *session) lose(err error) {
	sess.mu.Lock()
	if sess.err != nil {
		sess.mu.Unlock()
		return
	}
	sess.err = err
	id, server, established := sess.id, sess.server, sess.established
	sess.mu.Unlock()
	close(sess.done)
	s := sess.s
	if id != 0 {
		s.mu.Lock()
		if s.givenUp == nil {
			s.givenUp = map[int64]bool{}
		}
		s.givenUp[id] = true
		s.mu.Unlock()
	}
	if established && !errors.Is(err, ErrClosed) {
		s.emit(Event{Kind: EventSessionExpired, SessionID: id, Server: server, Err: err})
	}
	if sess.owned {
		sess.tracker.stop()
		// Close waits up to a second for the server's reply; the store
		// waits for it in Close.
		s.mu.Lock()
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			<-sess.connSet
			sess.conn.Close()
			sess.tracker.closeAll()
			<-sess.drained
		}()
	} else if !errors.Is(err, ErrClosed) {
		sess.s.orphan(sess)
	}
}

// dial opens a new connection and session; s.mu is held.
func (s *Store) dial() *session {
	sess := s.newSession(nil, true, 0)
	sess.tracker = &tracker{s: s, sess: sess, conns: map[*tconn]struct{}{}}
	conn, events, err := zk.Connect(s.servers, s.opts.SessionTimeout,
		zk.WithDialer(sess.tracker.dial), zk.WithLogger(s.opts.Logger), zk.WithLogInfo(false),
		zk.WithEventCallback(sess.onEvent))
	if err != nil {
		sess.err = err
		close(sess.done)
		return sess
	}
	sess.conn = conn
	close(sess.connSet)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		for range events {
		}
		close(sess.drained)
	}()
	go sess.watchdog()
	return sess
}

// onEvent follows go-zookeeper's state changes (from its goroutines: it
// must not block).
func (sess *session) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	sess.state(ev.State, ev.Server)
}

// state applies a state of the connection. The session id is known by
// then: from the wire (owned connections) or from the connection.
func (sess *session) state(st zk.State, server string) {
	s := sess.s
	sess.mu.Lock()
	if sess.err != nil {
		sess.mu.Unlock()
		return
	}
	var ev *Event
	switch st {
	case zk.StateHasSession:
		sess.server = server
		if !sess.established {
			sess.established = true
			ev = &Event{Kind: EventConnected, SessionID: sess.id, Server: server}
			if sess.tracker == nil {
				sess.heard(time.Now())
			}
		} else if !sess.connected {
			ev = &Event{Kind: EventReconnected, SessionID: sess.id, Server: server}
		}
		sess.connected = true
	case zk.StateExpired:
		sess.mu.Unlock()
		sess.lose(ErrSessionExpired)
		return
	case zk.StateDisconnected, zk.StateConnecting, zk.StateConnected:
		// StateConnected is TCP only, before the session handshake.
		if sess.connected {
			sess.connected = false
			sess.disconnected = time.Now()
			sess.epoch++
			ev = &Event{Kind: EventDisconnected, SessionID: sess.id, Server: sess.server}
		}
	}
	established := sess.established
	sess.mu.Unlock()
	if ev != nil {
		s.emit(*ev)
		select {
		case sess.wake <- struct{}{}:
		default:
		}
	}
	if established {
		sess.readyOnce.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.closed {
				s.wg.Add(1)
				go sess.authenticate()
			}
		})
	}
}

// authenticate adds the credentials, then marks the session ready.
func (sess *session) authenticate() {
	s := sess.s
	defer s.wg.Done()
	<-sess.connSet
	if sess.owned && len(s.opts.Auth) > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctxOf(sess.done), cancel)
		for _, c := range s.opts.Auth {
			if err := s.do(ctx, sess, func(conn *zk.Conn) error { return conn.AddAuth(c.Scheme, c.Data) }); err != nil {
				stop()
				cancel()
				s.opts.Logger.Printf("zookeeper: AddAuth %s: %v", c.Scheme, err)
				sess.lose(err)
				return
			}
		}
		stop()
		cancel()
	}
	close(sess.ready)
}

// Deadline implements driver.SessionDeadline: zero while it is unknown
// (a caller-owned connection that is connected).
func (sess *session) Deadline() time.Time {
	d, _ := sess.deadline()
	return d
}

// deadline is when the session must be judged lost, on the local
// monotonic clock, and whether there is one now.
func (sess *session) deadline() (time.Time, bool) {
	t := sess.timeout()
	m := margin(t)
	last := sess.s.epoch.Add(time.Duration(sess.lastHeard.Load()))
	if sess.tracker != nil {
		return last.Add(t - m), true
	}
	// A caller-owned connection: only the moments of the state changes are
	// known. go-zookeeper notices a silent connection 2/3 of the timeout
	// after its last reply, and pings every third of it.
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.connected || !sess.established {
		return time.Time{}, false
	}
	from := sess.disconnected.Add(-t * 2 / 3)
	if last.After(from) {
		from = last
	}
	return from.Add(t - m), true
}

// watchdog loses the session when its deadline passes.
func (sess *session) watchdog() {
	s := sess.s
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		sess.mu.Lock()
		established := sess.established
		sess.mu.Unlock()
		wait := time.Hour
		if established {
			if d, ok := sess.deadline(); ok {
				wait = time.Until(d)
				if wait <= 0 {
					sess.lose(ErrSessionTimeout)
					return
				}
			}
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-sess.wake:
		case <-sess.done:
			return
		case <-s.quit:
			return
		}
	}
}

// monitor follows a caller-owned connection: its events, and its state
// every 100 ms in case go-zookeeper dropped an event (its channel is small
// and it drops what does not fit).
func (s *Store) monitor(conn *zk.Conn, events <-chan zk.Event) {
	defer s.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		s.observe(conn)
		select {
		case _, ok := <-events:
			if !ok {
				events = nil
			}
		case <-tick.C:
		case <-s.quit:
			return
		}
	}
}

// observe applies a caller-owned connection's state: a new session gets a
// new session object, and so does the same session once the nodes of an
// earlier object judged lost in it are deleted.
func (s *Store) observe(conn *zk.Conn) {
	st, id, server := conn.State(), conn.SessionID(), conn.Server()
	var old *session
	s.mu.Lock()
	cur := s.cur
	if st == zk.StateHasSession && id != 0 && !s.closed {
		fresh := false
		switch {
		case cur == nil:
			fresh = true
		case cur.sessionID() != id:
			old, fresh = cur, true
		case cur.lost() && cur.orphaned():
			fresh = true
		}
		if fresh {
			cur = s.newSession(conn, false, id)
			s.cur = cur
			close(s.changed)
			s.changed = make(chan struct{})
			s.wg.Add(1)
			go cur.watchdog()
		}
	}
	s.mu.Unlock()
	if old != nil {
		old.lose(ErrSessionExpired)
	}
	if cur != nil {
		cur.state(st, server)
	}
}

// orphan deletes, once its connection is back in the same session, the
// nodes of a session judged lost on a caller-owned connection: the server
// may not have expired it, and its nodes would block others for ever.
func (s *Store) orphan(sess *session) {
	sess.mu.Lock()
	var paths []string
	for _, n := range sess.nodes {
		paths = append(paths, n.path)
	}
	id := sess.id
	sess.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer sess.setOrphaned()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for len(paths) > 0 {
			if sess.conn.SessionID() != id {
				return // expired after all: the server deleted them
			}
			if sess.conn.State() == zk.StateHasSession {
				var mu sync.Mutex
				var left []string
				ctx, cancel := context.WithTimeout(context.Background(), sess.timeout())
				parallel(len(paths), func(i int) {
					err := s.call(ctx, func() error { return sess.conn.Delete(paths[i], -1) })
					if err != nil && !errors.Is(err, zk.ErrNoNode) {
						mu.Lock()
						left = append(left, paths[i])
						mu.Unlock()
					}
				})
				cancel()
				paths = left
				continue
			}
			select {
			case <-tick.C:
			case <-s.quit:
				return
			}
		}
	}()
}

func (sess *session) setOrphaned() {
	sess.mu.Lock()
	sess.nodes = nil
	sess.mu.Unlock()
}

// orphaned reports whether the clean-up of a lost session is over, so
// that the connection's session may be used again.
func (sess *session) orphaned() bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return sess.nodes == nil
}

// tracker is the dialer of one owned zk.Conn. Its connections read the
// protocol's framing to time when the server last heard from the client,
// and obey the test hooks (crash, partition).
type tracker struct {
	s    *Store
	sess *session

	mu      sync.Mutex
	conns   map[*tconn]struct{}
	stopped bool
}

var errRefused = errors.New("zookeeper: not dialing (session over, store crashed or partitioned)")

func (t *tracker) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	s := t.s
	t.mu.Lock()
	refuse := t.stopped || s.crashed.Load() || s.partitioned.Load()
	t.mu.Unlock()
	if refuse {
		return nil, errRefused
	}
	c, err := s.opts.Dialer(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	tc := &tconn{Conn: c, t: t, sent: map[int32]time.Time{}}
	t.mu.Lock()
	if t.stopped {
		t.mu.Unlock()
		c.Close()
		return nil, errRefused
	}
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
	return tc, nil
}

// stop refuses further dials: a lost session is never resumed.
func (t *tracker) stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

// closeAll closes every connection (crash, or after zk.Conn.Close).
func (t *tracker) closeAll() {
	t.mu.Lock()
	cs := make([]*tconn, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

func (t *tracker) forget(c *tconn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// tconn is one TCP connection to a server. ZooKeeper's framing is a 4-byte
// length and a body; a request body starts with its xid (the first frame of
// a connection is the connect request, without one), a reply body with the
// xid of its request (-1 for watch events, -2 for pings), and the first
// reply is the connect response (protocol version, timeout, session id).
type tconn struct {
	net.Conn
	t      *tracker
	broken atomic.Bool // cut by a partition: nothing goes through any more
	closed atomic.Bool

	w, r        framer
	mu          sync.Mutex
	connectSent time.Time
	sent        map[int32]time.Time
	pings       []time.Time
}

func (c *tconn) cut() bool {
	if c.broken.Load() {
		return true
	}
	if c.t.s.partitioned.Load() {
		c.broken.Store(true)
		return true
	}
	return false
}

func (c *tconn) Write(p []byte) (int, error) {
	if c.cut() {
		return len(p), nil // lost in the network
	}
	now := time.Now() // before the server can possibly see it
	drop := false
	c.w.feed(p, func(head []byte, first bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if first {
			c.connectSent = now
			return
		}
		if len(head) < 8 {
			return
		}
		switch xid := int32(binary.BigEndian.Uint32(head)); {
		case xid == -2:
			c.pings = append(c.pings, now)
		case xid >= 0:
			c.sent[xid] = now
		}
		if binary.BigEndian.Uint32(head[4:8]) == opMulti && c.t.s.dropAfterMulti.CompareAndSwap(true, false) {
			drop = true
		}
	})
	n, err := c.Conn.Write(p)
	if drop {
		c.Close() // test hook: the request went out, its reply is lost
	}
	return n, err
}

// opMulti is ZooKeeper's multi-op request code.
const opMulti = 14

func (c *tconn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if c.cut() {
			if err != nil {
				return 0, err
			}
			continue // lost in the network; the read deadline still ends the wait
		}
		c.r.feed(p[:n], c.reply)
		return n, err
	}
}

// reply notes what a reply proves: the server heard the request it answers.
func (c *tconn) reply(head []byte, first bool) {
	sess := c.t.sess
	c.mu.Lock()
	var at time.Time
	if first {
		if len(head) < 16 {
			c.mu.Unlock()
			return
		}
		timeout := time.Duration(int32(binary.BigEndian.Uint32(head[4:8]))) * time.Millisecond
		id := int64(binary.BigEndian.Uint64(head[8:16]))
		at = c.connectSent
		c.mu.Unlock()
		if id == 0 {
			sess.lose(ErrSessionExpired) // before go-zookeeper starts a new session
			return
		}
		sess.mu.Lock()
		switch {
		case sess.id == 0:
			sess.id = id
		case sess.id != id:
			sess.mu.Unlock()
			sess.lose(ErrSessionExpired)
			return
		}
		sess.mu.Unlock()
		if timeout > 0 {
			sess.timeoutNs.Store(int64(timeout))
		}
		sess.heard(at)
		return
	}
	if len(head) < 4 {
		c.mu.Unlock()
		return
	}
	switch xid := int32(binary.BigEndian.Uint32(head)); {
	case xid == -2:
		if len(c.pings) > 0 {
			at = c.pings[0]
			c.pings = c.pings[1:]
		}
	case xid >= 0:
		at = c.sent[xid]
		delete(c.sent, xid)
	}
	c.mu.Unlock()
	if !at.IsZero() {
		sess.heard(at)
	}
}

func (c *tconn) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	c.t.forget(c)
	return c.Conn.Close()
}

// framer splits a byte stream into frames and calls back with the first
// (up to 16) bytes of each body.
type framer struct {
	lenBuf [4]byte
	nLen   int
	left   int // body bytes left in the current frame
	head   [16]byte
	nHead  int
	want   int // head bytes wanted from this frame
	frames int
}

func (f *framer) feed(p []byte, fn func(head []byte, first bool)) {
	for len(p) > 0 {
		if f.left == 0 {
			k := copy(f.lenBuf[f.nLen:], p)
			f.nLen += k
			p = p[k:]
			if f.nLen < 4 {
				return
			}
			f.nLen = 0
			f.left = int(binary.BigEndian.Uint32(f.lenBuf[:]))
			f.nHead = 0
			f.want = min(f.left, len(f.head))
			if f.left == 0 {
				f.frames++
				fn(nil, f.frames == 1)
			}
			continue
		}
		k := min(len(p), f.left)
		if f.nHead < f.want {
			c := copy(f.head[f.nHead:f.want], p[:k])
			f.nHead += c
			if f.nHead == f.want {
				f.frames++
				fn(f.head[:f.want], f.frames == 1)
			}
		}
		f.left -= k
		p = p[k:]
	}
}

// crash drops the store's connection without closing its session, as a
// killed process would, and never reconnects: the server expires the
// session after its timeout and deletes its nodes. The store is unusable
// afterwards but for Close. A test hook (drivertest.Crasher, through
// export_test.go).
func (s *Store) crash() {
	s.crashed.Store(true)
	s.mu.Lock()
	sess := s.cur
	s.mu.Unlock()
	if sess != nil && sess.tracker != nil {
		sess.tracker.stop()
		sess.tracker.closeAll()
	}
}

// setPartitioned cuts (true) or restores (false) the store's traffic, as a
// network partition would: while cut, what the client sends is lost, what
// the server sends never arrives, and no new connection can be made; a
// connection that was cut stays dead. A test hook
// (drivertest.Partitioner, through export_test.go); it works on
// connections Open made.
func (s *Store) setPartitioned(cut bool) { s.partitioned.Store(cut) }
