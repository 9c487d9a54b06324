package postgres

import (
	"context"
	"crypto/rand"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/baton-go/baton/driver"
)

// listenerLinger is how long the listener stays connected after the last
// Watch closed: blocking acquires come and go, and each new listener costs
// a connection and a LISTEN.
const listenerLinger = 10 * time.Second

// hub runs a Store's listener connection and hands the notifications it
// receives to the watches of this process. A notification's payload is a
// lock name, then a line per owner it concerns: the owner, followed, when
// the server handed the name over to it, by the hold's token, created and
// expires times (µs since 1970), mode and limit, separated by spaces; the
// name alone concerns every waiter of the name. The hub listens to the
// table's channel and to one of its own, on which the server tells it of
// the requests this Store queued, and of those alone: PostgreSQL sends a
// notification to every session that listens to its channel. Each name
// has a channel closed and replaced for name-wide wake-ups, and each
// (name, owner) one for wake-ups of that owner: a watch waits on both,
// and after each return takes the current ones, so it never misses a
// wake-up that comes after its previous return.
type hub struct {
	cfg     *pgx.ConnConfig
	channel string // the table's, for every Store of the table
	own     string // this Store's, for the requests it queued (see wake in schema.sql)

	mu      sync.Mutex
	topics  map[string]*topic
	watches int                // open watches
	stop    context.CancelFunc // nil while no listener runs
	idle    *time.Timer        // stops the listener once no watch is open
	closed  bool
	listens int // successful LISTENs, for tests
	heardN  int // notifications received, for tests
	wg      sync.WaitGroup

	// listening is when the current listener connection began to listen
	// (zero while none is), and heard when each name, and each name+"\n"+
	// owner, was last notified since heardFrom: with them a new watch can
	// replay a wake-up that came between its refused attempt and its
	// start (see watch.Replay).
	listening time.Time
	heard     map[string]time.Time
	heardFrom time.Time

	// marks and handed serve the server's hand-off (see handoff.go), by
	// name+"\n"+owner.
	marks  map[string]driver.ServerMark
	handed map[string]handedHold
}

// heardFor bounds how long the hub remembers a notification: the gap
// between a refused attempt and the watch that follows it is far shorter.
const heardFor = 2 * time.Second

type topic struct {
	refs   int
	all    chan struct{}
	owners map[string]*ownerTopic
}

type ownerTopic struct {
	refs int
	ch   chan struct{}
}

func newHub(cfg *pgx.ConnConfig, table string) *hub {
	cfg = cfg.Copy()
	// Ending a wait for notifications needs no cancel request to the
	// server: the connection is closed right after.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	own := "baton_" + strings.ToLower(rand.Text())
	return &hub{cfg: cfg, channel: table, own: own, topics: map[string]*topic{}, heard: map[string]time.Time{}}
}

func (h *hub) watch(name, owner string) (*watch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	t := h.topics[name]
	if t == nil {
		t = &topic{all: make(chan struct{}), owners: map[string]*ownerTopic{}}
		h.topics[name] = t
	}
	o := t.owners[owner]
	if o == nil {
		o = &ownerTopic{ch: make(chan struct{})}
		t.owners[owner] = o
	}
	t.refs++
	o.refs++
	h.watches++
	if h.idle != nil {
		h.idle.Stop()
	}
	if h.stop == nil {
		// The listener is not listening yet: it wakes every watch once it
		// is, so that a change made before then is not missed.
		ctx, cancel := context.WithCancel(context.Background())
		h.stop = cancel
		h.wg.Add(1)
		go h.run(ctx)
	}
	return &watch{h: h, name: name, owner: owner, t: t, o: o, all: t.all, mine: o.ch}, nil
}

func (h *hub) unwatch(w *watch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.o.refs--; w.o.refs == 0 {
		delete(w.t.owners, w.owner)
	}
	if w.t.refs--; w.t.refs == 0 {
		delete(h.topics, w.name)
	}
	if h.watches--; h.watches == 0 && h.stop != nil && !h.closed {
		if h.idle == nil {
			h.idle = time.AfterFunc(listenerLinger, h.stopIdle)
		} else {
			h.idle.Reset(listenerLinger)
		}
	}
}

func (h *hub) stopIdle() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.watches == 0 && h.stop != nil {
		h.stop()
		h.stop = nil
	}
}

// close stops the listener and waits for it.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	if h.idle != nil {
		h.idle.Stop()
	}
	if h.stop != nil {
		h.stop()
		h.stop = nil
	}
	h.wakeAllLocked()
	h.mu.Unlock()
	h.wg.Wait()
}

// deliver handles one notification.
func (h *hub) deliver(payload string) {
	name, rest, _ := strings.Cut(payload, "\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.heardN++
	h.remember(name, rest)
	t := h.topics[name]
	if t == nil {
		return
	}
	if rest == "" {
		close(t.all)
		t.all = make(chan struct{})
		return
	}
	for line := range strings.SplitSeq(rest, "\n") {
		owner, hold, _ := strings.Cut(line, " ")
		if o := t.owners[owner]; o != nil {
			if hold != "" {
				h.setHanded(name, owner, hold)
			}
			close(o.ch)
			o.ch = make(chan struct{})
		}
	}
}

// remember records a notification for watch.Replay. h.mu is held.
func (h *hub) remember(name, owners string) {
	now := time.Now()
	if now.Sub(h.heardFrom) > 2*heardFor {
		// Forget what is too old to matter, all at once: keeps the map
		// small without a timer.
		from := now.Add(-heardFor)
		for k, at := range h.heard {
			if at.Before(from) {
				delete(h.heard, k)
			}
		}
		h.heardFrom = from
	}
	if owners == "" {
		h.heard[name] = now
		return
	}
	for line := range strings.SplitSeq(owners, "\n") {
		owner, _, _ := strings.Cut(line, " ")
		h.heard[name+"\n"+owner] = now
	}
}

func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeAllLocked()
}

func (h *hub) wakeAllLocked() {
	for _, t := range h.topics {
		close(t.all)
		t.all = make(chan struct{})
	}
}

// run keeps a connection listening until ctx ends, reconnecting with
// backoff; it wakes every watch whenever notifications may have been
// missed (before it listens, and each time the connection is lost).
func (h *hub) run(ctx context.Context) {
	defer h.wg.Done()
	delay := 50 * time.Millisecond
	for {
		if conn := h.connect(ctx); conn != nil {
			h.mu.Lock()
			h.listens++
			h.listening = time.Now()
			h.wakeAllLocked()
			h.mu.Unlock()
			delay = 50 * time.Millisecond
			for {
				n, err := conn.WaitForNotification(ctx)
				if err != nil {
					break
				}
				h.deliver(n.Payload)
			}
			h.mu.Lock()
			h.listening = time.Time{}
			h.mu.Unlock()
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			conn.Close(cctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			h.wakeAll()
		}
		t := time.NewTimer(driver.Jitter(delay))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func (h *hub) connect(ctx context.Context) *pgx.Conn {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, h.cfg.Copy())
	if err != nil {
		return nil
	}
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{h.channel}.Sanitize()+"; LISTEN "+pgx.Identifier{h.own}.Sanitize()); err != nil {
		conn.Close(cctx)
		return nil
	}
	return conn
}

// watch implements driver.Watch.
type watch struct {
	h           *hub
	name, owner string
	t           *topic
	o           *ownerTopic
	all, mine   chan struct{} // guarded by h.mu
	closeOnce   sync.Once
}

var _ driver.Watch = (*watch)(nil)

func (w *watch) Wait(ctx context.Context) error {
	w.h.mu.Lock()
	all, mine := w.all, w.mine
	w.h.mu.Unlock()
	select {
	case <-all:
	case <-mine:
	case <-ctx.Done():
		return ctx.Err()
	}
	w.h.mu.Lock()
	w.all, w.mine = w.t.all, w.o.ch
	w.h.mu.Unlock()
	return nil
}

// Replay implements driver.Replayer. A release that could let the request
// in commits after the refused attempt read the name's row (both hold its
// row lock), so after since: if the listener was listening since before
// then, its notification has been, or will be, heard.
func (w *watch) Replay(since time.Time) bool {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listening.IsZero() || !h.listening.Before(since) || !h.heardFrom.Before(since) {
		return false
	}
	if at, ok := h.heard[w.name]; ok && !at.Before(since) {
		w.all = closedChan
	} else if at, ok := h.heard[w.name+"\n"+w.owner]; ok && !at.Before(since) {
		w.all = closedChan
	}
	return true
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (w *watch) Close() error {
	w.closeOnce.Do(func() { w.h.unwatch(w) })
	return nil
}
