package driver

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"
)

// ErrClosed is wrapped by every store's error for a call made after Close:
// baton does not retry it.
var ErrClosed = errors.New("store is closed")

// Margin is how much sooner than the store a holder gives up a lease (or a
// session) of ttl: room for clocks that run at slightly different rates
// and for scheduling delays. 1% of ttl, at least a millisecond.
func Margin(ttl time.Duration) time.Duration { return max(ttl/100, time.Millisecond) }

// Jitter returns a random duration between d/2 and d, so that clients that
// back off or poll together spread out.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + rand.N(d/2+1)
}

// Outlive returns the context for a store call made on behalf of ctx that
// must not end with it: one that lasts until grace after ctx ends. A
// database that loses its client mid-statement (the driver closes the
// connection when ctx ends) still runs the statement to its end and
// commits, with an outcome, such as a grant or a queue entry, that nobody
// learns of. A call that outlives ctx returns that outcome, which the
// caller can undo; grace only cuts off a server or network that stopped
// answering. Call the CancelFunc when the call returns.
func Outlive(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var timer *time.Timer
	var mu sync.Mutex
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		timer = time.AfterFunc(grace, cancel)
		mu.Unlock()
	})
	return cctx, func() {
		stop()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}

// Sleep waits for d, or until ctx ends, returning ctx.Err() then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FillZero returns a copy of *opts (a zero T if opts is nil) whose zero
// fields take from's values. A store's Open uses it so that options given
// in its URL apply where the caller's Options leave a field zero. T must be
// a struct type.
func FillZero[T any](opts, from *T) *T {
	var out T
	if opts != nil {
		out = *opts
	}
	if from == nil {
		return &out
	}
	dst, src := reflect.ValueOf(&out).Elem(), reflect.ValueOf(from).Elem()
	for i := range dst.NumField() {
		if f := dst.Field(i); f.CanSet() && f.IsZero() {
			f.Set(src.Field(i))
		}
	}
	return &out
}

// EscapeName writes every byte of s other than ASCII letters, digits and
// the bytes of keep as mark and two upper-case hex digits, for stores
// whose keys or paths take only such characters. With mark not in keep it
// is one-to-one, and EscapeName(p) is a prefix of EscapeName(s) exactly
// when p is a prefix of s, so listings by prefix carry over.
func EscapeName(s string, mark byte, keep string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
		} else {
			b.WriteByte(mark)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// ParseURL is url.Parse whose error leaves the URL out: a store's URL may
// hold a password.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		return nil, ue.Err
	}
	return u, err
}

// ServerMark is a reading of the store's clock, Server, by a call sent at
// Sent (this machine's clock, with its monotonic reading): the store read
// its clock after Sent. A store that hands a lock over to a waiter keeps
// the mark of the waiter's last refused attempt, to prove that the hold it
// handed over may be counted as a lease without asking (see Proves).
type ServerMark struct {
	Sent   time.Time
	Server time.Time // zero: no mark
	// Resolution is the store clock's: the reading may be up to this much
	// behind the clock it was read from.
	Resolution time.Duration
}

// Latest is the latest the store's clock can read at t of this machine:
// the mark plus the time since it was sent, plus 1% of that for clocks
// that run at different rates.
func (m ServerMark) Latest(t time.Time) time.Time {
	el := t.Sub(m.Sent)
	return m.Server.Add(m.Resolution + el + el/100)
}

// Proves reports whether a hold handed over to the waiter, created and
// lasting until expires by the store's clock, may be counted as a lease
// of ttl from now (baton counts a lease from the moment it calls Acquire):
// the hold must have been created after the mark (a hold seen before the
// waiter's last refused attempt may be an earlier one of the same owner),
// and must last in the store until the latest the store's clock can read
// ttl from now.
func (m ServerMark) Proves(created, expires time.Time, ttl time.Duration, now time.Time) bool {
	return !m.Server.IsZero() && created.After(m.Server) && !m.Latest(now).Add(ttl).After(expires)
}

// ParseFlag reads a boolean URL parameter: 1, true, yes, on or nothing
// (the parameter alone) are true; 0, false, no and off are false; ok is
// false for anything else.
func ParseFlag(v string) (on, ok bool) {
	switch strings.ToLower(v) {
	case "1", "true", "yes", "on", "":
		return true, true
	case "0", "false", "no", "off":
		return false, true
	}
	return false, false
}

// BusyNames remembers the names a store found busy lately, for a store
// with a call made for contention (such as joining a queue) that it sends
// requests on those names to, and a lighter one for the others. A name is
// remembered For after its last Mark, and at most Max names are (beyond
// that, all are forgotten at once); the zero value remembers none.
type BusyNames struct {
	For time.Duration
	Max int

	mu sync.Mutex
	at map[string]time.Time
}

// Mark notes that name was found busy now.
func (b *BusyNames) Mark(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.For <= 0 || b.Max <= 0 {
		return
	}
	if b.at == nil || len(b.at) >= b.Max {
		b.at = map[string]time.Time{}
	}
	b.at[name] = time.Now()
}

// Recent reports whether name was marked less than For ago.
func (b *BusyNames) Recent(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	t, ok := b.at[name]
	if ok && time.Since(t) >= b.For {
		delete(b.at, name)
		ok = false
	}
	return ok
}
