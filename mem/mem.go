// Package mem is baton's in-memory store, for tests and for locks among
// the goroutines of one process. Its clock is the process's monotonic clock.
// It wakes waiters directly, in FIFO order.
//
// URL: mem:// opens a new, private store; mem://NAME opens the process-wide
// store called NAME, shared by everyone who opens that URL.
package mem

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

type backend struct {
	mu      sync.Mutex
	locks   map[string]*lock
	clients int
}

type lock struct {
	state   lockstate.State
	changed chan struct{} // closed and replaced when a hold or queue entry leaves
	at      time.Time     // when that last happened (or l was created)
}

var (
	namedMu sync.Mutex
	named   = map[string]*backend{}
)

// Store is one client of an in-memory backend.
type Store struct {
	b      *backend
	name   string // "" for a private backend
	closed bool
	mu     sync.Mutex
}

// New returns a new, private in-memory store.
func New() *Store { return &Store{b: newBackend()} }

// Open returns a client of the process-wide store called name, creating
// it if needed. The store lives as long as one of its clients is open.
func Open(name string) *Store {
	namedMu.Lock()
	defer namedMu.Unlock()
	b := named[name]
	if b == nil {
		b = newBackend()
		named[name] = b
	}
	b.clients++
	return &Store{b: b, name: name}
}

// OpenURL opens mem:// or mem://NAME.
func OpenURL(u *url.URL) (*Store, error) {
	name := u.Host + strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return New(), nil
	}
	return Open(name), nil
}

func newBackend() *backend { return &backend{locks: map[string]*lock{}} }

func (b *backend) get(name string) *lock {
	l := b.locks[name]
	if l == nil {
		l = &lock{changed: make(chan struct{}), at: time.Now()}
		b.locks[name] = l
	}
	return l
}

// commit wakes watchers of l if a hold or queue entry left. b.mu is held.
func (l *lock) commit() {
	l.state.Dirty = false
	if l.state.Freed {
		l.state.Freed = false
		close(l.changed)
		l.changed = make(chan struct{})
		l.at = time.Now()
	}
}

var start = time.Now()

// now is a monotonic instant: time.Now's wall clock may jump.
func now() time.Time { return start.Add(time.Since(start)) }

func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	l := s.b.get(req.Name)
	defer l.commit()
	return l.state.Acquire(req, now())
}

func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	out := make([]*driver.Grant, len(holds))
	t := now()
	for i, h := range holds {
		if l := s.b.locks[h.Name]; l != nil {
			out[i] = l.state.Renew(h.Name, h.Owner, h.TTL, t)
			l.commit()
		}
	}
	return out, nil
}

func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	out := make([]bool, len(keys))
	t := now()
	for i, k := range keys {
		if l := s.b.locks[k.Name]; l != nil {
			out[i] = l.state.Release(k.Name, k.Owner, t)
			l.commit()
		}
	}
	return out, nil
}

func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	var out []driver.Holder
	t := now()
	for name, l := range s.b.locks {
		if !strings.HasPrefix(name, f.Prefix) || (f.Name != "" && name != f.Name) {
			continue
		}
		for _, h := range l.state.List(name, t) {
			if f.Owner == "" || h.Owner == f.Owner {
				out = append(out, h)
			}
		}
	}
	return out, nil
}

func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	var out []driver.Holder
	t := now()
	for name, l := range s.b.locks {
		out = append(out, l.state.Expire(name, t)...)
		l.commit()
	}
	return out, nil
}

// Close closes this client; a named store is dropped with its last client.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.name == "" {
		s.closed = true
		return nil
	}
	s.closed = true
	namedMu.Lock()
	defer namedMu.Unlock()
	if s.b.clients--; s.b.clients == 0 {
		delete(named, s.name)
	}
	return nil
}

// Watch implements driver.Waiter: a waiter wakes on every change of its
// lock's state.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	s.b.mu.Lock()
	defer s.b.mu.Unlock()
	l := s.b.get(req.Name)
	return &watch{b: s.b, l: l, ch: l.changed}, nil
}

type watch struct {
	b  *backend
	l  *lock
	ch chan struct{} // the generation last waited for
}

func (w *watch) Wait(ctx context.Context) error {
	select {
	case <-w.ch:
		w.b.mu.Lock()
		w.ch = w.l.changed
		w.b.mu.Unlock()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Replay implements driver.Replayer: the lock remembers when an entry
// last left.
func (w *watch) Replay(since time.Time) bool {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	if !w.l.at.Before(since) {
		w.ch = closed
	}
	return true
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (w *watch) Close() error { return nil }
