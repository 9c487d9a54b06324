package main

// Two workloads of scale, off unless asked for:
//
//	many-names (-names N): -names-clients clients, each with its own
//	    connection, take and release a random one of N names, over and over,
//	    for -d; throughput, and p50/p99 of one acquire+release.
//	hold-many (-hold N): one client takes N locks of distinct names, with
//	    -hold-workers goroutines; the acquire rate of the first and of the
//	    last tenth of them, then the CPU time this process spends over
//	    -hold-window while it holds them all (user+system, from getrusage:
//	    it includes the store's own work for an in-process store such as
//	    mem://), then the time to release them all: Close for a Locker that
//	    releases what it holds on Close (a Keeper: baton's client), one
//	    release per lock for others. Peers without keepalive let their
//	    locks expire during the window.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton"
)

// Keeper is implemented by a Locker that keeps its locks alive itself and
// releases all it holds on Close (baton's client). hold-many times its
// Close, and reports the renewals it made while holding.
type Keeper interface {
	Locker
	// Renewals reports the renewal calls made to the store so far, the
	// holds they carried, and the locks lost.
	Renewals() (calls, holds, lost int64)
}

// renewCounter is a baton.Observer that counts keepalive's renewals and the
// leases lost.
type renewCounter struct {
	calls, holds, lost atomic.Int64
}

func (r *renewCounter) Op(ctx context.Context, op baton.Op) (context.Context, func(baton.OpResult)) {
	if op.Kind == "renew" {
		r.calls.Add(1)
		r.holds.Add(int64(op.Count))
	}
	return ctx, ignoreResult
}

func (r *renewCounter) Call(context.Context, string, string) func(error) { return ignoreErr }

func (r *renewCounter) Event(e baton.Event) {
	if e.Kind == baton.EventLost || e.Kind == baton.EventExpired {
		r.lost.Add(1)
	}
}

func ignoreResult(baton.OpResult) {}
func ignoreErr(error)             {}

// namesResult is one measurement of many-names.
type namesResult struct {
	opsPerSec float64
	p50, p99  time.Duration
}

const namesHeader = "| target | ops/s | acquire+release p50/p99 µs |\n|---|---|---|"

func (r namesResult) row(name string) string {
	return fmt.Sprintf("| %s | %.0f | %.0f/%.0f |", name, r.opsPerSec, us(r.p50), us(r.p99))
}

func measureNames(t Target, names, clients int, dur time.Duration) (namesResult, error) {
	ctx := context.Background()
	run := fmt.Sprintf("bench-names-%d", time.Now().UnixNano())
	ls := make([]Locker, clients)
	defer func() {
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}()
	for i := range ls {
		var err error
		if ls[i], err = t.New(ctx); err != nil {
			return namesResult{}, err
		}
	}
	lats := make([][]time.Duration, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(dur)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				name := run + "/" + strconv.Itoa(rand.IntN(names))
				t0 := time.Now()
				rel, err := l.Lock(ctx, name)
				if err == nil {
					err = rel()
				}
				if err != nil {
					errs[i] = err
					return
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	var all []time.Duration
	for i := range ls {
		if errs[i] != nil {
			return namesResult{}, errs[i]
		}
		all = append(all, lats[i]...)
	}
	if len(all) == 0 {
		return namesResult{}, fmt.Errorf("no lock taken in %v", dur)
	}
	return namesResult{opsPerSec: float64(len(all)) / took.Seconds(), p50: pct(all, 50), p99: pct(all, 99)}, nil
}

// holdResult is one measurement of hold-many.
type holdResult struct {
	firstRate, lastRate float64 // acquisitions per second in the first and the last tenth
	slowdown            float64 // the last tenth's time over the first's
	rate                float64 // over all
	cpu                 float64 // CPU time over the window, in % of one core; < 0: unknown
	renewCalls          float64 // during the window; < 0: not a Keeper
	renewHolds          float64
	lost                float64       // locks lost before Close; < 0: not a Keeper
	release             time.Duration // Close, or one release per lock
}

const holdHeader = "| target | acquire/s all (first 10% → last 10%) | last/first time | CPU holding, % of a core | renew calls (holds/call) | lost | release all s |\n|---|---|---|---|---|---|---|"

func (r holdResult) row(name string) string {
	cpu, renews, lost := "—", "—", "—"
	if r.cpu >= 0 {
		cpu = fmt.Sprintf("%.2f", r.cpu)
	}
	if r.lost >= 0 {
		lost = fmt.Sprintf("%.0f", r.lost)
	}
	if r.renewCalls >= 0 {
		per := 0.0
		if r.renewCalls > 0 {
			per = r.renewHolds / r.renewCalls
		}
		renews = fmt.Sprintf("%.0f (%.0f)", r.renewCalls, per)
	}
	return fmt.Sprintf("| %s | %.0f (%.0f → %.0f) | %.2f | %s | %s | %s | %.2f |", name,
		r.rate, r.firstRate, r.lastRate, r.slowdown, cpu, renews, lost, r.release.Seconds())
}

func measureHold(t Target, n, workers int, window time.Duration) (holdResult, error) {
	ctx := context.Background()
	run := fmt.Sprintf("bench-hold-%d", time.Now().UnixNano())
	l, err := t.New(ctx)
	if err != nil {
		return holdResult{}, err
	}
	closed := false
	defer func() {
		if !closed {
			l.Close()
		}
	}()
	rels := make([]func() error, n)
	marks := make([]time.Time, 11) // marks[k]: when k tenths were held
	var next, done atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	marks[0] = time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				rel, err := l.Lock(ctx, run+"/"+strconv.Itoa(i))
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					next.Store(int64(n)) // stop the others
					return
				}
				rels[i] = rel
				if k := int(done.Add(1)); k*10/n > (k-1)*10/n {
					marks[k*10/n] = time.Now() // the k-th lock completed a tenth (n >= 10)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return holdResult{}, firstErr
	}
	first, last := marks[1].Sub(marks[0]), marks[10].Sub(marks[9])
	r := holdResult{
		firstRate:  float64((n+9)/10) / first.Seconds(),
		lastRate:   float64(n-(n*9+9)/10) / last.Seconds(),
		slowdown:   last.Seconds() / first.Seconds(),
		rate:       float64(n) / marks[10].Sub(marks[0]).Seconds(),
		renewCalls: -1,
		lost:       -1,
	}

	k, keeper := l.(Keeper)
	var c0, h0 int64
	if keeper {
		c0, h0, _ = k.Renewals()
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	time.Sleep(window)
	cpu1, took := cpuTime(), time.Since(t0)
	r.cpu = -1
	if cpu0 >= 0 && cpu1 >= 0 {
		r.cpu = 100 * (cpu1 - cpu0).Seconds() / took.Seconds()
	}
	if keeper {
		c1, h1, lost := k.Renewals()
		r.renewCalls, r.renewHolds, r.lost = float64(c1-c0), float64(h1-h0), float64(lost)
	}

	start := time.Now()
	if !keeper {
		// One release per lock, by the same workers.
		var next atomic.Int64
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
					if err := rels[i](); err != nil {
						errOnce.Do(func() { firstErr = err })
					}
				}
			}()
		}
		wg.Wait()
	}
	closed = true
	if err := l.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	r.release = time.Since(start)
	return r, firstErr
}

// medianOf is the median of f over rs.
func medianOf[T any](rs []T, f func(T) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func medianNames(rs []namesResult) namesResult {
	return namesResult{
		opsPerSec: medianOf(rs, func(r namesResult) float64 { return r.opsPerSec }),
		p50:       time.Duration(medianOf(rs, func(r namesResult) float64 { return float64(r.p50) })),
		p99:       time.Duration(medianOf(rs, func(r namesResult) float64 { return float64(r.p99) })),
	}
}

func medianHold(rs []holdResult) holdResult {
	return holdResult{
		firstRate:  medianOf(rs, func(r holdResult) float64 { return r.firstRate }),
		lastRate:   medianOf(rs, func(r holdResult) float64 { return r.lastRate }),
		slowdown:   medianOf(rs, func(r holdResult) float64 { return r.slowdown }),
		rate:       medianOf(rs, func(r holdResult) float64 { return r.rate }),
		cpu:        medianOf(rs, func(r holdResult) float64 { return r.cpu }),
		renewCalls: medianOf(rs, func(r holdResult) float64 { return r.renewCalls }),
		renewHolds: medianOf(rs, func(r holdResult) float64 { return r.renewHolds }),
		lost:       medianOf(rs, func(r holdResult) float64 { return r.lost }),
		release:    time.Duration(medianOf(rs, func(r holdResult) float64 { return float64(r.release) })),
	}
}
