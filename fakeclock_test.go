package baton

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/driver"
)

// FakeClock is a clock for tests that moves only when Advance moves it.
// Advance fires the timers that come due in order (by time, then by when
// they were set), and after each waits until the clients made with
// NewWithClock are done with it: timing tests then run in microseconds and
// do the same thing every run. Stores keep the real clock.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	seq     uint64
	pending map[*fakeTimer]struct{}
	changed chan struct{} // closed and replaced when the pending timers change
	idle    []func() bool // what Advance waits for after each timer it fires
}

// NewFakeClock returns a fake clock at an arbitrary fixed time.
func NewFakeClock() *FakeClock {
	return &FakeClock{
		now:     time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		pending: map[*fakeTimer]struct{}{},
		changed: make(chan struct{}),
	}
}

// NewWithClock is New on the fake clock k.
func NewWithClock(store driver.Store, opts *Options, k *FakeClock) (*Client, error) {
	c, err := newClient(store, opts, k)
	if err == nil {
		k.mu.Lock()
		k.idle = append(k.idle, func() bool { return c.keepaliveIdle(k) })
		k.mu.Unlock()
	}
	return c, err
}

// keepaliveIdle reports whether c's keepalive goroutine is not running
// (the timer waits for the first renew time).
func (c *Client) keepaliveIdle(*FakeClock) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.kaRunning
}

// fakeTimer is a timer (ch set), an AfterFunc (f set) or a ticker (period
// set too).
type fakeTimer struct {
	k      *FakeClock
	at     time.Time
	seq    uint64
	period time.Duration
	ch     chan time.Time
	f      func()
}

func (k *FakeClock) Now() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.now
}

func (k *FakeClock) NewTimer(d time.Duration) clockTimer {
	t := &fakeTimer{k: k, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// AfterFunc calls f in the goroutine of the Advance that reaches its time;
// with d <= 0, in the next Advance (even by 0).
func (k *FakeClock) AfterFunc(d time.Duration, f func()) clockTimer {
	t := &fakeTimer{k: k, f: f}
	t.Reset(d)
	return t
}

func (k *FakeClock) NewTicker(d time.Duration) clockTicker {
	if d <= 0 {
		panic("fake clock: non-positive ticker period")
	}
	t := &fakeTimer{k: k, ch: make(chan time.Time, 1), period: d}
	t.Reset(d)
	return fakeTicker{t}
}

// WithDeadline cancels the context with cause context.DeadlineExceeded at
// d; its Err is then context.Canceled, and it has no Deadline.
func (k *FakeClock) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	left := d.Sub(k.Now())
	if left <= 0 {
		cancel(context.DeadlineExceeded)
		return ctx, func() {}
	}
	t := k.AfterFunc(left, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	k := t.k
	k.mu.Lock()
	defer k.mu.Unlock()
	_, was := k.pending[t]
	k.removeLocked(t)
	t.drain()
	k.notifyLocked()
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	k := t.k
	k.mu.Lock()
	defer k.mu.Unlock()
	_, was := k.pending[t]
	t.drain()
	k.armLocked(t, k.now.Add(d))
	return was
}

// drain discards a value not yet received, as Go 1.23 timers do on Stop
// and Reset.
func (t *fakeTimer) drain() {
	if t.ch != nil {
		select {
		case <-t.ch:
		default:
		}
	}
}

type fakeTicker struct{ *fakeTimer }

func (t fakeTicker) Stop() { t.fakeTimer.Stop() }

// armLocked sets t to fire at at; a timer with a channel that is already
// due fires at once, as a real one would.
func (k *FakeClock) armLocked(t *fakeTimer, at time.Time) {
	defer k.notifyLocked()
	if t.ch != nil && t.period == 0 && !at.After(k.now) {
		k.removeLocked(t)
		t.ch <- k.now // drained just before
		return
	}
	k.seq++
	t.at, t.seq = at, k.seq
	k.pending[t] = struct{}{}
}

func (k *FakeClock) removeLocked(t *fakeTimer) {
	delete(k.pending, t)
}

func (k *FakeClock) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Advance moves the clock d forward, firing the timers that come due on the
// way, one at a time.
func (k *FakeClock) Advance(d time.Duration) {
	k.Settle()
	k.mu.Lock()
	end := k.now.Add(d)
	for {
		var t *fakeTimer
		for p := range k.pending {
			if t == nil || p.at.Before(t.at) || p.at.Equal(t.at) && p.seq < t.seq {
				t = p
			}
		}
		if t == nil || t.at.After(end) {
			break
		}
		if t.at.After(k.now) {
			k.now = t.at
		}
		if t.period > 0 {
			k.armLocked(t, k.now.Add(t.period))
		} else {
			k.removeLocked(t)
			k.notifyLocked()
		}
		if t.ch != nil {
			select {
			case t.ch <- k.now:
			default: // a ticker's tick nobody took
			}
		}
		k.mu.Unlock()
		if t.f != nil {
			t.f()
		}
		k.Settle()
		k.mu.Lock()
	}
	if end.After(k.now) {
		k.now = end
	}
	k.mu.Unlock()
}

// AdvanceToNext moves the clock to the first pending timer and fires the
// timers due then, not those they set: a test that steps a goroutine
// through its waits one at a time. It returns how far the clock moved.
func (k *FakeClock) AdvanceToNext() time.Duration {
	k.Settle()
	k.mu.Lock()
	var next *fakeTimer
	for t := range k.pending {
		if next == nil || t.at.Before(next.at) {
			next = t
		}
	}
	if next == nil {
		k.mu.Unlock()
		panic("fake clock: no pending timer")
	}
	d := max(next.at.Sub(k.now), 0)
	k.mu.Unlock()
	k.Advance(d)
	return d
}

// Settle waits until the clients on k are done with the timers fired so
// far and with what the test did since (keepalive sleeps until its next
// renew time, or has exited).
func (k *FakeClock) Settle() {
	k.waitFor("clients to settle", func() bool {
		k.mu.Lock()
		idle := k.idle
		k.mu.Unlock()
		for _, f := range idle {
			if !f() {
				return false
			}
		}
		return true
	})
}

// BlockUntil waits until exactly n timers, AfterFuncs and tickers are
// pending: until a goroutine waits on k, say.
func (k *FakeClock) BlockUntil(n int) {
	k.waitFor(fmt.Sprintf("%d pending timers", n), func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		return len(k.pending) == n
	})
}

// waitFor waits, in real time, until cond holds: it is checked at each
// change of the pending timers and every 50µs besides (cond may depend on
// other state). It panics after 10s: a test that would hang.
func (k *FakeClock) waitFor(what string, cond func() bool) {
	limit := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Microsecond)
	defer tick.Stop()
	for {
		k.mu.Lock()
		ch := k.changed
		k.mu.Unlock()
		if cond() {
			return
		}
		if time.Now().After(limit) {
			panic("fake clock: waited 10s for " + what)
		}
		select {
		case <-ch:
		case <-tick.C:
		}
	}
}

// Pending is how many timers, AfterFuncs and tickers are pending.
func (k *FakeClock) Pending() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pending)
}
