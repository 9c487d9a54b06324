package lockstate

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
)

// FuzzRules drives one state with random requests from a few owners over
// time and checks the invariants after every step.
func FuzzRules(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(42), uint64(7))
	f.Fuzz(func(t *testing.T, seed1, seed2 uint64) {
		r := rand.New(rand.NewPCG(seed1, seed2))
		var s State
		now := time.Unix(1e6, 0)
		owners := []string{"a", "b", "c", "d", "e"}
		modes := map[string]driver.Request{}
		for _, o := range owners {
			req := driver.Request{Name: "n", Owner: o, Mode: driver.Exclusive, TTL: time.Duration(1+r.IntN(5)) * time.Second, QueueTTL: 3 * time.Second}
			if r.IntN(2) == 0 {
				req.Mode, req.Limit = driver.Shared, r.IntN(3)
			}
			modes[o] = req
		}
		var last uint64
		for step := 0; step < 300; step++ {
			now = now.Add(time.Duration(r.IntN(800)) * time.Millisecond)
			o := owners[r.IntN(len(owners))]
			req := modes[o]
			before := clone(&s)
			s.Freed = false
			switch r.IntN(4) {
			case 0, 1:
				req.Queue = r.IntN(2) == 0
				g, err := s.Acquire(&req, now)
				if err == nil && !g.Extended {
					if g.Token <= last {
						t.Fatalf("step %d: token %d not above %d", step, g.Token, last)
					}
					last = g.Token
					checkGrant(t, &s, &req, now)
				}
				if err != nil && !errors.Is(err, driver.ErrNotGranted) && !errors.Is(err, driver.ErrLimitConflict) {
					t.Fatalf("step %d: %v", step, err)
				}
			case 2:
				s.Renew("n", o, req.TTL, now)
			case 3:
				s.Release("n", o, now)
			}
			if err := invariants(&s, now); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if !s.Freed {
				// Stores wake waiters only on Freed: no other change may let
				// a waiter in.
				for _, q := range s.Queue {
					if q.Owner != o && grantable(&s, modes[q.Owner], now) && !grantable(&before, modes[q.Owner], now) {
						t.Fatalf("step %d: %s became grantable without Freed", step, q.Owner)
					}
				}
			}
		}
	})
}

func clone(s *State) State {
	c := *s
	c.Holders = slices.Clone(s.Holders)
	c.Queue = slices.Clone(s.Queue)
	return c
}

// grantable reports whether req would be granted at now, leaving s as is.
func grantable(s *State, req driver.Request, now time.Time) bool {
	c := clone(s)
	req.Queue = true
	_, err := c.Acquire(&req, now)
	return err == nil
}

func checkGrant(t *testing.T, s *State, req *driver.Request, now time.Time) {
	live := 0
	for _, h := range s.Holders {
		if now.Before(h.Expires) {
			live++
		}
	}
	if req.Mode == driver.Shared && req.Limit > 0 && live > req.Limit {
		t.Fatalf("shared grant with limit %d left %d holders", req.Limit, live)
	}
	for _, q := range s.Queue {
		if q.Owner == req.Owner {
			t.Fatalf("granted owner %s still queued", req.Owner)
		}
	}
}

func invariants(s *State, now time.Time) error {
	excl, owners := 0, map[string]bool{}
	for _, h := range s.Holders {
		if owners[h.Owner] {
			return fmt.Errorf("owner %s holds twice", h.Owner)
		}
		owners[h.Owner] = true
		if h.Mode == driver.Exclusive && now.Before(h.Expires) {
			excl++
		}
		if h.Token > s.Seq {
			return fmt.Errorf("token %d above counter %d", h.Token, s.Seq)
		}
	}
	live := 0
	for _, h := range s.Holders {
		if now.Before(h.Expires) {
			live++
		}
	}
	if excl > 0 && live > 1 {
		return fmt.Errorf("exclusive hold with %d live holders", live)
	}
	// Shared holders agree on their limit, and never exceed it.
	limit := -1
	for _, h := range s.Holders {
		if h.Mode != driver.Shared {
			continue
		}
		if limit >= 0 && h.Limit != limit {
			return fmt.Errorf("shared holders with limits %d and %d", limit, h.Limit)
		}
		limit = h.Limit
	}
	if limit > 0 && live > limit {
		return fmt.Errorf("%d live holders of a semaphore of %d", live, limit)
	}
	for i := 1; i < len(s.Queue); i++ {
		if s.Queue[i].Token <= s.Queue[i-1].Token {
			return fmt.Errorf("queue out of ticket order")
		}
	}
	return nil
}

// A shared request whose limit contradicts the holders' is refused with
// ErrLimitConflict, neither granted nor queued.
func TestLimitConflict(t *testing.T) {
	now := time.Unix(1e6, 0)
	req := func(owner string, limit int) *driver.Request {
		return &driver.Request{Name: "n", Owner: owner, Mode: driver.Shared, Limit: limit, TTL: time.Second, Queue: true, QueueTTL: time.Second}
	}
	var s State
	for _, o := range []string{"a", "b"} {
		if _, err := s.Acquire(req(o, 2), now); err != nil {
			t.Fatal(err)
		}
	}
	for _, limit := range []int{0, 1, 3} {
		if _, err := s.Acquire(req("c", limit), now); !errors.Is(err, driver.ErrLimitConflict) {
			t.Errorf("limit %d joining a semaphore of 2: %v, want ErrLimitConflict", limit, err)
		}
	}
	if len(s.Queue) != 0 || len(s.Holders) != 2 {
		t.Errorf("after refused conflicts: %d holders, %d queued; want 2, 0", len(s.Holders), len(s.Queue))
	}
	// An exclusive request waits as usual; so does one of the same limit.
	if _, err := s.Acquire(req("d", 2), now); !errors.Is(err, driver.ErrNotGranted) {
		t.Errorf("a third of a semaphore of 2: %v, want ErrNotGranted", err)
	}
}

func TestRules(t *testing.T) {
	now := time.Unix(1e6, 0)
	req := func(owner string, mode driver.Mode, limit int, queue bool) *driver.Request {
		return &driver.Request{Name: "n", Owner: owner, Mode: mode, Limit: limit, TTL: time.Second, Queue: queue, QueueTTL: time.Second}
	}
	var s State
	if _, err := s.Acquire(req("a", driver.Shared, 0, false), now); err != nil {
		t.Fatal(err)
	}
	// A queued exclusive request keeps later shared ones out.
	if _, err := s.Acquire(req("w", driver.Exclusive, 0, true), now); !errors.Is(err, driver.ErrNotGranted) {
		t.Fatalf("writer: %v", err)
	}
	if _, err := s.Acquire(req("b", driver.Shared, 0, false), now); !errors.Is(err, driver.ErrNotGranted) {
		t.Fatalf("reader behind a queued writer: %v", err)
	}
	var busy *driver.Busy
	_, err := s.Acquire(req("b", driver.Shared, 0, false), now.Add(100*time.Millisecond))
	if !errors.As(err, &busy) || busy.After != 900*time.Millisecond {
		t.Fatalf("retry hint: %v", err)
	}
	// The writer's entry expires if it stops asking; then readers go ahead.
	if _, err := s.Acquire(req("b", driver.Shared, 0, false), now.Add(1500*time.Millisecond)); err != nil {
		t.Fatalf("reader after the writer's queue entry expired: %v", err)
	}
	// Re-acquire extends and keeps the token; another mode conflicts.
	g1, _ := s.Acquire(req("b", driver.Shared, 0, false), now.Add(1600*time.Millisecond))
	if !g1.Extended || g1.Token != s.Seq {
		t.Fatalf("re-acquire: %+v", g1)
	}
	if _, err := s.Acquire(req("b", driver.Exclusive, 0, false), now.Add(1600*time.Millisecond)); !errors.Is(err, driver.ErrModeConflict) {
		t.Fatalf("mode change: %v", err)
	}
	// Release reports whether a live hold was removed.
	if !s.Release("n", "b", now.Add(1700*time.Millisecond)) || s.Release("n", "b", now.Add(1700*time.Millisecond)) {
		t.Fatal("release")
	}
	// A polling waiter only writes when half its queue time is used.
	var q State
	q.Acquire(req("x", driver.Exclusive, 0, false), now)
	q.Dirty = false
	q.Acquire(req("y", driver.Exclusive, 0, true), now)
	if !q.Dirty {
		t.Fatal("enqueue did not mark the state dirty")
	}
	q.Dirty = false
	q.Acquire(req("y", driver.Exclusive, 0, true), now.Add(100*time.Millisecond))
	if q.Dirty {
		t.Fatal("an early poll rewrote the queue entry")
	}
	q.Acquire(req("y", driver.Exclusive, 0, true), now.Add(600*time.Millisecond))
	if !q.Dirty {
		t.Fatal("a late poll did not refresh the queue entry")
	}
}

// Promote grants the queued requests the rules let in, in FIFO order, each
// for its own hold TTL plus HandOffExtra, and stops at the first one they
// do not (or one queued without a hold TTL).
func TestPromote(t *testing.T) {
	now := time.Unix(1e6, 0)
	req := func(owner string, mode driver.Mode, limit int, ttl time.Duration) *driver.Request {
		return &driver.Request{Name: "n", Owner: owner, Mode: mode, Limit: limit, TTL: ttl, Queue: true, QueueTTL: time.Minute}
	}
	var s State
	for _, r := range []*driver.Request{
		req("x", driver.Exclusive, 0, time.Minute),
		req("s1", driver.Shared, 2, 10*time.Second),
		req("s2", driver.Shared, 2, 20*time.Second),
		req("s3", driver.Shared, 2, time.Second),
		req("y", driver.Exclusive, 0, time.Minute),
	} {
		s.Acquire(r, now)
	}
	if got := s.Promote("n", now); len(got) != 0 {
		t.Fatalf("promoted %v while x holds", got)
	}
	s.Release("n", "x", now)
	got := s.Promote("n", now)
	if !slices.Equal(got, []string{"s1", "s2"}) {
		t.Fatalf("promoted %v, want [s1 s2] (a semaphore of 2)", got)
	}
	for i, ttl := range []time.Duration{10 * time.Second, 20 * time.Second} {
		h := s.Holders[i]
		if want := ttl + HandOffExtra(ttl); h.Expires.Sub(now) != want || h.TTL != ttl || h.Token != uint64(i+2) {
			t.Errorf("holder %s: lasts %v, TTL %v, token %d; want %v, %v, %d", h.Owner, h.Expires.Sub(now), h.TTL, h.Token, want, ttl, i+2)
		}
	}
	s.Release("n", "s1", now)
	if got := s.Promote("n", now); !slices.Equal(got, []string{"s3"}) {
		t.Fatalf("promoted %v, want [s3]", got)
	}
	// An entry queued without a hold TTL asks for itself.
	s.Queue[0].HoldTTL = 0
	s.Release("n", "s2", now)
	s.Release("n", "s3", now)
	if got := s.Promote("n", now); len(got) != 0 || len(s.Holders) != 0 {
		t.Fatalf("promoted %v, holders %v; want none", got, s.Holders)
	}
	for ttl, want := range map[time.Duration]time.Duration{
		time.Millisecond: time.Millisecond, time.Second: 50 * time.Millisecond, 400 * time.Millisecond: 20 * time.Millisecond, time.Hour: 50 * time.Millisecond,
	} {
		if got := HandOffExtra(ttl); got != want {
			t.Errorf("HandOffExtra(%v) = %v, want %v", ttl, got, want)
		}
	}
}

// A hold bound to a session lives until the later of its own expiry and
// the session's; a session that is not live adds nothing, and applying
// sessions leaves the state clean.
func TestApplySessions(t *testing.T) {
	now := time.Unix(1e6, 0)
	var s State
	for _, o := range []string{"a", "b", "c"} {
		if _, err := s.Acquire(&driver.Request{Name: "n", Owner: o, Mode: driver.Shared, TTL: time.Second}, now); err != nil {
			t.Fatal(err)
		}
	}
	s.Bind("a", "live")
	s.Bind("b", "gone")
	if !s.Dirty {
		t.Error("Bind left the state clean")
	}
	if got := s.Sessions(nil, now); len(got) != 0 {
		t.Errorf("Sessions = %v within the holds' own TTL, want none", got)
	}
	if got := s.Sessions(nil, now.Add(time.Second)); !slices.Equal(got, []string{"live", "gone"}) {
		t.Errorf("Sessions = %v", got)
	}
	s.Dirty = false
	later := now.Add(time.Minute)
	s.ApplySessions(func(id string) (time.Time, bool) { return later, id == "live" })
	if s.Dirty {
		t.Error("ApplySessions dirtied the state")
	}
	s.Expire("n", now.Add(2*time.Second))
	var left []string
	for _, h := range s.Holders {
		left = append(left, h.Owner)
	}
	if !slices.Equal(left, []string{"a"}) {
		t.Errorf("holders past their own expiry: %v, want [a] (its session lives)", left)
	}
	s.Dirty = false
	s.Bind("a", "live")
	if s.Dirty {
		t.Error("binding a hold to its own session again dirtied the state")
	}
}
