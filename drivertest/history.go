package drivertest

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton"
)

// History records critical sections, as seen by the clients that ran them,
// and checks them: no exclusive section overlaps another section, no more
// shared sections overlap than their limit allows, and a grant that began
// after another grant returned has a larger fencing token.
//
// A section runs from the moment Lock returned to the moment the holder
// stopped working: just before it called Release, or, if the lease was lost
// meanwhile, the lease's deadline (when a correct holder stops, since Done
// fires then). All times come from this process's monotonic clock.
type History struct {
	mu  sync.Mutex
	ops []Section
}

// Section is one critical section.
type Section struct {
	Client  int
	Mode    baton.Mode
	Limit   int
	Token   uint64
	Call    time.Time // Lock was called
	Granted time.Time // Lock returned
	End     time.Time // the holder stopped
}

// Add records a section.
func (h *History) Add(s Section) {
	h.mu.Lock()
	h.ops = append(h.ops, s)
	h.mu.Unlock()
}

// Len is the number of sections recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// End returns when the holder of l stops working if it stops now: now, or
// the lease's deadline if that came first.
func End(l *baton.Lease) time.Time {
	now := time.Now()
	if d := l.Deadline(); !d.IsZero() && d.Before(now) {
		return d
	}
	return now
}

// Check returns every violation found (nil if none).
func (h *History) Check() []error {
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	slices.SortFunc(ops, func(a, b Section) int { return a.Granted.Compare(b.Granted) })
	var errs []error
	tokens := map[uint64]int{}
	for i, a := range ops {
		if j, dup := tokens[a.Token]; dup {
			errs = append(errs, fmt.Errorf("token %d granted twice (sections %d and %d)", a.Token, j, i))
		}
		tokens[a.Token] = i
		active := 0
		for j, b := range ops {
			if i == j {
				continue
			}
			// b granted after a returned: b's token must be larger.
			if b.Call.After(a.Granted) && b.Token <= a.Token {
				errs = append(errs, fmt.Errorf("token did not increase: client %d got %d at %v, then client %d asked at %v and got %d",
					a.Client, a.Token, a.Granted.Format(time.StampMicro), b.Client, b.Call.Format(time.StampMicro), b.Token))
			}
			// overlap of [Granted, End)
			if b.Granted.Before(a.End) && a.Granted.Before(b.End) {
				if a.Mode == baton.Exclusive || b.Mode == baton.Exclusive {
					if i < j {
						errs = append(errs, fmt.Errorf("overlap: client %d (%v, token %d) held %v–%v, client %d (%v, token %d) held %v–%v",
							a.Client, a.Mode, a.Token, a.Granted.Format(time.StampMicro), a.End.Format(time.StampMicro),
							b.Client, b.Mode, b.Token, b.Granted.Format(time.StampMicro), b.End.Format(time.StampMicro)))
					}
				} else if b.Granted.Before(a.Granted) || (b.Granted.Equal(a.Granted) && j < i) {
					active++ // b was in its section when a was granted
				}
			}
		}
		if a.Mode == baton.Shared && a.Limit > 0 && active+1 > a.Limit {
			errs = append(errs, fmt.Errorf("semaphore of %d had %d holders when client %d was granted token %d",
				a.Limit, active+1, a.Client, a.Token))
		}
		if len(errs) > 20 {
			break
		}
	}
	return errs
}
