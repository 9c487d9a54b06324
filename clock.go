package baton

import (
	"context"
	"time"
)

// clock is the core's source of time: lease deadlines, keepalive's renew
// times, waits and backoff all read it, so that tests can drive them with a
// fake one (client-go's leaderelection does the same). Clients use
// realClock; stores keep the real clock of the process.
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) clockTimer
	// AfterFunc calls f once d has passed, in a goroutine of its own
	// (realClock) or of whoever moved the clock (a test's fake).
	AfterFunc(d time.Duration, f func()) clockTimer
	NewTicker(d time.Duration) clockTicker
	// WithDeadline is context.WithDeadline on this clock.
	WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc)
}

// clockTimer is a *time.Timer; C is nil for one made by AfterFunc. Stop and
// Reset discard a value not yet received from C (Go 1.23 timers).
type clockTimer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// clockTicker is a *time.Ticker.
type clockTicker interface {
	C() <-chan time.Time
	Stop()
}

// realClock is package time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) clockTimer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) clockTimer {
	return realTimer{time.AfterFunc(d, f)}
}

func (realClock) NewTicker(d time.Duration) clockTicker { return realTicker{time.NewTicker(d)} }

func (realClock) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(parent, d)
}

type realTimer struct{ *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.Timer.C }

type realTicker struct{ *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.Ticker.C }

// withTimeout is context.WithTimeout on the client's clock.
func (c *Client) withTimeout(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return c.clock.WithDeadline(parent, c.clock.Now().Add(d))
}

// sleep waits for d on the client's clock, and reports false if ctx ended
// or the client closed first.
func (c *Client) sleep(ctx context.Context, d time.Duration) bool {
	t := c.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	return false
}
