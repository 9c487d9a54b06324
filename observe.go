package baton

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Observer sees what a Client does, for metrics and traces (the module
// github.com/baton-go/baton/otel implements it with OpenTelemetry). Its
// methods are called synchronously: they must be quick and safe for
// concurrent use.
type Observer interface {
	// Op is called when an operation begins: Lock, TryLock, Do, a lease's
	// Release, or a renewal (by keepalive or Lease.Renew). The context it
	// returns (a span's, say) is the one the operation's store calls get;
	// end is called once, with the result, when the operation is over.
	Op(ctx context.Context, op Op) (_ context.Context, end func(OpResult))
	// Call is called when one call to the store begins, with the context
	// of the operation it belongs to; end is called with its error.
	Call(ctx context.Context, call string, name string) (end func(error))
	// Event reports an event of a lease or of a waiting request: the
	// same events as Options.OnEvent.
	Event(Event)
}

// Op describes an operation, for an Observer.
type Op struct {
	Kind  string // "lock", "trylock", "do", "release" or "renew"
	Name  string // the lock's name; for a renewal of several leases, the first's
	Count int    // the leases a renewal covers; 1 otherwise
	Mode  Mode
	Limit int
}

// OpResult is the outcome of an operation, for an Observer.
type OpResult struct {
	Err   error  // nil when it succeeded
	Token uint64 // the fencing token, when a lock was granted
	// Waited is how long a Lock waited, from its first refused attempt
	// to the grant or the end of the wait; zero if it did not wait.
	Waited time.Duration
}

// observe starts op with the client's Observer, if any.
func (c *Client) observe(ctx context.Context, op Op) (context.Context, func(OpResult)) {
	if c.opts.Observer == nil {
		return ctx, func(OpResult) {}
	}
	if op.Count == 0 {
		op.Count = 1
	}
	return c.opts.Observer.Op(ctx, op)
}

// call starts one store call with the client's Observer, if any.
func (c *Client) call(ctx context.Context, call, name string) func(error) {
	if c.opts.Observer == nil {
		return func(error) {}
	}
	return c.opts.Observer.Call(ctx, call, name)
}

// emit reports e to Options.OnEvent and the Observer, and logs what a
// maintainer should know of (keepalive logs its failed renewals itself, once
// per call rather than per lease).
func (c *Client) emit(e Event) {
	if isAskName(e.Name) {
		return // an ask's own hold (see Client.Ask) is no lease of the user's
	}
	switch e.Kind {
	case EventLost:
		c.log.Error("baton: lease lost", "lock", e.Name, "token", e.Token, "err", e.Err, "held", e.Held)
	case EventExpired:
		c.log.Info("baton: lease expired", "lock", e.Name, "token", e.Token, "held", e.Held)
	}
	c.report(e)
}

// reports says whether report has anywhere to report to: an event that
// logs nothing need not be built otherwise.
func (c *Client) reports() bool { return c.opts.Observer != nil || c.opts.OnEvent != nil }

// report reports e to Options.OnEvent and the Observer, without logging.
func (c *Client) report(e Event) {
	if isAskName(e.Name) {
		return
	}
	if c.opts.Observer != nil {
		c.opts.Observer.Event(e)
	}
	if c.opts.OnEvent != nil {
		c.opts.OnEvent(e)
	}
}

// discardLogger is the logger of a client without Options.Logger.
var discardLogger = slog.New(slog.DiscardHandler)

// Health reports whether keepalive renews the client's leases in good
// time: nil, or an error naming a lease whose last renewal was sent with
// less than min of its TTL left, or whose renewal is overdue with that
// little left now. Keepalive renews with two thirds of the TTL left, so a
// third is a good min; so does a store session that keeps leases alive
// (SQLite's), whose leases are judged by what the session has left. A
// readiness probe built on it takes a process out of service before its
// locks are lost, not after.
func (c *Client) Health(min float64) error {
	c.mu.Lock()
	ls := make([]*Lease, 0, len(c.leases))
	for _, l := range c.leases {
		ls = append(ls, l)
	}
	c.mu.Unlock()
	now := c.clock.Now()
	for _, l := range ls {
		if !l.keepAlive || l.session != nil && !l.ownTTL {
			continue
		}
		l.mu.Lock()
		left, ttl := l.lastLeft, l.ttl
		if l.retrying || now.After(l.renewAt) { // failing or overdue: judge by what is left now
			left = l.deadline.Sub(now)
		}
		if l.session != nil { // kept alive by the store's session, renewed every third of its TTL
			left = l.deadlineLocked().Sub(now)
		}
		l.mu.Unlock()
		if left >= 0 && float64(left) < min*float64(ttl) {
			return fmt.Errorf("baton: lease of lock %q renewed with only %v of its %v left", l.info.Name, left.Round(time.Millisecond), ttl)
		}
	}
	return nil
}
