// Package records implements driver.Store once, for stores that keep each
// lock name's state (package lockstate) as one record. Such a store writes
// Update, which changes the records of some names atomically, and Scan,
// which reads them; this package applies the grant rules, groups renewals
// and releases by name, writes back only what changed, wakes the waiters
// of its process when an entry leaves, and has waiters of other processes
// woken by the store's notifications or by polling.
package records

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/sessions"
)

// Records is what a store implements.
type Records interface {
	// Update reads the records of names (a zero State for a name never
	// written), calls fn once per name, in order, with its state and the
	// store's time, and writes back the states fn left Dirty (State.Dirty),
	// atomically per name at least. It may call fn again for a name whose
	// write lost a race; fn sets its results afresh each time. When Update
	// returns, the states hold what was written: a store whose time is
	// known only once a write commits (Spanner's commit timestamps) may
	// have moved the times fn set (equal to now) to the commit time, and
	// raised the tokens of the grants fn made, keeping their order.
	Update(ctx context.Context, names []string, fn func(i int, st *lockstate.State, now time.Time) error) error
	// Scan calls fn with each stored name that is name (when name is not
	// empty) or starts with prefix, its state and the store's time, until
	// fn returns false.
	Scan(ctx context.Context, name, prefix string, fn func(name string, st *lockstate.State, now time.Time) bool) error
	Close() error
}

// Notifier is implemented by stores that can tell a waiter when the record
// of a name may have changed, in any process.
type Notifier interface {
	// Notify returns a channel that is closed when the record of name may
	// have changed after the call, and a function that stops it.
	Notify(ctx context.Context, name string) (<-chan struct{}, func(), error)
}

// RequestNotifier is a Notifier that can tell, from the change it saw,
// whether a request may now be granted, and wakes its waiter only then: a
// release wakes the head of the queue, not every waiter. Store.Watch uses
// it in place of Notify.
type RequestNotifier interface {
	// NotifyRequest returns a channel that is closed when the record of
	// req.Name changed, after the call, to a state that may grant req
	// (req.Queue is false), and a function that stops it.
	NotifyRequest(ctx context.Context, req *driver.Request) (<-chan struct{}, func(), error)
}

// Options configure a Store. The zero value works.
type Options struct {
	// Poll is the longest pause between two reads of a waiter whose store
	// cannot notify it (100ms if zero); it starts at 2ms.
	Poll time.Duration
	// Wall converts the store's times to wall-clock times in the grants
	// and listings it reports, for stores whose clock is not the wall
	// clock (nil: none).
	Wall func(time.Time) time.Time
	// Local says that every writer of the records is this Store (an
	// in-memory store): waiters are woken by its changes alone, without
	// polling.
	Local bool
	// ReadFirst makes a waiting Acquire (Request.Queue) that would change
	// nothing (refused, its place in the queue needing no refresh) answer
	// from a Scan of the name, without an Update: for stores where a read
	// costs much less than a write under contention (SQLite's write lock).
	// Only a request this Store queued reads first: any other changes the
	// state, if only by joining the queue.
	ReadFirst bool
}

// Store is a driver.Store and driver.Waiter over Records.
type Store struct {
	r         Records
	poll      time.Duration
	wall      func(time.Time) time.Time
	local     bool
	readFirst bool

	mu      sync.Mutex
	names   map[string]*gen     // waiters' generations, by name
	pruneAt int                 // len(names) at which prune next scans them
	queued  map[driver.Key]bool // with readFirst: requests last left queued

	// followed are the names a holder watch follows on a local store: the
	// channel is closed and replaced on every change of the name.
	followed  map[string]*follow
	nfollowed atomic.Int32 // len(followed), read without s.mu

	ss *sessions.Keeper // for Records that implement Sessions, else nil
}

type follow struct {
	ch   chan struct{}
	refs int
}

// gen is the generation of a name's changes seen in this process.
type gen struct {
	ch      chan struct{} // closed and replaced when an entry leaves
	at      time.Time     // when that last happened
	waiters int
}

// New returns a Store over r.
func New(r Records, o *Options) *Store {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.Poll <= 0 {
		opts.Poll = 100 * time.Millisecond
	}
	if opts.Wall == nil {
		opts.Wall = func(t time.Time) time.Time { return t }
	}
	s := &Store{r: r, poll: opts.Poll, wall: opts.Wall, local: opts.Local, readFirst: opts.ReadFirst, names: map[string]*gen{}}
	if ks, ok := r.(Sessions); ok {
		s.ss = sessions.New(ks)
	}
	return s
}

// Records returns the store the Store is over.
func (s *Store) Records() Records { return s.r }

// freed wakes this process's waiters of names whose state let an entry go,
// and remembers when, for a watch that begins just after (Replay).
func (s *Store) freed(names []string, sts []*lockstate.State) {
	var gone []string
	for i, st := range sts {
		if st != nil && st.Freed {
			gone = append(gone, names[i])
		}
	}
	s.Freed(gone...)
}

// Freed wakes this process's waiters of names, for a store that changed
// their records outside Update (a decision made on the server) and let an
// entry go.
func (s *Store) Freed(names ...string) {
	if len(names) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, name := range names {
		g := s.names[name]
		if g == nil {
			g = &gen{ch: make(chan struct{})}
			s.names[name] = g
			s.prune(now)
		} else {
			close(g.ch)
			g.ch = make(chan struct{})
		}
		g.at = now
	}
}

// keepChanges is how long the time of a name's last change is kept for
// a name nobody in this process waits for.
const keepChanges = 10 * time.Second

// prune forgets, now and then, the names nobody waits for that have not
// changed for keepChanges. It scans the names only when they have doubled
// since the last scan left them, so that a process that frees many names
// within keepChanges (a Close releasing all it holds) pays O(1) per name.
// s.mu is held.
func (s *Store) prune(now time.Time) {
	if len(s.names) < max(s.pruneAt, 1024) {
		return
	}
	for n, g := range s.names {
		if g.waiters == 0 && now.Sub(g.at) > keepChanges {
			delete(s.names, n)
		}
	}
	s.pruneAt = 2 * len(s.names)
}

// update runs fn over names through Records.Update, keeping the final
// states, and wakes local waiters where an entry left.
func (s *Store) update(ctx context.Context, names []string, fn func(i int, st *lockstate.State, now time.Time)) ([]*lockstate.State, error) {
	sts := make([]*lockstate.State, len(names))
	err := s.r.Update(ctx, names, func(i int, st *lockstate.State, now time.Time) error {
		st.Dirty, st.Freed = false, false
		fn(i, st, now)
		sts[i] = st
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.freed(names, sts)
	if s.nfollowed.Load() > 0 {
		s.changed(names, sts)
	}
	return sts, nil
}

// changed wakes the holder watches of names whose state changed.
func (s *Store) changed(names []string, sts []*lockstate.State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range sts {
		if f := s.followed[names[i]]; f != nil && st != nil && st.Dirty {
			close(f.ch)
			f.ch = make(chan struct{})
		}
	}
}

// WatchHolders implements driver.HolderWatcher: on a local store a holder
// watch is woken by every change of the name's record; on others, by the
// store's notifications (Notifier), if it has them.
func (s *Store) WatchHolders(ctx context.Context, name string) (driver.Watch, error) {
	n, notifies := s.r.(Notifier)
	if !s.local && !notifies {
		return nil, fmt.Errorf("records: the store cannot tell when a record changes: %w", errors.ErrUnsupported)
	}
	w := &holderWatch{s: s, name: name}
	if s.local {
		s.mu.Lock()
		if s.followed == nil {
			s.followed = map[string]*follow{}
		}
		f := s.followed[name]
		if f == nil {
			f = &follow{ch: make(chan struct{})}
			s.followed[name] = f
			s.nfollowed.Add(1)
		}
		f.refs++
		w.f, w.ch = f, f.ch
		s.mu.Unlock()
		return w, nil
	}
	ch, stop, err := n.Notify(ctx, name)
	if err != nil {
		return nil, err
	}
	w.note, w.stopNote = ch, stop
	return w, nil
}

// holderWatch is a holder watch of one name.
type holderWatch struct {
	s        *Store
	name     string
	f        *follow         // local stores
	ch       chan struct{}   // the generation of f last waited for
	note     <-chan struct{} // other stores: the store's notification
	stopNote func()
	closed   bool
}

// Wait implements driver.Watch.
func (w *holderWatch) Wait(ctx context.Context) error {
	select {
	case <-w.ch: // nil unless local
		w.s.mu.Lock()
		w.ch = w.f.ch
		w.s.mu.Unlock()
	case <-w.note: // nil for a local store
		w.stopNote()
		ch, stop, err := w.s.r.(Notifier).Notify(ctx, w.name)
		if err != nil {
			w.note, w.stopNote = nil, func() {}
			return err
		}
		w.note, w.stopNote = ch, stop
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Close implements driver.Watch.
func (w *holderWatch) Close() error {
	if w.stopNote != nil {
		w.stopNote()
	}
	if w.f == nil {
		return nil
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if !w.closed {
		w.closed = true
		if w.f.refs--; w.f.refs == 0 && w.s.followed[w.name] == w.f {
			delete(w.s.followed, w.name)
			w.s.nfollowed.Add(-1)
		}
	}
	return nil
}

// sessionOf returns the session owner's hold in st is bound to.
func sessionOf(st *lockstate.State, owner string) string {
	for _, e := range st.Holders {
		if e.Owner == owner {
			return e.Session
		}
	}
	return ""
}

func (s *Store) grant(st *lockstate.State, owner string) *driver.Grant {
	for _, e := range st.Holders {
		if e.Owner == owner {
			return &driver.Grant{Token: e.Token, Created: s.wall(e.Created), Renewed: s.wall(e.Renewed), Expires: s.wall(e.Expires)}
		}
	}
	return nil
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	key := driver.Key{Name: req.Name, Owner: req.Owner}
	if s.readFirst && req.Queue && s.wasQueued(key) {
		if busy, err := s.refusedByRead(ctx, req); err != nil || busy != nil {
			return nil, errors.Join(err, busyErr(busy))
		}
	}
	var x *sessions.Session
	if req.KeepAlive && s.ss != nil {
		x = s.ss.Session(req.TTL, false)
	}
	var extended, bound bool
	var aerr error
	sts, err := s.update(ctx, []string{req.Name}, func(_ int, st *lockstate.State, now time.Time) {
		var g *driver.Grant
		g, aerr = st.Acquire(req, now)
		extended = g != nil && g.Extended
		if g == nil || x == nil {
			return
		}
		// A new hold is bound to the session; a hold extended keeps the
		// binding it has, which is the one its lease knows of.
		if !extended {
			st.Bind(req.Owner, x.ID())
		}
		bound = sessionOf(st, req.Owner) == x.ID()
	})
	if err != nil {
		return nil, err
	}
	if s.readFirst {
		s.setQueued(key, req.Queue && errors.Is(aerr, driver.ErrNotGranted))
	}
	if aerr != nil {
		return nil, aerr
	}
	if req.KeepAlive && x == nil && s.ss != nil {
		s.ss.Session(req.TTL, true)
	}
	g := s.grant(sts[0], req.Owner)
	if g == nil {
		return nil, errors.New("records: granted hold missing from the state written")
	}
	g.Extended = extended
	if bound {
		g.Session = x
	}
	return g, nil
}

// maxQueued bounds Store.queued: past it, the requests it forgets write
// first, as every request that is not queued does.
const maxQueued = 4096

func (s *Store) wasQueued(k driver.Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queued[k]
}

func (s *Store) setQueued(k driver.Key, queued bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !queued:
		delete(s.queued, k)
	case s.queued == nil || len(s.queued) >= maxQueued:
		s.queued = map[driver.Key]bool{k: true}
	default:
		s.queued[k] = true
	}
}

func (s *Store) forgetQueued(keys []driver.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queued) == 0 {
		return
	}
	for _, k := range keys {
		delete(s.queued, k)
	}
}

// refusedByRead applies req to a Scan of its name, and returns the refusal
// if the request is not granted and its state would not change.
func (s *Store) refusedByRead(ctx context.Context, req *driver.Request) (*driver.Busy, error) {
	var busy *driver.Busy
	err := s.r.Scan(ctx, req.Name, "", func(_ string, st *lockstate.State, now time.Time) bool {
		c := st.Clone()
		c.Dirty = false
		_, err := c.Acquire(req, now)
		if b := (*driver.Busy)(nil); !c.Dirty && errors.As(err, &b) {
			busy = b
		}
		return false
	})
	return busy, err
}

// busyErr is b as an error, nil if b is.
func busyErr(b *driver.Busy) error {
	if b == nil {
		return nil
	}
	return b
}

// byName groups the indexes of n items by their names, in first-seen
// order.
func byName(n int, name func(int) string) (names []string, idx [][]int) {
	at := map[string]int{}
	for i := range n {
		nm := name(i)
		j, ok := at[nm]
		if !ok {
			j = len(names)
			at[nm] = j
			names = append(names, nm)
			idx = append(idx, nil)
		}
		idx[j] = append(idx[j], i)
	}
	return names, idx
}

// Renew implements driver.Store: one Update of every name of the batch.
func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	out := make([]*driver.Grant, len(holds))
	if len(holds) == 0 {
		return out, nil
	}
	names, idx := byName(len(holds), func(i int) string { return holds[i].Name })
	renewed := make([]bool, len(holds))
	sts, err := s.update(ctx, names, func(j int, st *lockstate.State, now time.Time) {
		for _, i := range idx[j] {
			renewed[i] = st.Renew(holds[i].Name, holds[i].Owner, holds[i].TTL, now) != nil
		}
	})
	if err != nil {
		return nil, err
	}
	for j := range names {
		for _, i := range idx[j] {
			if renewed[i] {
				out[i] = s.grant(sts[j], holds[i].Owner)
			}
		}
	}
	return out, nil
}

// Release implements driver.Store: one Update of every name of the batch.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	s.forgetQueued(keys)
	names, idx := byName(len(keys), func(i int) string { return keys[i].Name })
	_, err := s.update(ctx, names, func(j int, st *lockstate.State, now time.Time) {
		for _, i := range idx[j] {
			out[i] = st.Release(keys[i].Name, keys[i].Owner, now)
		}
	})
	return out, err
}

func (s *Store) holder(h driver.Holder) driver.Holder {
	h.Created, h.Renewed, h.Expires = s.wall(h.Created), s.wall(h.Renewed), s.wall(h.Expires)
	return h
}

// List implements driver.Store: one Scan.
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	var out []driver.Holder
	err := s.r.Scan(ctx, f.Name, f.Prefix, func(name string, st *lockstate.State, now time.Time) bool {
		for _, h := range st.List(name, now) {
			if f.Owner == "" || h.Owner == f.Owner {
				out = append(out, s.holder(h))
			}
		}
		return true
	})
	return out, err
}

// purgeBatch is the most names Purge updates at once.
const purgeBatch = 100

// Purge implements driver.Store: a Scan for names with expired entries,
// then Updates of those, purgeBatch names at a time.
func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	var stale []string
	err := s.r.Scan(ctx, "", "", func(name string, st *lockstate.State, now time.Time) bool {
		for _, h := range st.List(name, now) {
			if h.Left <= 0 {
				stale = append(stale, name)
				break
			}
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	var out []driver.Holder
	for len(stale) > 0 {
		batch := stale[:min(len(stale), purgeBatch)]
		stale = stale[len(batch):]
		gone := make([][]driver.Holder, len(batch))
		if _, err := s.update(ctx, batch, func(j int, st *lockstate.State, now time.Time) {
			gone[j] = st.Expire(batch[j], now)
		}); err != nil {
			return out, err
		}
		for _, g := range gone {
			for _, h := range g {
				out = append(out, s.holder(h))
			}
		}
	}
	return out, nil
}

// Close ends the Store's sessions, then closes the records.
func (s *Store) Close() error {
	if s.ss != nil {
		s.ss.Close()
	}
	return s.r.Close()
}

// Watch implements driver.Waiter: a waiter is woken by this process's
// changes at once, by other processes' through the store's notifications
// (Notifier) or else by reading the name's record until the grant rules
// would grant the request: after the record moved (a grant, a release, a
// request queued or gone), 2ms later for the head of the queue, twice that
// for each place further back, then backing off to Options.Poll while it
// stays the same. A queue that moves is thus followed closely where it
// matters (the head learns of its hand-off within milliseconds), the
// waiters behind it cost reads by their distance from their turn, and a
// name held long costs a read per Options.Poll and waiter.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	s.mu.Lock()
	g := s.names[req.Name]
	if g == nil {
		g = &gen{ch: make(chan struct{})}
		s.names[req.Name] = g
		s.prune(time.Now())
	}
	g.waiters++
	w := &watch{s: s, g: g, ch: g.ch, req: *req}
	s.mu.Unlock()
	w.req.Queue = false
	if w.notifies() {
		ch, stop, err := w.notify(ctx)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.note, w.stopNote = ch, stop
	}
	return w, nil
}

// notifies reports whether the store can notify the watch.
func (w *watch) notifies() bool {
	_, n := w.s.r.(Notifier)
	_, rn := w.s.r.(RequestNotifier)
	return n || rn
}

// notify asks the store for the watch's next notification.
func (w *watch) notify(ctx context.Context) (<-chan struct{}, func(), error) {
	if n, ok := w.s.r.(RequestNotifier); ok {
		return n.NotifyRequest(ctx, &w.req)
	}
	return w.s.r.(Notifier).Notify(ctx, w.req.Name)
}

type watch struct {
	s        *Store
	g        *gen
	ch       chan struct{} // the local generation last waited for
	req      driver.Request
	note     <-chan struct{} // the store's notification, if it has them
	stopNote func()
	closed   bool
	seen     moved // the record as the last poll found it
}

// moved is what a polling waiter compares to tell that a name's record
// moved: renewals leave it as it is.
type moved struct {
	seq, ticket    uint64
	holders, queue int
}

const firstPoll = 2 * time.Millisecond

// Wait implements driver.Watch.
func (w *watch) Wait(ctx context.Context) error {
	if w.s.local || w.note != nil {
		select {
		case <-w.ch:
			w.next()
		case <-w.note: // nil for a local store: never ready
			w.renote(ctx)
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	d := firstPoll
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-w.ch:
			w.next()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		ok, m, place := w.grantable(ctx)
		if ok {
			return nil
		}
		if m != w.seen {
			w.seen, d = m, min(firstPoll*time.Duration(place+1), w.s.poll)
		} else {
			d = min(d*2, w.s.poll)
		}
		t.Reset(d)
	}
}

// next moves the watch to the name's current local generation.
func (w *watch) next() {
	w.s.mu.Lock()
	w.ch = w.g.ch
	w.s.mu.Unlock()
}

// renote asks the store for the next notification.
func (w *watch) renote(ctx context.Context) {
	w.stopNote()
	ch, stop, err := w.notify(ctx)
	if err != nil {
		// Without notifications the waiter falls back on baton's MaxPoll.
		w.note, w.stopNote = make(chan struct{}), func() {}
		return
	}
	w.note, w.stopNote = ch, stop
}

// grantable reads the name's record and reports whether the request would
// now be granted (or the read failed: the caller then asks, and finds out),
// how the record stands, and the request's place in the queue (0: its
// head, or not queued).
func (w *watch) grantable(ctx context.Context) (bool, moved, int) {
	ok, place := true, 0
	var m moved
	err := w.s.r.Scan(ctx, w.req.Name, "", func(_ string, st *lockstate.State, now time.Time) bool {
		m = moved{seq: st.Seq, ticket: st.Ticket, holders: len(st.Holders), queue: len(st.Queue)}
		place = max(slices.IndexFunc(st.Queue, func(e lockstate.Entry) bool { return e.Owner == w.req.Owner }), 0)
		_, err := st.Clone().Acquire(&w.req, now)
		ok = err == nil
		return false
	})
	return ok || err != nil, m, place
}

// Replay implements driver.Replayer: the time of this process's last
// change of a name is kept for keepChanges, and a polling watch reads the
// record before it waits; the store's notifications cannot be replayed.
func (w *watch) Replay(since time.Time) bool {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if !w.g.at.IsZero() && !w.g.at.Before(since) {
		w.ch = closedCh
	}
	return w.note == nil && time.Since(since) < keepChanges
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Close implements driver.Watch.
func (w *watch) Close() error {
	if w.stopNote != nil {
		w.stopNote()
	}
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.g.waiters--
	return nil
}
