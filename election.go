package baton

import (
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

// Campaign waits until this candidate leads, or ctx ends. It returns the
// leadership lease; its Done fires when leadership may be lost.
func (e *Election) Campaign(ctx context.Context) (*Lease, error) {
	if l, ok := e.leading(); ok {
		return l, nil
	}
	e.mu.Lock()
	value := e.value
	e.mu.Unlock()
	l, err := e.c.Lock(ctx, e.name, e.lockOptions(value))
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lease = l
	e.mu.Unlock()
	return l, nil
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
		ferr := fn(fctx, l)
		stop()
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
		}
		return ferr
	}
}
