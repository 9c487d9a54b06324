// Package zookeeper is baton's ZooKeeper store, on github.com/go-zookeeper/zk.
// Import it for its URL scheme:
//
//	import _ "github.com/baton-go/baton/zookeeper"
//
//	client, err := baton.Open(ctx, "zk://10.0.0.5:2181,10.0.0.6:2181,10.0.0.7:2181/app?session_timeout=10s", nil)
//
// or open a [Store] with [Open] (to set Options the URL cannot, such as
// ACL or OnEvent), or build one over a go-zookeeper connection you own
// with [New], and pass it to baton.New.
//
// It needs ZooKeeper 3.5.3 or later (container nodes); every test runs on
// standalone ZooKeeper 3.8 and 3.9, and an ensemble test on three 3.8
// servers.
//
// # URL
//
//	zk://[user:password@]host[:port][,host[:port]…][/chroot][?option=value&…]
//
// Hosts default to port 2181. A user and password are sent with AddAuth
// ("digest", "user:password") on every connection the store opens; the
// nodes are still created with Options.ACL (open to all by default), so set
// ACL with [Open] to restrict them. The path is a chroot: locks live under
// <chroot><root>, /baton by default. Options: session_timeout (Go duration,
// SessionTimeout), root (Root), max_retries (MaxRetries), initial_retry_wait
// and max_retry_wait (Go durations) and linger (Linger).
//
// # Nodes
//
// This is the lock recipe of ZooKeeper's documentation, extended to shared
// locks and semaphores: each lock name is a container node under the root
// (the name escaped), each request an EPHEMERAL_SEQUENTIAL child of it
// whose sequence is its place in the FIFO queue. Empty parents are deleted
// Linger after their last release, and by ZooKeeper itself. See
// docs/stores/zookeeper.md#the-recipe.
//
// # Guarantees and limits
//
// The grant rules of package lockstate are applied to the ordered
// children; a waiter watches only the node that blocks it, so a release
// wakes one waiter. Fencing tokens are zxids: strictly increasing for
// every name, even after its parent was deleted. See
// docs/stores/zookeeper.md#fencing-tokens-and-round-trips.
//
// Every hold of a Store lives in its one ZooKeeper session, which the
// store keeps alive; baton does not renew such holds, and Status reports
// them as just renewed. The session is judged lost, on this machine's
// monotonic clock, when the server has not been heard from for the
// negotiated session timeout less a tenth: before the server can expire
// the session and grant the lock to someone else, given clocks whose rates
// differ by less than a few percent. baton then ends its leases with
// ErrLeaseLost, and the store never uses that session again.
// Options.OnEvent reports connection and session events. A holder that
// dies or is cut off blocks others for up to the session timeout. See
// docs/stores/zookeeper.md#sessions.
//
// Over a connection given to [New], the store cannot read the wire: it
// judges a session lost after a third of Options.SessionTimeout
// disconnected, and cannot know the negotiated timeout, so set
// SessionTimeout to the value passed to zk.Connect, within the server's
// maxSessionTimeout. See docs/stores/zookeeper.md#connections-you-own.
package zookeeper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

func init() {
	baton.Register("zk", func(ctx context.Context, u *url.URL) (driver.Store, error) {
		return Open(ctx, u.String(), nil)
	})
}

// Defaults for zero Options fields.
const (
	DefaultRoot             = "/baton"
	DefaultSessionTimeout   = 10 * time.Second
	DefaultInitialRetryWait = 50 * time.Millisecond
	DefaultMaxRetryWait     = 2 * time.Second
	DefaultLinger           = time.Second
)

// Options configure a Store. The zero value works.
type Options struct {
	// Root is the node under which lock names live (DefaultRoot if empty).
	// It is created, with its ancestors, when missing.
	Root string
	// SessionTimeout is the session timeout asked of the server
	// (DefaultSessionTimeout if zero). The server may change it to fit
	// its minSessionTimeout and maxSessionTimeout; Open uses the one
	// negotiated.
	SessionTimeout time.Duration
	// MaxRetries bounds the retries of a step after a connection loss;
	// 0 retries until the call's context ends.
	MaxRetries int
	// InitialRetryWait is the wait before the first retry; each further
	// retry waits twice as long, up to MaxRetryWait, with jitter
	// (DefaultInitialRetryWait and DefaultMaxRetryWait if zero).
	InitialRetryWait time.Duration
	MaxRetryWait     time.Duration
	// Linger is how long an empty lock parent is kept after its last
	// release by this store, so that a name taken again soon is not
	// recreated (DefaultLinger if zero; negative: delete at once).
	Linger time.Duration
	// ACL is set on every node the store creates (zk.WorldACL(zk.PermAll)
	// if nil).
	ACL []zk.ACL
	// Auth is added (AddAuth) to every connection Open makes.
	Auth []Credential
	// OnEvent, if set, is called for connection and session events, in
	// order, from one goroutine of the store: it may block, but events
	// queue meanwhile.
	OnEvent func(Event)
	// Dialer opens connections to the servers (net.DialTimeout if nil).
	// Open wraps it; New does not use it.
	Dialer zk.Dialer
	// Logger receives go-zookeeper's log lines (discarded if nil). Open
	// only.
	Logger zk.Logger
}

// Credential is one AddAuth call: Scheme "digest" and Data "user:password"
// for ZooKeeper's digest authentication.
type Credential struct {
	Scheme string
	Data   []byte
}

// EventKind says what happened to the store's connection or session.
type EventKind string

const (
	// EventConnected: a new session is established and ready.
	EventConnected EventKind = "connected"
	// EventDisconnected: the connection broke; the session is suspended and
	// its holds are still valid unless it expires.
	EventDisconnected EventKind = "disconnected"
	// EventReconnected: the same session resumed; its holds are intact.
	EventReconnected EventKind = "reconnected"
	// EventSessionExpired: the session expired, or may have (Err says
	// which); every hold in it is lost.
	EventSessionExpired EventKind = "session-expired"
)

// Event reports a change of the store's connection or session.
type Event struct {
	Kind      EventKind
	SessionID int64
	Server    string
	Err       error // for EventSessionExpired: ErrSessionExpired or ErrSessionTimeout
}

var (
	// ErrClosed is returned by a Store's methods after Close.
	ErrClosed = fmt.Errorf("zookeeper: %w", driver.ErrClosed)
	// ErrSessionExpired says the server expired the session.
	ErrSessionExpired = errors.New("zookeeper: session expired")
	// ErrSessionTimeout says the server was not heard from for nearly the
	// session timeout: the session may have expired.
	ErrSessionTimeout = errors.New("zookeeper: server not heard from for the session timeout: the session may have expired")

	// errCrashed is returned after crash (a test hook).
	errCrashed = errors.New("zookeeper: store crashed (test hook)")
	// errSessionLost ends a step whose session ended; the operation starts
	// again in a new session.
	errSessionLost = errors.New("zookeeper: session lost")
)

// Store is a lock store in one ZooKeeper ensemble. It is safe for
// concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	opts    Options
	root    string
	acl     []zk.ACL
	servers []string // nil for a caller-owned connection
	epoch   time.Time

	quit chan struct{} // closed by Close
	wg   sync.WaitGroup

	crashed        atomic.Bool // test hooks
	partitioned    atomic.Bool
	dropAfterMulti atomic.Bool

	mu     sync.Mutex
	closed bool
	cur    *session
	// given up holds the ids of sessions this store judged lost: their
	// nodes may outlive that judgement on the server (an unreachable
	// server expires the session later), and must never be adopted.
	givenUp     map[int64]bool
	changed     chan struct{} // closed and replaced when cur changes (caller-owned conns)
	cleanup     map[string]time.Time
	cleanupWake chan struct{}
	janitorAt   time.Time // when the janitor wakes next

	evMu    sync.Mutex
	evQueue []Event
	evWake  chan struct{}
}

// Open connects to the servers of rawURL, a zk:// URL (see the package
// documentation), and waits, until ctx ends, for a session. Options given
// in the URL apply where opts leaves the field zero.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("zookeeper: %w", err)
	}
	servers, fromURL, err := parseURL(u)
	if err != nil {
		return nil, err
	}
	s, err := newStore(driver.FillZero(opts, fromURL))
	if err != nil {
		return nil, err
	}
	s.servers = zk.FormatServers(servers)
	s.start()
	if _, err := s.live(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("zookeeper: connect to %s: %w", strings.Join(servers, ","), err)
	}
	return s, nil
}

// New returns a store over conn, a connection you own, whose event channel
// (as zk.Connect returned it) the store reads from now on; events may be
// nil, and the store then polls the connection's state. Close does not
// close conn. See the package documentation for what the store cannot
// judge on such a connection.
func New(conn *zk.Conn, events <-chan zk.Event, opts *Options) (*Store, error) {
	if conn == nil {
		return nil, errors.New("zookeeper: nil connection")
	}
	s, err := newStore(opts)
	if err != nil {
		return nil, err
	}
	s.start()
	s.wg.Add(1)
	go s.monitor(conn, events)
	return s, nil
}

func newStore(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Root == "" {
		o.Root = DefaultRoot
	}
	root := path.Clean("/" + o.Root)
	if root == "/" {
		return nil, fmt.Errorf("zookeeper: root %q is ZooKeeper's root", o.Root)
	}
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.SessionTimeout < 0 || o.MaxRetries < 0 || o.InitialRetryWait < 0 || o.MaxRetryWait < 0 {
		return nil, errors.New("zookeeper: negative option")
	}
	if o.InitialRetryWait == 0 {
		o.InitialRetryWait = DefaultInitialRetryWait
	}
	if o.MaxRetryWait == 0 {
		o.MaxRetryWait = max(DefaultMaxRetryWait, o.InitialRetryWait)
	}
	if o.Linger == 0 {
		o.Linger = DefaultLinger
	}
	acl := o.ACL
	if acl == nil {
		acl = zk.WorldACL(zk.PermAll)
	}
	if o.Dialer == nil {
		o.Dialer = net.DialTimeout
	}
	if o.Logger == nil {
		o.Logger = discard{}
	}
	return &Store{
		opts: o, root: root, acl: acl, epoch: time.Now(),
		quit: make(chan struct{}), changed: make(chan struct{}),
		cleanup: map[string]time.Time{}, cleanupWake: make(chan struct{}, 1),
		evWake: make(chan struct{}, 1),
	}, nil
}

func (s *Store) start() {
	s.wg.Add(2)
	go s.dispatch()
	go s.janitor()
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// parseURL reads zk://[user:password@]host[:port],…[/chroot][?options].
func parseURL(u *url.URL) ([]string, *Options, error) {
	if u.Scheme != "zk" {
		return nil, nil, fmt.Errorf("zookeeper: URL scheme %q, want zk", u.Scheme)
	}
	var servers []string
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			h = net.JoinHostPort(strings.Trim(h, "[]"), "2181")
		}
		servers = append(servers, h)
	}
	if len(servers) == 0 {
		return nil, nil, errors.New("zookeeper: URL names no server")
	}
	o := &Options{}
	root := DefaultRoot
	q := u.Query()
	for k, vs := range q {
		v := vs[len(vs)-1]
		var err error
		switch k {
		case "session_timeout":
			o.SessionTimeout, err = time.ParseDuration(v)
		case "root":
			root = v
		case "max_retries":
			o.MaxRetries, err = strconv.Atoi(v)
		case "initial_retry_wait":
			o.InitialRetryWait, err = time.ParseDuration(v)
		case "max_retry_wait":
			o.MaxRetryWait, err = time.ParseDuration(v)
		case "linger":
			o.Linger, err = time.ParseDuration(v)
		default:
			return nil, nil, fmt.Errorf("zookeeper: unknown URL option %q", k)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("zookeeper: URL option %s: %w", k, err)
		}
	}
	if chroot := strings.TrimRight(u.Path, "/"); chroot != "" {
		root = chroot + "/" + strings.TrimLeft(root, "/")
	}
	o.Root = root
	if u.User != nil {
		pw, _ := u.User.Password()
		o.Auth = []Credential{{Scheme: "digest", Data: []byte(u.User.Username() + ":" + pw)}}
	}
	return servers, o, nil
}

// live returns the current session once it is ready, opening a new one if
// the last one was lost.
func (s *Store) live(ctx context.Context) (*session, error) {
	for {
		s.mu.Lock()
		switch {
		case s.closed:
			s.mu.Unlock()
			return nil, ErrClosed
		case s.crashed.Load():
			s.mu.Unlock()
			return nil, errCrashed
		}
		sess := s.cur
		if (sess == nil || sess.lost()) && s.servers != nil {
			sess = s.dial()
			if sess.conn == nil { // zk.Connect refused the servers
				s.mu.Unlock()
				return nil, sess.err
			}
			s.cur = sess
		}
		changed := s.changed
		s.mu.Unlock()
		if sess == nil || sess.lost() {
			// A caller-owned connection: wait for its next session.
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-s.quit:
				return nil, ErrClosed
			}
		}
		select {
		case <-sess.ready:
			if sess.lost() {
				continue
			}
			return sess, nil
		case <-sess.done:
			continue
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.quit:
			return nil, ErrClosed
		}
	}
}

// call runs one request, fn, bounded by ctx: go-zookeeper's requests take
// no context, so a cancellable call runs fn in a goroutine that ends when
// the request does (at the latest when the connection closes).
func (s *Store) call(ctx context.Context, fn func() error) error {
	if ctx.Done() == nil {
		return fn()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	ch := make(chan error, 1)
	go func() {
		defer s.wg.Done()
		ch <- fn()
	}()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryable reports errors after which a request may be sent again: the
// connection broke, the session may live on.
func retryable(err error) bool {
	var ne net.Error
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		// a failed write is returned as it is
		errors.As(err, &ne) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF)
}

// do runs fn, one idempotent request on sess, retrying it after connection
// losses. It returns errSessionLost if the session ended meanwhile.
func (s *Store) do(ctx context.Context, sess *session, fn func(c *zk.Conn) error) error {
	return s.retry(ctx, sess, func() error {
		start := time.Now()
		err := s.call(ctx, func() error { return fn(sess.conn) })
		if err == nil && sess.tracker == nil {
			sess.heard(start) // caller-owned: a reply is the only evidence
		}
		return err
	})
}

// retry runs attempt until it succeeds, fails for good, or the retries are
// used up.
func (s *Store) retry(ctx context.Context, sess *session, attempt func() error) error {
	for n := 0; ; n++ {
		err := attempt()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zk.ErrSessionExpired):
			sess.lose(ErrSessionExpired)
			return errSessionLost
		case sess.lost() && (retryable(err) || errors.Is(err, zk.ErrClosing)):
			return errSessionLost
		case !retryable(err):
			return err
		case s.opts.MaxRetries > 0 && n >= s.opts.MaxRetries:
			return err
		}
		if werr := s.sleep(ctx, sess, s.backoff(n)); werr != nil {
			return werr
		}
	}
}

// backoff is the wait before retry n+1: binary exponential from
// InitialRetryWait, capped at MaxRetryWait, with jitter (half to all of it).
func (s *Store) backoff(n int) time.Duration {
	d := s.opts.InitialRetryWait << min(n, 20)
	if d > s.opts.MaxRetryWait || d <= 0 {
		d = s.opts.MaxRetryWait
	}
	return driver.Jitter(d)
}

func (s *Store) sleep(ctx context.Context, sess *session, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var done <-chan struct{}
	if sess != nil {
		done = sess.done
	}
	select {
	case <-t.C:
		return nil
	case <-done:
		return errSessionLost
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return ErrClosed
	}
}

// inSession runs op in the live session, and again in a new session when
// the session is lost meanwhile, within MaxRetries.
func (s *Store) inSession(ctx context.Context, op func(sess *session) error) error {
	for n := 0; ; n++ {
		sess, err := s.live(ctx)
		if err != nil {
			return err
		}
		err = op(sess)
		if !errors.Is(err, errSessionLost) {
			return err
		}
		if s.opts.MaxRetries > 0 && n >= s.opts.MaxRetries {
			return fmt.Errorf("%w: %w", errSessionLost, sess.Err())
		}
	}
}

// Close closes the session (the server deletes its nodes at once), after
// deleting the empty lock parents it left, and stops every goroutine of the
// store. A connection given to New stays open; the store deletes its nodes
// in it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	sess := s.cur
	s.mu.Unlock()
	if sess != nil && sess.isReady() && !sess.lost() && !s.crashed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), min(2*time.Second, sess.timeout()/2))
		s.flush(ctx, sess)
		cancel()
	}
	s.mu.Lock()
	s.closed = true
	close(s.quit)
	s.mu.Unlock()
	if sess != nil {
		sess.lose(ErrClosed)
	}
	s.wg.Wait()
	return nil
}

// flush deletes this session's nodes and the lock parents waiting for
// clean-up, before the store closes.
func (s *Store) flush(ctx context.Context, sess *session) {
	var paths []string
	sess.mu.Lock()
	for _, n := range sess.nodes {
		paths = append(paths, n.path)
	}
	sess.mu.Unlock()
	s.mu.Lock()
	var parents []string
	for p := range s.cleanup {
		parents = append(parents, p)
	}
	clear(s.cleanup)
	s.mu.Unlock()
	parallel(len(paths), func(i int) {
		_ = s.call(ctx, func() error { return sess.conn.Delete(paths[i], -1) })
	})
	parallel(len(parents), func(i int) {
		_ = s.call(ctx, func() error { return sess.conn.Delete(parents[i], -1) })
	})
}

// parallel runs fn(0…n-1), up to 32 at once; go-zookeeper pipelines the
// requests of concurrent calls on its one connection.
func parallel(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}

// emit queues an event for Options.OnEvent.
func (s *Store) emit(e Event) {
	if s.opts.OnEvent == nil {
		return
	}
	s.evMu.Lock()
	s.evQueue = append(s.evQueue, e)
	s.evMu.Unlock()
	select {
	case s.evWake <- struct{}{}:
	default:
	}
}

// dispatch calls OnEvent, in order, until Close; events queued before
// Close are delivered.
func (s *Store) dispatch() {
	defer s.wg.Done()
	for {
		s.evMu.Lock()
		q := s.evQueue
		s.evQueue = nil
		s.evMu.Unlock()
		for _, e := range q {
			s.opts.OnEvent(e)
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-s.evWake:
		case <-s.quit:
			s.evMu.Lock()
			q := s.evQueue
			s.evQueue = nil
			s.evMu.Unlock()
			for _, e := range q {
				s.opts.OnEvent(e)
			}
			return
		}
	}
}

// scheduleCleanup deletes parent Linger from now unless it is used again.
func (s *Store) scheduleCleanup(sess *session, parent string) {
	if s.opts.Linger < 0 {
		ctx, cancel := context.WithTimeout(context.Background(), sess.timeout())
		defer cancel()
		_ = s.call(ctx, func() error { return sess.conn.Delete(parent, -1) })
		return
	}
	at := time.Now().Add(s.opts.Linger)
	s.mu.Lock()
	s.cleanup[parent] = at
	wake := at.Before(s.janitorAt)
	s.mu.Unlock()
	if wake {
		select {
		case s.cleanupWake <- struct{}{}:
		default:
		}
	}
}

func (s *Store) unscheduleCleanup(parent string) {
	s.mu.Lock()
	delete(s.cleanup, parent)
	s.mu.Unlock()
}

// janitor deletes lock parents whose linger ran out: an attempt that
// fails because the parent has children (someone uses it) or is gone is
// the end of it.
func (s *Store) janitor() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		now := time.Now()
		next := now.Add(time.Hour)
		var due []string
		s.mu.Lock()
		for p, at := range s.cleanup {
			if !at.After(now) {
				due = append(due, p)
				delete(s.cleanup, p)
			} else if at.Before(next) {
				next = at
			}
		}
		sess := s.cur
		s.janitorAt = next
		s.mu.Unlock()
		if len(due) > 0 && sess != nil && !sess.lost() {
			ctx, cancel := context.WithTimeout(context.Background(), sess.timeout())
			stop := context.AfterFunc(ctxOf(s.quit), cancel)
			parallel(len(due), func(i int) {
				_ = s.call(ctx, func() error { return sess.conn.Delete(due[i], -1) })
			})
			stop()
			cancel()
		}
		t.Reset(time.Until(next))
		select {
		case <-t.C:
		case <-s.cleanupWake:
		case <-s.quit:
			return
		}
	}
}

// ctxOf is a context cancelled when ch closes.
func ctxOf(ch <-chan struct{}) context.Context { return chanCtx(ch) }

type chanCtx <-chan struct{}

func (c chanCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c chanCtx) Done() <-chan struct{}       { return c }
func (c chanCtx) Value(any) any               { return nil }
func (c chanCtx) Err() error {
	select {
	case <-c:
		return context.Canceled
	default:
		return nil
	}
}
