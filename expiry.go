package baton

import (
	"context"
	"slices"
	"time"

	"github.com/baton-go/baton/driver"
)

// A lease ends at its deadline unless a renewal moves the deadline first.
// Leases with one deadline share one timer: those renewed by one call,
// with one TTL, have the same deadline (the call's send time plus the TTL
// less the margin). So a round of renewals arms a timer per call and moves
// each lease from timer to timer in O(1), instead of resetting a runtime
// timer per lease; a process holding many locks keeps few timers. A lease
// taken just after another joins the other's timer if it comes at most a
// thousandth of the TTL before its own deadline, which moves there: the
// lease ends that little earlier, and locks taken in a burst share a timer.

// expiry is the leases whose deadline is one time, and its timer.
type expiry struct {
	key    time.Duration // the deadline - c.epoch
	leases []*Lease      // each knows its index (Lease.expIdx)
	timer  clockTimer
}

// expireAt moves l to the timer of deadline d, or of the last timer made
// or joined if it comes at most early before d, making one if need be, and
// returns the deadline of the timer. l.mu is held.
func (c *Client) expireAt(l *Lease, d time.Time, early time.Duration) time.Time {
	key := d.Sub(c.epoch)
	c.emu.Lock()
	defer c.emu.Unlock()
	if x := c.lastExp; x != nil && x.key < key && key-x.key <= early {
		key, d = x.key, d.Add(x.key-key)
	}
	if l.exp != nil && l.exp.key == key {
		return d
	}
	c.unexpire(l)
	x := c.lastExp
	if x == nil || x.key != key {
		if x = c.expiries[key]; x == nil {
			x = &expiry{key: key, leases: c.spareExps.take()}
			x.timer = c.clock.AfterFunc(d.Sub(c.clock.Now()), func() { c.expire(x) })
			c.expiries[key] = x
		}
		c.lastExp = x
	}
	l.exp, l.expIdx = x, len(x.leases)
	x.leases = append(x.leases, l)
	return d
}

// noExpiry takes l off its deadline's timer: it ended.
func (c *Client) noExpiry(l *Lease) {
	c.emu.Lock()
	c.unexpire(l)
	c.emu.Unlock()
}

// unexpire takes l off its timer, stopping the timer if l was its last
// lease. c.emu is held.
func (c *Client) unexpire(l *Lease) {
	x := l.exp
	if x == nil {
		return
	}
	x.leases = swapRemove(x.leases, l.expIdx, func(m *Lease, i int) { m.expIdx = i })
	l.exp = nil
	if len(x.leases) == 0 {
		x.timer.Stop()
		delete(c.expiries, x.key)
		c.spareExps.put(x.leases)
		if c.lastExp == x {
			c.lastExp = nil
		}
	}
}

// expire ends the leases of x, which reached its deadline, then releases
// their holds in the store, in calls of up to maxBatch: every lease ends
// before the first call goes out. A lease whose renewal moved its deadline
// meanwhile is on another timer by the time Lease.expire looks, and stays.
func (c *Client) expire(x *expiry) {
	c.emu.Lock()
	if c.expiries[x.key] != x { // it emptied, and its timer fired all the same
		c.emu.Unlock()
		return
	}
	delete(c.expiries, x.key)
	if c.lastExp == x {
		c.lastExp = nil
	}
	ls := x.leases
	x.leases = nil
	for _, l := range ls {
		l.exp = nil
	}
	c.emu.Unlock()
	var keys []driver.Key
	for _, l := range ls {
		if l.expire() {
			keys = append(keys, l.dkey())
		}
	}
	for part := range slices.Chunk(keys, maxBatch) {
		ctx, cancel := c.withTimeout(context.Background(), c.opTimeout())
		_, _ = c.store.Release(ctx, part)
		cancel()
	}
}
