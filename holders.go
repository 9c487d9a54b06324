package baton

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/baton-go/baton/driver"
)

// WatchHolders sends the holders of name (not its waiters) when it starts,
// then each time they change (a grant, a release, a hold that expired or
// was taken over), until ctx ends or the client is closed; then it closes
// the channel. A renewal is no change. On a store that can tell (a
// driver.HolderWatcher: mem, SQLite, NATS, etcd, ZooKeeper, MongoDB
// replica sets) the store wakes it; on the others it reads the holders
// every poll interval (the client's MaxPoll if poll is zero). On every
// store it reads them again when the earliest hold's TTL runs out, so that
// an expiry is seen when it happens. A read that fails is tried again at
// the next wake-up, at most a second later.
func (c *Client) WatchHolders(ctx context.Context, name string, poll time.Duration) (<-chan []LockInfo, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	return c.watchHolders(ctx, name, poll)
}

// watchHolders is WatchHolders of a name already checked (or a companion
// name, see askName).
func (c *Client) watchHolders(ctx context.Context, name string, poll time.Duration) (<-chan []LockInfo, error) {
	if poll <= 0 {
		poll = c.opts.MaxPoll
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, storeErr("watch", name, ErrClosed)
	}
	c.wg.Add(1)
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(c.ctx, cancel) // Close ends the watch
	var w driver.Watch
	if hw, ok := c.store.(driver.HolderWatcher); ok {
		done := c.call(ctx, "watch holders", name)
		var err error
		w, err = hw.WatchHolders(ctx, name)
		if errors.Is(err, errors.ErrUnsupported) {
			err = nil
		}
		done(err)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("baton: watching holders: the store's notifications failed; polling", "lock", name, "err", err)
		}
	}
	ch := make(chan []LockInfo)
	go func() {
		defer c.wg.Done()
		defer close(ch)
		defer cancel()
		defer stop()
		if w != nil {
			defer w.Close()
		}
		var last []LockInfo
		first := true
		for {
			hs, err := c.status(ctx, &Filter{Name: name})
			next := poll // when to read again, unless woken
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				next = min(poll, time.Second)
			} else {
				held := hs[:0]
				for _, h := range hs {
					if !h.Queued && (h.Expires.IsZero() || h.Left > 0) {
						held = append(held, h)
					}
				}
				if first || !sameHolders(last, held) {
					select {
					case ch <- held:
					case <-ctx.Done():
						return
					}
					last, first = held, false
				}
				// An expiry is no change a store reports: read again then.
				left, ok := earliestExpiry(held)
				switch {
				case w != nil && ok:
					next = left + time.Millisecond
				case w != nil:
					next = 0 // the store wakes the watch
				case ok:
					next = min(next, left+time.Millisecond)
				}
			}
			if w == nil || err != nil {
				if !c.sleep(ctx, next) {
					return
				}
				continue
			}
			werr := c.waitFor(ctx, w, next)
			if ctx.Err() != nil {
				return
			}
			if werr != nil {
				c.log.Warn("baton: watching holders: the store's notifications failed; polling", "lock", name, "err", werr)
				w.Close()
				w = nil
			}
		}
	}()
	return ch, nil
}

// waitFor waits on w for at most d (for ever if d is zero); reaching d is
// no error.
func (c *Client) waitFor(ctx context.Context, w driver.Watch, d time.Duration) error {
	wctx := ctx
	if d > 0 {
		var cancel context.CancelFunc
		wctx, cancel = c.withTimeout(ctx, d)
		defer cancel()
	}
	err := w.Wait(wctx)
	if ctx.Err() == nil && errors.Is(context.Cause(wctx), context.DeadlineExceeded) {
		return nil
	}
	return err
}

// earliestExpiry is the least time left of holds with a TTL; false if
// none has one.
func earliestExpiry(hs []LockInfo) (time.Duration, bool) {
	var d time.Duration
	ok := false
	for _, h := range hs {
		if !h.Expires.IsZero() && (!ok || h.Left < d) {
			d, ok = h.Left, true
		}
	}
	return d, ok
}

// sameHolders reports whether a and b hold the same grants: owner, token,
// mode, limit and metadata (a renewal changes none of them).
func sameHolders(a, b []LockInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Owner != y.Owner || x.Token != y.Token || x.Mode != y.Mode || x.Limit != y.Limit || !maps.Equal(x.Meta, y.Meta) {
			return false
		}
	}
	return true
}
