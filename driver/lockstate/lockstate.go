// Package lockstate holds the state of one lock name (its holders, its FIFO
// queue and its fencing counter) and the grant rules that change it. Stores
// that can read, change and write back one record atomically (a transaction,
// a compare-and-swap on a version, a mutex) use it so that the rules are
// written once; stores that decide on the server (SQL functions, Lua
// scripts) implement the same rules there and pass the same conformance
// suite.
//
// The grant rules, with expired holders and queue entries dropped first:
//
//   - An owner that already holds the name re-acquires it: the hold is
//     extended and keeps its token (a different mode or limit is refused).
//   - Exclusive: granted when there are no holders and no live queue entry
//     ahead of the request.
//   - Shared with limit L (0: none): granted when no exclusive hold exists,
//     every request queued ahead is shared with limit L too, and, for L >
//     0, the holders plus the requests queued ahead number fewer than L. A
//     queued exclusive request therefore blocks later shared ones (writers
//     are not starved), and so does a queued request for another limit.
//     A shared request whose L differs from the limit of the name's shared
//     holders is refused with driver.ErrLimitConflict, neither granted nor
//     queued: it would exceed someone's limit.
//
// So the holders are always the first requests in queue order, and a
// request, once granted, would still be granted by these rules until it
// leaves: stores whose queue is an order of keys or nodes (etcd,
// ZooKeeper) judge each by its position alone.
//   - A request that is not yet queued is behind every queued one.
//
// Every grant takes the next value of the name's counter as its fencing
// token; the counter only grows, and outlives holders, queue and purges.
package lockstate

import (
	"maps"
	"slices"
	"time"

	"github.com/baton-go/baton/driver"
)

// State is everything stored for one lock name.
type State struct {
	Seq     uint64  `json:"seq"`    // last fencing token handed out
	Ticket  uint64  `json:"ticket"` // last queue ticket handed out
	Holders []Entry `json:"holders,omitempty"`
	Queue   []Entry `json:"queue,omitempty"` // in ticket order
	// Dirty is set by every method that changes the state, so that a store
	// writes back only what changed. The store clears it.
	Dirty bool `json:"-"`
	// Freed is set when a holder or queue entry leaves: the changes after
	// which another request may be granted, so the ones a store wakes its
	// waiters for. The store clears it.
	Freed bool `json:"-"`
}

// Entry is one holder or queue entry.
type Entry struct {
	Owner string            `json:"owner"`
	Mode  driver.Mode       `json:"mode"`
	Limit int               `json:"limit,omitempty"`
	Token uint64            `json:"token"` // fencing token, or queue ticket
	Host  string            `json:"host,omitempty"`
	Meta  map[string]string `json:"meta,omitempty"`
	TTL   time.Duration     `json:"ttl"`
	// HoldTTL is, for a queue entry, the TTL of the hold it asks for: a
	// store that hands the lock over (Promote) grants it that.
	HoldTTL time.Duration `json:"hold_ttl,omitempty"`
	Created time.Time     `json:"created"`
	Renewed time.Time     `json:"renewed"`
	Expires time.Time     `json:"expires"`
	// Session, for a holder, is the store session it is bound to: while
	// the session lives, so does the hold, whatever its own Expires (see
	// ApplySessions).
	Session string `json:"session,omitempty"`
}

// Expire drops holders and queue entries whose time is up at now and
// returns the holders it dropped (not the queue entries).
func (s *State) Expire(name string, now time.Time) []driver.Holder {
	var gone []driver.Holder
	keep := s.Holders[:0]
	for _, e := range s.Holders {
		if now.Before(e.Expires) {
			keep = append(keep, e)
		} else {
			gone = append(gone, e.holder(name, false, now))
		}
	}
	clear(s.Holders[len(keep):])
	s.Holders = keep
	q := s.Queue[:0]
	for _, e := range s.Queue {
		if now.Before(e.Expires) {
			q = append(q, e)
		}
	}
	clear(s.Queue[len(q):])
	if len(gone) > 0 || len(q) != len(s.Queue) {
		s.Dirty, s.Freed = true, true
	}
	s.Queue = q
	return gone
}

// ApplySessions moves the expiry of each holder bound to a session up to
// the session's, when that is later: expiry returns the session's expiry,
// or false for a session that is not live (ended, unknown, or of an
// earlier boot of the store's clock). A store that keeps sessions calls it
// on every state it reads, with the sessions that Sessions names, read in
// the same atomic step as the state, before the rules see it. It leaves
// the state clean: a moved expiry written back keeps a hold no longer
// than its session would have.
func (s *State) ApplySessions(expiry func(id string) (time.Time, bool)) {
	for i := range s.Holders {
		h := &s.Holders[i]
		if h.Session == "" {
			continue
		}
		if t, ok := expiry(h.Session); ok && t.After(h.Expires) {
			h.Expires = t
		}
	}
}

// Sessions appends to ids the sessions that holders past their own
// expiry at now are bound to: the only ones whose expiry can change what
// the rules decide at now. A store need read no other (a holder within
// its own TTL is then reported with that, a lower bound).
func (s *State) Sessions(ids []string, now time.Time) []string {
	for _, h := range s.Holders {
		if h.Session != "" && !now.Before(h.Expires) && !slices.Contains(ids, h.Session) {
			ids = append(ids, h.Session)
		}
	}
	return ids
}

// Bind binds owner's hold to session: the hold then lives as long as
// the session does, besides its own expiry.
func (s *State) Bind(owner, session string) {
	if i := find(s.Holders, owner); i >= 0 && s.Holders[i].Session != session {
		s.Holders[i].Session = session
		s.Dirty = true
	}
}

// Acquire applies req at now. It returns the grant, or an error satisfying
// errors.Is(err, driver.ErrNotGranted) or driver.ErrModeConflict.
func (s *State) Acquire(req *driver.Request, now time.Time) (*driver.Grant, error) {
	s.Expire(req.Name, now)
	if i := find(s.Holders, req.Owner); i >= 0 {
		h := &s.Holders[i]
		if h.Mode != req.Mode || h.Limit != req.Limit {
			return nil, driver.ErrModeConflict
		}
		h.TTL, h.Renewed, h.Expires = req.TTL, now, now.Add(req.TTL)
		h.Host, h.Meta = req.Host, maps.Clone(req.Meta)
		s.Dirty = true
		g := h.grant()
		g.Extended = true
		return g, nil
	}
	if s.limitConflict(req) {
		return nil, driver.ErrLimitConflict
	}
	qi := find(s.Queue, req.Owner)
	ahead := s.Queue
	if qi >= 0 {
		ahead = s.Queue[:qi]
	}
	if s.grantable(req, ahead) {
		if qi >= 0 {
			s.Queue = append(s.Queue[:qi], s.Queue[qi+1:]...)
			s.Freed = true // the entries behind it move up
		}
		s.Seq++
		s.Holders = append(s.Holders, Entry{
			Owner: req.Owner, Mode: req.Mode, Limit: req.Limit, Token: s.Seq,
			Host: req.Host, Meta: maps.Clone(req.Meta), TTL: req.TTL,
			Created: now, Renewed: now, Expires: now.Add(req.TTL),
		})
		s.Dirty = true
		return s.Holders[len(s.Holders)-1].grant(), nil
	}
	if req.Queue {
		if qi >= 0 {
			// Refresh only when half the entry's time is used, so that a
			// waiter that polls often does not write each time.
			q := &s.Queue[qi]
			if q.Expires.Sub(now) < req.QueueTTL/2 {
				q.Expires, q.Renewed, q.HoldTTL = now.Add(req.QueueTTL), now, req.TTL
				s.Dirty = true
			}
		} else {
			s.Ticket++
			s.Queue = append(s.Queue, Entry{
				Owner: req.Owner, Mode: req.Mode, Limit: req.Limit, Token: s.Ticket,
				Host: req.Host, Meta: maps.Clone(req.Meta), TTL: req.QueueTTL, HoldTTL: req.TTL,
				Created: now, Renewed: now, Expires: now.Add(req.QueueTTL),
			})
			s.Dirty = true
		}
	}
	return nil, &driver.Busy{After: s.retryAfter(now)}
}

// Promote grants, at now, the queued requests the rules now let in, in
// FIFO order, as if each had asked again: for a store that hands the lock
// over itself when entries leave, so that a waiter need not ask. A
// promoted hold lasts its HoldTTL plus HandOffExtra of it, since its
// holder counts its lease from a later moment (when it learns of the
// grant). A queue entry without a HoldTTL (written before it existed) is
// left to ask, and so are the entries behind it. Promote returns the
// owners it granted.
func (s *State) Promote(name string, now time.Time) []string {
	s.Expire(name, now)
	var got []string
	for len(s.Queue) > 0 {
		q := s.Queue[0]
		req := &driver.Request{Mode: q.Mode, Limit: q.Limit}
		if q.HoldTTL <= 0 || !s.grantable(req, nil) || s.limitConflict(req) {
			break
		}
		s.Queue = slices.Delete(s.Queue, 0, 1)
		s.Seq++
		s.Holders = append(s.Holders, Entry{
			Owner: q.Owner, Mode: q.Mode, Limit: q.Limit, Token: s.Seq,
			Host: q.Host, Meta: q.Meta, TTL: q.HoldTTL,
			Created: now, Renewed: now, Expires: now.Add(q.HoldTTL + HandOffExtra(q.HoldTTL)),
		})
		s.Dirty = true
		got = append(got, q.Owner)
	}
	return got
}

// HandOffExtra is how much longer than its TTL a hold granted by Promote
// lasts: room for telling its owner and the owner's scheduling, 1/20 of
// the TTL, at least 1ms and at most 50ms.
func HandOffExtra(ttl time.Duration) time.Duration {
	return min(max(ttl/20, time.Millisecond), 50*time.Millisecond)
}

// limitConflict reports whether a shared req asks for another limit than
// the name's shared holders took it with.
func (s *State) limitConflict(req *driver.Request) bool {
	if req.Mode != driver.Shared {
		return false
	}
	for _, h := range s.Holders {
		if h.Mode == driver.Shared && h.Limit != req.Limit {
			return true
		}
	}
	return false
}

func (s *State) grantable(req *driver.Request, ahead []Entry) bool {
	if req.Mode == driver.Exclusive {
		return len(s.Holders) == 0 && len(ahead) == 0
	}
	for _, h := range s.Holders {
		if h.Mode == driver.Exclusive {
			return false
		}
	}
	for _, q := range ahead {
		if q.Mode == driver.Exclusive || q.Limit != req.Limit {
			return false
		}
	}
	return req.Limit == 0 || len(s.Holders)+len(ahead) < req.Limit
}

// retryAfter is how long until the first holder expires: a poller that is
// not woken by the store need not look again sooner than that, unless a
// holder releases early.
func (s *State) retryAfter(now time.Time) time.Duration {
	var d time.Duration
	for i, h := range s.Holders {
		if left := h.Expires.Sub(now); i == 0 || left < d {
			d = left
		}
	}
	return d
}

// Renew extends owner's hold to now+ttl; nil if owner holds nothing.
func (s *State) Renew(name, owner string, ttl time.Duration, now time.Time) *driver.Grant {
	s.Expire(name, now)
	i := find(s.Holders, owner)
	if i < 0 {
		return nil
	}
	h := &s.Holders[i]
	h.TTL, h.Renewed, h.Expires = ttl, now, now.Add(ttl)
	s.Dirty = true
	return h.grant()
}

// Release removes owner's hold and queue entry; it reports whether a live
// hold was removed.
func (s *State) Release(name, owner string, now time.Time) bool {
	s.Expire(name, now)
	if i := find(s.Queue, owner); i >= 0 {
		s.Queue = append(s.Queue[:i], s.Queue[i+1:]...)
		s.Dirty, s.Freed = true, true
	}
	i := find(s.Holders, owner)
	if i < 0 {
		return false
	}
	s.Holders = append(s.Holders[:i], s.Holders[i+1:]...)
	s.Dirty, s.Freed = true, true
	return true
}

// Clone returns a copy of s that shares nothing s's methods change.
func (s *State) Clone() *State {
	c := *s
	c.Holders, c.Queue = slices.Clone(s.Holders), slices.Clone(s.Queue)
	return &c
}

// Idle reports whether nothing holds or waits for the name. An idle state
// may be stored compactly, but its counters must be kept.
func (s *State) Idle() bool { return len(s.Holders) == 0 && len(s.Queue) == 0 }

// List returns the holders and queue entries of the name as seen at now,
// expired ones included (Left ≤ 0), without changing the state.
func (s *State) List(name string, now time.Time) []driver.Holder {
	out := make([]driver.Holder, 0, len(s.Holders)+len(s.Queue))
	for _, e := range s.Holders {
		out = append(out, e.holder(name, false, now))
	}
	for _, e := range s.Queue {
		out = append(out, e.holder(name, true, now))
	}
	return out
}

func (e *Entry) grant() *driver.Grant {
	return &driver.Grant{Token: e.Token, Created: e.Created, Renewed: e.Renewed, Expires: e.Expires}
}

func (e *Entry) holder(name string, queued bool, now time.Time) driver.Holder {
	h := driver.Holder{
		Name: name, Owner: e.Owner, Mode: e.Mode, Limit: e.Limit, Queued: queued,
		Host: e.Host, Meta: maps.Clone(e.Meta), TTL: e.TTL,
		Created: e.Created, Renewed: e.Renewed, Expires: e.Expires, Left: e.Expires.Sub(now),
	}
	if !queued {
		h.Token = e.Token
	}
	return h
}

func find(es []Entry, owner string) int {
	for i := range es {
		if es[i].Owner == owner {
			return i
		}
	}
	return -1
}
