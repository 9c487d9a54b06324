package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The server's clock is read from the time it stamps on a message it
// stores: a Put of clockKey, sent at local time sent and acknowledged at
// recv, was stamped at some instant between the two. From that sample and
// the local monotonic clock, with the two clocks' rates differing by at
// most drift, the server's time now lies between
//
//	low  = stamp + (now-recv)·(1-drift)
//	high = stamp + (now-sent)·(1+drift)
//
// Decisions judge expiry by low, never before the server's time; the times
// they write are moved to high (see fix), never before the holder's own
// deadline. A sample is taken again after refresh, so that the interval
// stays about one round trip wide.
const (
	refresh = 2 * time.Second
	drift   = 1e-3
)

type clock struct {
	turn chan struct{} // one sample at a time (capacity 1)

	mu         sync.Mutex // guards the sample
	ok         bool
	stamp      time.Time // the server's time, wall clock
	sent, recv time.Time // local, monotonic
}

func (c *clock) lock(ctx context.Context) error {
	select {
	case c.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bounds returns a lower and an upper bound of the server's time now,
// sampling it again first if the last sample is older than refresh.
func (c *clock) bounds(ctx context.Context, kv jetstream.KeyValue) (low, high time.Time, err error) {
	if err := c.lock(ctx); err != nil {
		return low, high, err
	}
	defer func() { <-c.turn }()
	c.mu.Lock()
	stale := !c.ok || time.Since(c.recv) > refresh
	c.mu.Unlock()
	if stale {
		if err := c.sample(ctx, kv); err != nil {
			return low, high, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	low = c.stamp.Add(scale(now.Sub(c.recv), 1-drift))
	high = c.stamp.Add(scale(now.Sub(c.sent), 1+drift))
	return low, high, nil
}

// low returns a lower bound of the server's time now from the last sample,
// however old (zero before the first).
func (c *clock) low() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return time.Time{}
	}
	return c.stamp.Add(scale(time.Since(c.recv), 1-drift))
}

func scale(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// sample writes clockKey and reads the time the server stamped on it. The
// bucket keeps one revision per key: when another client's sample has
// replaced this one before it was read, it samples again.
func (c *clock) sample(ctx context.Context, kv jetstream.KeyValue) error {
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		rev, err := kv.Put(ctx, clockKey, nil)
		recv := time.Now()
		if err != nil {
			return fmt.Errorf("nats: reading the server's clock: %w", connErr(err))
		}
		e, err := kv.GetRevision(ctx, clockKey, rev)
		if errors.Is(err, jetstream.ErrKeyNotFound) && attempt < 10 {
			continue
		}
		if err != nil {
			return fmt.Errorf("nats: reading the server's clock: %w", err)
		}
		c.mu.Lock()
		c.ok, c.stamp, c.sent, c.recv = true, e.Created().Round(0), sent, recv
		c.mu.Unlock()
		return nil
	}
}
