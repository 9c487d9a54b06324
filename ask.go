package baton

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton/driver"
)

// Asking a holder to let go (revocation, as in Curator's revocable locks).
//
// An ask is a hold of its own: shared, not renewed, on a companion name
// that no user can take (it starts with a control character, which
// checkName refuses), with the reason and the largest token it asks about
// in its metadata. Tokens grow with every grant of a name, so "every hold
// with a token up to T" is exactly the holders the asker saw, and never a
// later one. A holder that follows asks watches the companion name with
// WatchHolders: woken by the store where the store can tell, reading it
// every MaxPoll elsewhere. So asking needs of a store only what every store
// does, and costs nothing to holders that do not follow asks.

// ErrAsked is the cause of a context ended because another client asked
// the holder to release the lock (Client.Ask): errors.Is(err, ErrAsked)
// holds for the *AskedError that carries the reason.
var ErrAsked = errors.New("baton: asked to release the lock")

// AskedError says that a holder was asked to release its lock, and why.
type AskedError struct {
	Name   string // the lock
	Reason string // the asker's, possibly empty
	// Prefer is the candidate the asker wants to lead next (an election's
	// hand-over), empty for a plain ask.
	Prefer string
}

func (e *AskedError) Error() string {
	s := fmt.Sprintf("baton: asked to release lock %q", e.Name)
	if e.Prefer != "" {
		s += " to candidate " + strconv.Quote(e.Prefer)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes errors.Is(err, ErrAsked) true.
func (e *AskedError) Is(target error) bool { return target == ErrAsked }

// AskOptions configure an ask. The zero value works.
type AskOptions struct {
	// Reason is shown to the holder (Lease.AskCause): printable UTF-8 of
	// at most MaxReasonLen bytes.
	Reason string
	// TTL is how long the ask stands: a holder that starts following asks
	// later does not see it. The client's TTL if zero. It also ends when
	// the asking Client closes.
	TTL time.Duration
	// Prefer, for an election on the name, is the candidate (its owner id)
	// that should lead next: while the ask stands, other candidates that
	// win the lock give it up at once (see Election.HandOver).
	Prefer string
}

// MaxReasonLen bounds AskOptions.Reason.
const MaxReasonLen = 1024

// Metadata keys of an ask's hold.
const (
	askUpTo   = "baton.ask.upto" // the largest token asked about, in decimal
	askReason = "baton.ask.reason"
	askPrefer = "baton.ask.prefer"
	askDone   = "baton.ask.done" // a mark: the hand-over asked by this owner is done
)

// askName is the companion name of name's asks: the name itself after a
// prefix, or, when that would be too long, its SHA-256 after another.
func askName(name string) string {
	const prefix, hashed = "\x01ask\x01", "\x01askh\x01"
	if len(prefix)+len(name) <= MaxNameLen {
		return prefix + name
	}
	sum := sha256.Sum256([]byte(name))
	return hashed + hex.EncodeToString(sum[:])
}

// isAskName reports whether a listed name is a companion name.
func isAskName(name string) bool { return strings.HasPrefix(name, "\x01ask") }

// Ask asks the holders of name to release it, and returns how many it
// asked (0 when nobody holds it: no ask is then made). Nothing is forced: a
// holder that follows asks (Lease.Asked; Do with LockOptions.Revocable;
// Election.Run; baton run) is told, at once on stores that can notify and
// within MaxPoll on the others, and decides what to do; one that does not
// keeps the lock until it releases it or it expires (ForceRelease is for
// those). The ask concerns the holders of the moment only, never a later
// one, and stands for AskOptions.TTL.
func (c *Client) Ask(ctx context.Context, name string, o *AskOptions) (int, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	if o == nil {
		o = &AskOptions{}
	}
	ttl := cmp.Or(o.TTL, c.opts.TTL)
	switch {
	case len(o.Reason) > MaxReasonLen:
		return 0, invalid("ask reason is %d bytes, longer than %d", len(o.Reason), MaxReasonLen)
	case !printable(o.Reason):
		// Holders print it (baton run does, to its terminal).
		return 0, invalid("ask reason %q is not printable UTF-8", o.Reason)
	case o.Prefer != "":
		if err := checkOwner(o.Prefer); err != nil {
			return 0, err
		}
	}
	if err := checkTTL("ask TTL", ttl); err != nil {
		return 0, err
	}
	hs, err := c.Status(ctx, &Filter{Name: name})
	if err != nil {
		return 0, err
	}
	var upTo uint64
	for _, h := range hs {
		upTo = max(upTo, h.Token)
	}
	if len(hs) == 0 {
		return 0, nil
	}
	meta := map[string]string{askUpTo: strconv.FormatUint(upTo, 10)}
	if o.Reason != "" {
		meta[askReason] = o.Reason
	}
	if o.Prefer != "" {
		meta[askPrefer] = o.Prefer
	}
	if err := checkMeta(meta); err != nil {
		return 0, err
	}
	if err := c.postAsk(ctx, name, ttl, meta); err != nil {
		return 0, err
	}
	return len(hs), nil
}

// postAsk takes a hold on name's companion name with meta, for ttl: an ask,
// or a hand-over's done mark. It is tracked as a lease without keepalive:
// it ends when its TTL runs out, or at Close, and is released then, which
// also ends it on a store whose holds live in a session.
func (c *Client) postAsk(ctx context.Context, name string, ttl time.Duration, meta map[string]string) error {
	req := &driver.Request{Name: askName(name), Owner: NewOwner(), Mode: driver.Shared, TTL: ttl, Host: c.opts.Host, Meta: meta}
	retry := backoff{n: 3, max: c.opts.MaxPoll}
	for {
		if c.isClosed() {
			return storeErr("ask", name, ErrClosed)
		}
		sent := c.clock.Now()
		done := c.call(ctx, "ask", name)
		g, err := c.store.Acquire(ctx, req)
		done(err)
		if err == nil {
			c.newLease(req, g, sent, false, 0)
			return nil
		}
		if !retryable(ctx, err) || retry.n-3 >= c.opts.Retries || !c.sleep(ctx, retry.next()) {
			c.abandon(ctx, req)
			return storeErr("ask", name, cmp.Or(context.Cause(ctx), err))
		}
	}
}

// asks is a lease's following of asks.
type asks struct {
	ch    chan struct{} // closed when asked
	cause *AskedError   // set before ch is closed
}

// Asked returns a channel that is closed when another client asks the
// holder to release the lock (Client.Ask); AskCause then says why. The
// first call starts following asks, until the lease ends: one watch of the
// store, woken by the store where it can tell (see Client.WatchHolders),
// else reading every MaxPoll. Nothing is released: what to do is the
// holder's choice.
func (l *Lease) Asked() <-chan struct{} {
	return l.followAsks(0).ch
}

// AskCause returns the ask once Asked is closed, an *AskedError (so
// errors.Is(err, ErrAsked)); nil before.
func (l *Lease) AskCause() error {
	l.mu.Lock()
	a := l.asks
	l.mu.Unlock()
	if a == nil {
		return nil
	}
	select {
	case <-a.ch:
		return a.cause
	default:
		return nil
	}
}

// followAsks starts following asks after delay (none if zero), unless
// already started, and returns where an ask lands. An ask made before the
// watch starts is found by the watch's first read; the delay spares short
// holds any store call.
func (l *Lease) followAsks(delay time.Duration) *asks {
	l.mu.Lock()
	if l.asks != nil {
		a := l.asks
		l.mu.Unlock()
		return a
	}
	a := &asks{ch: make(chan struct{})}
	l.asks = a
	l.mu.Unlock()
	c := l.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return a
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		if delay > 0 {
			t := c.clock.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C():
			case <-l.done:
				return
			case <-c.ctx.Done():
				return
			}
		}
		ctx, cancel := context.WithCancel(l.Context())
		defer cancel()
		hs, err := c.watchHolders(ctx, askName(l.info.Name), c.opts.MaxPoll)
		if err != nil {
			return
		}
		for held := range hs {
			for _, h := range held {
				upTo, err := strconv.ParseUint(h.Meta[askUpTo], 10, 64)
				if err != nil || l.token > upTo {
					continue
				}
				a.cause = &AskedError{Name: l.info.Name, Reason: h.Meta[askReason], Prefer: h.Meta[askPrefer]}
				close(a.ch)
				c.emit(Event{Kind: EventAsked, Name: l.info.Name, Owner: l.info.Owner, Token: l.token, Err: a.cause})
				return
			}
		}
	}()
	return a
}

// cancelOnAsk follows asks (after delay) and cancels ctx with the ask as its
// cause when one comes; the function it returns stops waiting for it.
func (l *Lease) cancelOnAsk(ctx context.Context, cancel context.CancelCauseFunc, delay time.Duration) (stop func()) {
	a := l.followAsks(delay)
	done := make(chan struct{})
	go func() {
		select {
		case <-a.ch:
			cancel(a.cause)
		case <-ctx.Done():
		case <-done:
		}
	}()
	return func() { close(done) }
}
