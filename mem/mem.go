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

	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/records"
)

// backend is one in-memory store: the states, and the driver over them
// that all its clients share (so that they wake each other's waiters).
type backend struct {
	mu      sync.Mutex
	states  map[string]*lockstate.State
	clients int
	store   *records.Store
}

var (
	namedMu sync.Mutex
	named   = map[string]*backend{}
)

// Store is one client of an in-memory backend.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	*records.Store
	b      *backend
	name   string // "" for a private backend
	mu     sync.Mutex
	closed bool
}

// New returns a new, private in-memory store.
func New() *Store {
	b := newBackend()
	return &Store{Store: b.store, b: b}
}

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
	return &Store{Store: b.store, b: b, name: name}
}

// OpenURL opens mem:// or mem://NAME.
func OpenURL(u *url.URL) (*Store, error) {
	name := u.Host + strings.TrimPrefix(u.Path, "/")
	if name == "" {
		return New(), nil
	}
	return Open(name), nil
}

func newBackend() *backend {
	b := &backend{states: map[string]*lockstate.State{}}
	b.store = records.New(b, &records.Options{Local: true})
	return b
}

var start = time.Now()

// now is a monotonic instant: time.Now's wall clock may jump.
func now() time.Time { return start.Add(time.Since(start)) }

// Update implements records.Records.
func (b *backend) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	for i, n := range names {
		// A copy: the caller keeps the state it was given.
		st := &lockstate.State{}
		if old := b.states[n]; old != nil {
			st = old.Clone()
		}
		if err := fn(i, st, t); err != nil {
			return err
		}
		if st.Dirty {
			b.states[n] = st
		}
	}
	return nil
}

// Scan implements records.Records.
func (b *backend) Scan(ctx context.Context, name, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	t := now()
	for n, st := range b.states {
		if (name == "" || n == name) && strings.HasPrefix(n, prefix) && !fn(n, st.Clone(), t) {
			break
		}
	}
	return nil
}

// Close implements records.Records: the states stay with the backend.
func (b *backend) Close() error { return nil }

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
