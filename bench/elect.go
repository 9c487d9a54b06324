package main

// The failover workload (-failover K): three candidates of one leader
// election with leases of -lease; K times, the leader crashes (it stops
// renewing and releases nothing, as a killed process would) and the time
// until another candidate leads, by its own view, is measured; and, where
// the target counts its calls to the server, the calls each candidate
// makes per second while a leader leads (heartbeats and followers' checks).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// Elector is one candidate of a leader election.
type Elector interface {
	// Leading reports whether the candidate leads now, by its own view.
	Leading() bool
	// Crash stops the candidate as a crash would: no more calls to the
	// store, nothing released.
	Crash()
	Close() error
}

type failoverResult struct {
	p50, max    time.Duration
	callsPerSec float64 // per candidate, while a leader leads; < 0: not counted
	samples     int
}

func (r failoverResult) row(name string) string {
	calls := "—"
	if r.callsPerSec >= 0 {
		calls = fmt.Sprintf("%.1f", r.callsPerSec)
	}
	return fmt.Sprintf("| %s | %.0f/%.0f | %s | %d |", name, ms(r.p50), ms(r.max), calls, r.samples)
}

func measureFailover(t Target, k int, lease time.Duration) (failoverResult, error) {
	ctx := context.Background()
	name := fmt.Sprintf("bench-elect-%d", time.Now().UnixNano())
	var es []Elector
	defer func() {
		for _, e := range es {
			e.Close()
		}
	}()
	for range 3 {
		e, err := t.NewElector(ctx, name, lease)
		if err != nil {
			return failoverResult{}, err
		}
		es = append(es, e)
	}
	leader := func(timeout time.Duration, not Elector) (int, error) {
		end := time.Now().Add(timeout)
		for time.Now().Before(end) {
			n, at := 0, -1
			for i, e := range es {
				if e != not && e.Leading() {
					n, at = n+1, i
				}
			}
			if n > 1 {
				return -1, errors.New("TWO LEADERS at once")
			}
			if n == 1 {
				return at, nil
			}
			time.Sleep(2 * time.Millisecond)
		}
		return -1, fmt.Errorf("no leader within %v", timeout)
	}
	var res failoverResult
	var took []time.Duration
	var calls, callTime float64
	for range k {
		i, err := leader(10*lease+30*time.Second, nil)
		if err != nil {
			return res, err
		}
		if t.Calls != nil {
			c0, t0 := t.Calls(), time.Now()
			time.Sleep(2 * lease)
			calls += float64(t.Calls() - c0)
			callTime += time.Since(t0).Seconds() * float64(len(es))
		}
		dead := es[i]
		start := time.Now()
		dead.Crash()
		if _, err := leader(10*lease+30*time.Second, dead); err != nil {
			return res, err
		}
		took = append(took, time.Since(start))
		dead.Close()
		if es[i], err = t.NewElector(ctx, name, lease); err != nil {
			return res, err
		}
	}
	res.p50, res.max, res.samples = pct(took, 50), slices.Max(took), len(took)
	res.callsPerSec = -1
	if callTime > 0 {
		res.callsPerSec = calls / callTime
	}
	return res, nil
}

func medianFailover(rs []failoverResult) failoverResult {
	pick := func(f func(failoverResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return failoverResult{
		p50:         time.Duration(pick(func(r failoverResult) float64 { return float64(r.p50) })),
		max:         time.Duration(pick(func(r failoverResult) float64 { return float64(r.max) })),
		callsPerSec: pick(func(r failoverResult) float64 { return r.callsPerSec }),
		samples:     rs[0].samples * len(rs),
	}
}

// batonElector is a candidate of baton's Election.Run over a store that
// a crash cuts off.
func batonElector(ctx context.Context, store driver.Store, name string, lease time.Duration) (Elector, error) {
	cut := &crashable{Store: store}
	c, err := baton.New(cut, &baton.Options{TTL: lease})
	if err != nil {
		return nil, err
	}
	e, err := c.Election(name, nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for rctx.Err() == nil {
			_ = e.Run(rctx, func(ctx context.Context, _ *baton.Lease) error {
				<-ctx.Done()
				return nil
			})
		}
	}()
	return &batonCandidate{c: c, e: e, cut: cut, cancel: cancel, done: done}, nil
}

type batonCandidate struct {
	c      *baton.Client
	e      *baton.Election
	cut    *crashable
	cancel context.CancelFunc
	done   chan struct{}
}

func (b *batonCandidate) Leading() bool { ok, _ := b.e.IsLeader(); return ok }
func (b *batonCandidate) Crash()        { b.cut.crash() }
func (b *batonCandidate) Close() error {
	b.cut.crash() // a crashed candidate releases nothing, even now
	b.cancel()
	<-b.done
	return b.c.Close()
}

// crashable is a store that fails every call after crash.
type crashable struct {
	driver.Store
	mu      sync.Mutex
	crashed bool
}

var errCrashed = errors.New("bench: candidate crashed")

func (c *crashable) crash() {
	c.mu.Lock()
	c.crashed = true
	c.mu.Unlock()
}

func (c *crashable) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return errCrashed
	}
	return nil
}

func (c *crashable) Acquire(ctx context.Context, r *driver.Request) (*driver.Grant, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.Store.Acquire(ctx, r)
}

func (c *crashable) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.Store.Renew(ctx, hs)
}

func (c *crashable) Release(ctx context.Context, ks []driver.Key) ([]bool, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.Store.Release(ctx, ks)
}

func (c *crashable) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if err := c.err(); err != nil {
		return nil, err
	}
	return c.Store.List(ctx, f)
}

// Watch keeps the store's wake-ups (when it has them) but fails once
// crashed.
func (c *crashable) Watch(ctx context.Context, r *driver.Request) (driver.Watch, error) {
	w, ok := c.Store.(driver.Waiter)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return w.Watch(ctx, r)
}
