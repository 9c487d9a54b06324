package drivertest

import (
	"context"
	"errors"
	"sync"

	"github.com/baton-go/baton/driver"
)

// ErrPartitioned is returned by a Faulty store while it is cut off.
var ErrPartitioned = errors.New("drivertest: client is partitioned from the store")

// Partitioner is implemented, for tests, by stores that talk to the server
// on their own (session keepalives): SetPartitioned(true) must cut that
// traffic too, as a network partition would, until SetPartitioned(false).
type Partitioner interface{ SetPartitioned(bool) }

// Crasher is implemented, for tests, by stores whose holds live in a store
// session: Crash must drop the session without any clean-up (no release,
// no session close), as a killed process would, so that the server ends it
// when its timeout runs out. The store is unusable afterwards.
type Crasher interface{ Crash() }

// Faulty wraps a store so that a test can cut one client off from it, as a
// network partition or a dead store would: while down, every call fails at
// once with ErrPartitioned, nothing reaches the store, and a store that is
// a Partitioner has its own traffic cut too.
type Faulty struct {
	driver.Store
	mu   sync.Mutex
	down bool
}

// NewFaulty wraps s.
func NewFaulty(s driver.Store) *Faulty { return &Faulty{Store: s} }

// SetDown cuts the client off (true) or reconnects it (false).
func (f *Faulty) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
	if p, ok := f.Store.(Partitioner); ok {
		p.SetPartitioned(down)
	}
}

func (f *Faulty) check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return ErrPartitioned
	}
	return nil
}

func (f *Faulty) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Acquire(ctx, req)
}

func (f *Faulty) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Renew(ctx, holds)
}

func (f *Faulty) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Release(ctx, keys)
}

func (f *Faulty) List(ctx context.Context, flt *driver.Filter) ([]driver.Holder, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.List(ctx, flt)
}

func (f *Faulty) Purge(ctx context.Context) ([]driver.Holder, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	return f.Store.Purge(ctx)
}

// Watch passes through to the wrapped store's Waiter, if it has one.
func (f *Faulty) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	w, ok := f.Store.(driver.Waiter)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return w.Watch(ctx, req)
}
