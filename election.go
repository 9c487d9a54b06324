package baton

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"sync"
	"time"
)

// Election is a leader election on one lock name: the leader is the holder
// of an exclusive lease on it, and proclaims a value (its address, say)
// that others can observe. Like spindle's Run/HasLock and etcd's Election.
type Election struct {
	c     *Client
	name  string
	owner string
	opts  LockOptions

	mu    sync.Mutex
	value string
	lease *Lease
}

// ElectionOptions configure an Election. The zero value works.
type ElectionOptions struct {
	TTL   time.Duration     // lease length (the client's default if zero)
	Value string            // what this candidate proclaims when it leads
	Owner string            // candidate id (a new unguessable one if empty)
	Meta  map[string]string // stored with the leader's hold
}

// ValueKey is the metadata key under which a leader's value is stored.
const ValueKey = "baton.value"

// Election returns an election on name; its options are checked here.
func (c *Client) Election(name string, o *ElectionOptions) (*Election, error) {
	if o == nil {
		o = &ElectionOptions{}
	}
	e := &Election{c: c, name: name, owner: o.Owner, value: o.Value}
	if e.owner == "" {
		e.owner = NewOwner()
	}
	e.opts = LockOptions{TTL: o.TTL, Owner: e.owner, Meta: maps.Clone(o.Meta)}
	if _, _, err := c.request(name, e.lockOptions(o.Value), false); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Election) lockOptions(value string) *LockOptions {
	o := e.opts
	o.Meta = maps.Clone(o.Meta)
	if o.Meta == nil {
		o.Meta = map[string]string{}
	}
	o.Meta[ValueKey] = value
	return &o
}

// Owner is this candidate's owner id (ElectionOptions.Owner, or the one
// made for it): the id HandOver names.
func (e *Election) Owner() string { return e.owner }

// Campaign waits until this candidate leads, or ctx ends. It returns the
// leadership lease; its Done fires when leadership may be lost. While a
// hand-over to another candidate stands (HandOver), a candidate that wins
// gives the lock up at once and campaigns again once the other leads or
// the hand-over ends.
func (e *Election) Campaign(ctx context.Context) (*Lease, error) {
	if l, ok := e.leading(); ok {
		return l, nil
	}
	for {
		e.mu.Lock()
		value := e.value
		e.mu.Unlock()
		l, err := e.c.Lock(ctx, e.name, e.lockOptions(value))
		if err != nil {
			return nil, err
		}
		other, err := e.handOver(ctx, l)
		if err != nil || other == "" {
			// (A failed read of the hand-overs is none: the hand-over is
			// the leader's courtesy, the election does not depend on it.)
			e.mu.Lock()
			e.lease = l
			e.mu.Unlock()
			return l, nil
		}
		_ = l.Release(ctx)
		if err := e.waitHandOver(ctx); err != nil {
			return nil, err
		}
	}
}

// HandOver asks the leader to hand leadership to the candidate whose owner
// id is to (ElectionOptions.Owner), as client-go's coordinated election
// does: the leader's Run cancels its function and resigns (a leader that
// does not follow asks is not told), other candidates that win meanwhile
// give the lock up at once, and to leads next if it campaigns before the
// hand-over ends (o.TTL, the client's TTL if zero; o.Prefer is set to to).
// Until then nobody leads: keep o.TTL short. It returns ErrNoLeader if
// nobody leads.
func (e *Election) HandOver(ctx context.Context, to string, o *AskOptions) error {
	var ao AskOptions
	if o != nil {
		ao = *o
	}
	if to == "" {
		return invalid("hand-over to an empty candidate")
	}
	ao.Prefer = to
	n, err := e.c.Ask(ctx, e.name, &ao)
	if err == nil && n == 0 {
		err = ErrNoLeader
	}
	return err
}

// handOver returns the candidate that a standing hand-over prefers to this
// one, now that it won the lock with lease l; empty if none. When l's
// candidate is the one preferred, it marks the hand-overs to it done, so
// that other candidates stop giving the lock up.
func (e *Election) handOver(ctx context.Context, l *Lease) (string, error) {
	asks, err := e.c.status(ctx, &Filter{Name: askName(e.name)})
	if err != nil {
		return "", err
	}
	pending, mine := pendingHandOvers(asks, e.owner)
	for _, h := range mine {
		// The mark is an ask of its own, naming the hand-over it ends, for
		// as long as the hand-over stands (its TTL, where it lives in a
		// store session).
		left := h.Left
		if h.Expires.IsZero() {
			left = h.TTL
		}
		_ = e.c.postAsk(ctx, e.name, max(left, MinTTL), map[string]string{askDone: h.Owner})
	}
	for _, h := range pending {
		if h.Meta[askPrefer] != e.owner {
			return h.Meta[askPrefer], nil
		}
	}
	return "", nil
}

// pendingHandOvers returns the live hand-overs (asks with a preferred
// candidate) that no mark ends, and of them those that prefer owner.
func pendingHandOvers(asks []LockInfo, owner string) (pending, mine []LockInfo) {
	done := map[string]bool{}
	for _, h := range asks {
		if d := h.Meta[askDone]; d != "" && !expired(&h) {
			done[d] = true
		}
	}
	for _, h := range asks {
		if h.Meta[askPrefer] == "" || done[h.Owner] || expired(&h) || h.Queued {
			continue
		}
		pending = append(pending, h)
		if h.Meta[askPrefer] == owner {
			mine = append(mine, h)
		}
	}
	return pending, mine
}

// waitHandOver waits until no hand-over to another candidate stands.
func (e *Election) waitHandOver(ctx context.Context) error {
	for {
		if !e.c.sleep(ctx, e.c.opts.MaxPoll) {
			return cmp.Or(context.Cause(ctx), ErrClosed)
		}
		asks, err := e.c.status(ctx, &Filter{Name: askName(e.name)})
		if err != nil {
			continue
		}
		pending, mine := pendingHandOvers(asks, e.owner)
		if len(pending) == len(mine) {
			return nil
		}
	}
}

// Proclaim changes the leader's value without a new election; the token
// stays the same. It returns ErrNotLeader if this candidate does not lead.
func (e *Election) Proclaim(ctx context.Context, value string) error {
	e.mu.Lock()
	e.value = value
	e.mu.Unlock()
	if _, ok := e.leading(); !ok {
		return ErrNotLeader
	}
	_, err := e.c.TryLock(ctx, e.name, e.lockOptions(value))
	if errors.Is(err, ErrLocked) {
		return ErrNotLeader
	}
	return err
}

// Resign gives leadership up, if held.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Release(ctx)
}

// IsLeader reports whether this candidate leads now, and with which
// fencing token (spindle's HasLock).
func (e *Election) IsLeader() (bool, uint64) {
	l, ok := e.leading()
	if !ok {
		return false, 0
	}
	return true, l.Token()
}

func (e *Election) leading() (*Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease != nil && e.lease.Err() == nil {
		return e.lease, true
	}
	return nil, false
}

// Leader is who leads now, as the store sees it.
type Leader struct {
	Owner string
	Value string
	Token uint64
	Info  LockInfo
}

// Leader returns the current leader, or ErrNoLeader.
func (e *Election) Leader(ctx context.Context) (*Leader, error) {
	hs, err := e.c.Status(ctx, &Filter{Name: e.name})
	if err != nil {
		return nil, err
	}
	for _, h := range hs {
		if h.Mode == Exclusive {
			return &Leader{Owner: h.Owner, Value: h.Meta[ValueKey], Token: h.Token, Info: h}, nil
		}
	}
	return nil, ErrNoLeader
}

// Observe sends the leader each time it changes (owner, token or value),
// and nil when nobody leads, until ctx ends; then it closes the channel.
// It follows the election's lock with Client.WatchHolders: woken by the
// store where the store can tell, else reading it every poll interval (the
// client's MaxPoll if zero).
func (e *Election) Observe(ctx context.Context, poll time.Duration) <-chan *Leader {
	ch := make(chan *Leader)
	hs, err := e.c.WatchHolders(ctx, e.name, poll)
	if err != nil {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		var last *Leader
		first := true
		for held := range hs {
			var cur *Leader
			for _, h := range held {
				if h.Mode == Exclusive {
					cur = &Leader{Owner: h.Owner, Value: h.Meta[ValueKey], Token: h.Token, Info: h}
					break
				}
			}
			if first || !sameLeader(last, cur) {
				select {
				case ch <- cur:
				case <-ctx.Done():
					return
				case <-e.c.ctx.Done():
					return
				}
				last, first = cur, false
			}
		}
	}()
	return ch
}

func sameLeader(a, b *Leader) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Owner == b.Owner && a.Token == b.Token && a.Value == b.Value
}

// Run is a leader loop (spindle's Run): it campaigns, calls fn while
// leading with a context that ends when leadership may be lost, and resigns
// when fn returns. If leadership was lost it campaigns again; otherwise it
// returns fn's result. It returns nil once ctx ends.
func (e *Election) Run(ctx context.Context, fn func(ctx context.Context, l *Lease) error) error {
	for {
		l, err := e.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		fctx, cancel := context.WithCancelCause(ctx)
		stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
		stopAsks := l.cancelOnAsk(fctx, cancel, 0)
		ferr := fn(fctx, l)
		stop()
		stopAsks()
		cancel(nil)
		lost := l.Err()
		rctx, rcancel := e.c.withTimeout(context.WithoutCancel(ctx), e.c.opTimeout())
		_ = e.Resign(rctx)
		rcancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case lost != nil && !errors.Is(lost, ErrReleased):
			continue // leadership lost: campaign again
		case l.AskCause() != nil && (ferr == nil || errors.Is(ferr, ErrAsked) || errors.Is(ferr, context.Canceled)):
			continue // asked to step down: remain a candidate
		}
		return ferr
	}
}
