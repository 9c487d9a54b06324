package baton

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/driver"
)

// One goroutine per Client renews every lease that needs it. It runs only
// while there are such leases, and renews together all that are due or
// nearly due, so that a process holding many locks makes one call per round
// where the store takes a batch.

func (c *Client) startKeepalive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.kaRunning {
		select {
		case c.kaWake <- struct{}{}:
		default:
		}
		return
	}
	c.kaRunning = true
	c.wg.Add(1)
	go c.keepalive()
}

func (c *Client) keepalive() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		batch, wait, ok := c.due()
		if !ok {
			return
		}
		if len(batch) > 0 {
			c.renewBatch(batch)
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-c.kaWake:
		case <-c.ctx.Done():
		}
	}
}

// due returns the leases to renew now, or how long to sleep; ok is false
// when the goroutine should exit (nothing to keep alive, or closed).
func (c *Client) due() (batch []*Lease, wait time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	next := time.Time{}
	for _, l := range c.leases {
		if !l.keepAlive || l.session != nil {
			continue
		}
		l.mu.Lock()
		at, ttl, retrying := l.renewAt, l.ttl, l.retrying
		l.mu.Unlock()
		// Renew early anything due within a sixth of its TTL, so that
		// leases taken at different times fall into the same rounds; but
		// a lease whose renewal failed waits for its retry time.
		early := ttl / 6
		if retrying {
			early = 0
		}
		if !at.After(now.Add(early)) {
			batch = append(batch, l)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if c.closed || (len(batch) == 0 && next.IsZero()) {
		c.kaRunning = false
		return nil, 0, false
	}
	return batch, next.Sub(now), true
}

func (c *Client) renewBatch(batch []*Lease) {
	holds := make([]driver.Hold, len(batch))
	left := make([]time.Duration, len(batch)) // each lease's time left when the renewal is sent
	first := time.Time{}                      // earliest deadline: no point waiting for the store past it
	for i, l := range batch {
		l.mu.Lock()
		holds[i] = driver.Hold{Name: l.key.Name, Owner: l.key.Owner, TTL: l.ttl}
		left[i] = time.Until(l.deadline)
		if first.IsZero() || l.deadline.Before(first) {
			first = l.deadline
		}
		l.mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(c.ctx, first)
	defer cancel()
	ctx, end := c.observe(ctx, Op{Kind: "renew", Name: holds[0].Name, Count: len(holds)})
	sent := time.Now()
	done := c.call(ctx, "renew", holds[0].Name)
	gs, err := c.store.Renew(ctx, holds)
	done(err)
	end(OpResult{Err: err})
	for i, l := range batch {
		switch {
		case err != nil:
			// Try again soon; the lease's own timer ends it at its deadline.
			l.mu.Lock()
			l.renewAt, l.retrying = time.Now().Add(min(l.ttl/10, time.Second)), true
			l.mu.Unlock()
			c.emit(Event{Kind: EventRenewFailed, Name: l.key.Name, Owner: l.key.Owner, Token: l.token, Err: err})
		case gs[i] == nil:
			l.end(ErrLeaseLost, false)
		default:
			l.renewed(gs[i], sent, holds[i].TTL)
			c.emit(Event{Kind: EventRenewed, Name: l.key.Name, Owner: l.key.Owner, Token: l.token, Left: left[i]})
		}
	}
}

// watchSession ends every lease of a store session when the session ends:
// one goroutine per session (stores share one among all their holds),
// which stops when the session's last lease ends.
func (c *Client) watchSession(s driver.Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.sessions[s]; w != nil {
		w.n++
		return
	}
	if c.closed {
		return
	}
	w := &sessionWatch{n: 1, stop: make(chan struct{})}
	c.sessions[s] = w
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		select {
		case <-s.Done():
		case <-w.stop:
			return
		case <-c.ctx.Done():
			return
		}
		err := fmt.Errorf("%w: store session ended: %w", ErrLeaseLost, s.Err())
		c.mu.Lock()
		var ls []*Lease
		for _, l := range c.leases {
			if l.session == s {
				ls = append(ls, l)
			}
		}
		c.mu.Unlock()
		for _, l := range ls {
			l.end(err, false)
		}
	}()
}

type sessionWatch struct {
	n    int
	stop chan struct{}
}

func (c *Client) unwatchSession(s driver.Session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.sessions[s]; w != nil {
		if w.n--; w.n == 0 {
			close(w.stop)
			delete(c.sessions, s)
		}
	}
}
