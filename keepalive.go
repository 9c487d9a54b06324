package baton

import (
	"container/heap"
	"fmt"
	"slices"
	"time"

	"github.com/baton-go/baton/driver"
)

// One timer per Client waits for the first renew time; when it fires, one
// goroutine renews every lease due, then arms the timer again and exits.
// Between renewals nothing runs: taking and releasing a lock starts no
// goroutine and wakes none, only (re)arms the timer when the new renew
// time is the first.
//
// Renew times fall on a grid of a sixth of the TTL (see renewTime), so that
// leases taken at different times share a renew time: a process holding
// many locks makes one round of calls per grid step, carrying every lease
// due then, rather than a call per lease; a lease is renewed between a sixth
// and a third of its TTL after it was taken, then every third.
//
// The leases due at one time form a slot; slots wait in a min-heap by time.
// Queueing, moving, taking out or renewing a lease thus costs O(1), plus
// O(log slots) when it makes or empties a slot, however many leases the
// client holds.

// maxBatch bounds the holds in one call to the store (Renew, and the
// Release of Close and ReleaseOwner): a round over more leases makes
// several calls, so that no one call holds up the store for long.
const maxBatch = 1000

// renewTime is when a lease of ttl renewed (or granted) at sent is renewed
// next: a third of ttl later, rounded down to the client's grid of ttl/6.
func (c *Client) renewTime(sent time.Time, ttl time.Duration) time.Time {
	step := max(ttl/6, time.Millisecond)
	d := sent.Sub(c.epoch) + ttl/3
	return c.epoch.Add(d - d%step)
}

// slot is the leases that keepalive renews at one time.
type slot struct {
	at     time.Time
	key    time.Duration // at - c.epoch, its key in c.slotAt
	leases []*Lease      // each knows its index (Lease.slotIdx)
	index  int           // in c.slots
}

// schedule queues each lease at its renew time (or moves it there), or
// takes it out once it ended, and arms the keepalive timer if the first
// renew time moved earlier. Leases that need no keepalive are left alone.
func (c *Client) schedule(ls ...*Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range ls {
		if !l.keepAlive || l.session != nil {
			continue
		}
		l.mu.Lock()
		at, live := l.renewAt, l.err == nil
		l.mu.Unlock()
		if !live || c.closed {
			c.unschedule(l)
			continue
		}
		key := at.Sub(c.epoch)
		if l.slot != nil && l.slot.key == key {
			continue
		}
		c.unqueue(l)
		s := c.slotAt[key]
		if s == nil {
			s = &slot{at: at, key: key, leases: c.spareSlots.take()}
			c.slotAt[key] = s
			heap.Push(&c.slots, s)
		}
		l.slot, l.slotIdx = s, len(s.leases)
		s.leases = append(s.leases, l)
	}
	if len(c.slots) > 0 && !c.kaRunning && (c.kaAt.IsZero() || c.slots[0].at.Before(c.kaAt)) {
		c.arm(c.slots[0].at)
	}
}

// arm sets the keepalive timer to fire at at. c.mu is held.
func (c *Client) arm(at time.Time) {
	c.kaAt = at
	d := at.Sub(c.clock.Now())
	if c.kaTimer == nil {
		c.kaTimer = c.clock.AfterFunc(d, c.kaFire)
	} else {
		c.kaTimer.Reset(d)
	}
}

// disarm stops the keepalive timer. c.mu is held.
func (c *Client) disarm() {
	if !c.kaAt.IsZero() {
		c.kaTimer.Stop()
		c.kaAt = time.Time{}
	}
}

// kaFire starts the keepalive goroutine, unless one runs.
func (c *Client) kaFire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kaAt = time.Time{}
	if c.closed || c.kaRunning {
		return
	}
	c.kaRunning = true
	c.wg.Add(1)
	go c.keepalive()
}

// unschedule takes l out of the keepalive queue for good. c.mu is held.
func (c *Client) unschedule(l *Lease) {
	if l.slot == nil {
		return
	}
	c.unqueue(l)
	if len(c.slots) == 0 {
		c.disarm()
	}
}

// unqueue takes l out of its slot, if any, dropping the slot if it empties.
// c.mu is held.
func (c *Client) unqueue(l *Lease) {
	s := l.slot
	if s == nil {
		return
	}
	s.leases = swapRemove(s.leases, l.slotIdx, func(m *Lease, i int) { m.slotIdx = i })
	l.slot = nil
	if len(s.leases) == 0 {
		heap.Remove(&c.slots, s.index)
		delete(c.slotAt, s.key)
		c.spareSlots.put(s.leases)
	}
}

// swapRemove removes ls[i], moving the last lease into its place and
// telling set its new index.
func swapRemove(ls []*Lease, i int, set func(*Lease, int)) []*Lease {
	last := len(ls) - 1
	ls[i] = ls[last]
	set(ls[i], i)
	ls[last] = nil
	return ls[:last]
}

// spares keeps the arrays of emptied slots (or expiries) for new ones. In a
// round of renewals, batch after batch of leases leaves one for a new one,
// so that with a few spares kept a steady round allocates none.
type spares [][]*Lease

func (sp *spares) put(a []*Lease) {
	if cap(a) >= 64 && len(*sp) < 4 {
		*sp = append(*sp, a[:0])
	}
}

func (sp *spares) take() []*Lease {
	n := len(*sp)
	if n == 0 {
		return nil
	}
	a := (*sp)[n-1]
	(*sp)[n-1] = nil
	*sp = (*sp)[:n-1]
	return a
}

// keepalive renews the leases due, batch after batch, until none is.
func (c *Client) keepalive() {
	defer c.wg.Done()
	for {
		batch, ok := c.due(c.ka.batch[:0])
		if !ok {
			return
		}
		c.ka.batch = batch
		c.renewBatch(batch)
		clear(batch)
	}
}

// kaBuffers are the keepalive goroutine's, reused from batch to batch (one
// such goroutine runs at a time): a round allocates next to nothing.
type kaBuffers struct {
	batch []*Lease
	holds []driver.Hold
	left  []time.Duration
}

// due takes out of the queue up to maxBatch leases whose renew time has
// come, appending them to batch. With none due it arms the timer for the
// first renew time and reports false: the goroutine exits. Leases taken out
// are in flight: renewBatch queues them again.
func (c *Client) due(batch []*Lease) ([]*Lease, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.slots) == 0 {
		c.kaRunning = false
		return nil, false
	}
	now := c.clock.Now()
	for len(c.slots) > 0 && len(batch) < maxBatch && !c.slots[0].at.After(now) {
		s := c.slots[0]
		k := max(len(s.leases)-(maxBatch-len(batch)), 0)
		for _, l := range s.leases[k:] {
			l.slot = nil
			batch = append(batch, l)
		}
		clear(s.leases[k:])
		s.leases = s.leases[:k]
		if k == 0 {
			heap.Pop(&c.slots)
			delete(c.slotAt, s.key)
			c.spareSlots.put(s.leases)
		}
	}
	if len(batch) == 0 {
		c.kaRunning = false
		c.arm(c.slots[0].at)
		return batch, false
	}
	return batch, true
}

// renewBatch renews batch (at most maxBatch leases) in one call and queues
// again the leases still held. Only the keepalive goroutine calls it.
func (c *Client) renewBatch(batch []*Lease) {
	defer c.schedule(batch...)
	holds := slices.Grow(c.ka.holds[:0], len(batch))[:len(batch)]
	left := slices.Grow(c.ka.left[:0], len(batch))[:len(batch)] // each lease's time left when the renewal is sent
	c.ka.holds, c.ka.left = holds, left
	defer clear(holds)   // lets go of the names
	first := time.Time{} // earliest deadline: no point waiting for the store past it
	now := c.clock.Now()
	for i, l := range batch {
		l.mu.Lock()
		holds[i] = driver.Hold{Name: l.info.Name, Owner: l.info.Owner, TTL: l.ttl + l.delay}
		left[i] = l.deadline.Sub(now)
		if first.IsZero() || l.deadline.Before(first) {
			first = l.deadline
		}
		l.mu.Unlock()
	}
	ctx, cancel := c.clock.WithDeadline(c.ctx, first)
	defer cancel()
	ctx, end := c.observe(ctx, Op{Kind: "renew", Name: holds[0].Name, Count: len(holds)})
	sent := c.clock.Now()
	done := c.call(ctx, "renew", holds[0].Name)
	gs, err := c.store.Renew(ctx, holds)
	done(err)
	end(OpResult{Err: err})
	if err != nil {
		if c.ctx.Err() != nil {
			return // closed: the leases ended
		}
		// Try again soon; each lease's own timer ends it at its deadline.
		// One log line for the call, one event per lease.
		c.log.Warn("baton: lease renewal failed; retrying until its deadline", "lock", holds[0].Name, "leases", len(batch), "err", err)
		now := c.clock.Now()
		for _, l := range batch {
			l.mu.Lock()
			l.renewAt, l.retrying = now.Add(min(l.ttl/10, time.Second)), true
			l.mu.Unlock()
			c.report(Event{Kind: EventRenewFailed, Name: l.info.Name, Owner: l.info.Owner, Token: l.token, Err: err})
		}
		return
	}
	events := c.reports() // a renewal logs nothing
	for i, l := range batch {
		if gs[i] == nil {
			l.end(ErrLeaseLost, false)
			continue
		}
		l.renewed(gs[i], sent, holds[i].TTL-l.delay)
		if events {
			c.emit(Event{Kind: EventRenewed, Name: l.info.Name, Owner: l.info.Owner, Token: l.token, Left: left[i]})
		}
	}
}

// slotHeap orders slots by time, each slot knowing its index. It is
// guarded by Client.mu.
type slotHeap []*slot

func (h slotHeap) Len() int           { return len(h) }
func (h slotHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h slotHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *slotHeap) Push(x any) {
	s := x.(*slot)
	s.index = len(*h)
	*h = append(*h, s)
}
func (h *slotHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return s
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
