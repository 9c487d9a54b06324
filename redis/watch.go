package redis

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// A waiting Lock blocks in Wait, on a BLPOP of its owner's mailbox. The
// server hands the lock over: the script that lets a queued request in
// (a release, an expiry it notices, a waiter that leaves) grants it and
// pushes the grant into the owner's mailbox (see promote in scripts.go), so
// that a hand-off costs the releasing holder's one script and the waiter's
// BLPOP reply, with no round trip of the waiter's own.
//
// Such a grant is kept for baton's next Acquire call, which returns it at
// once, and only if that is safe: baton counts the lease from the moment
// it calls Acquire (s), while the server counted the hold from the moment
// it granted it (A), which is earlier. The grant therefore lasts extra
// longer in the store than the TTL asked for, and is used only if
// s - A ≤ extra can be proven from a mark, a server time M taken after
// this machine's time b: the request's refused attempt (sent at b, run at
// M), or a TIME sent with the BLPOP when that is older than a second. Then
// s - A ≤ (s - b) - (A - M), with A - M by the server's clock taken 1%
// short, for clocks that run at different rates. Otherwise Acquire asks the
// server, which finds the owner holding the lock, extends the hold and
// counts its TTL anew.

// prefetch is a grant the server pushed into a waiter's mailbox.
type prefetch struct {
	grant   *driver.Grant
	sent    time.Time     // b: when the mark's command was sent (monotonic)
	blocked time.Duration // A - M by the server's clock
	extra   time.Duration
}

// usable reports whether the grant may be handed to an Acquire call made
// at now (see above).
func (p *prefetch) usable(now time.Time) bool {
	elapsed := now.Sub(p.sent)
	if p.blocked < 0 || p.blocked > elapsed+elapsed/100+time.Millisecond {
		return false // not the same server, or a clock that jumped
	}
	return elapsed-p.blocked+p.blocked/100 <= p.extra
}

// extraFor is how much longer than ttl a handed-over grant lasts in the
// store: lockstate's rule, which the scripts compute too (promote).
func extraFor(ttl time.Duration) time.Duration { return lockstate.HandOffExtra(ttl) }

// mark is a server time taken after a time of this machine.
type mark struct {
	sent time.Time // b
	at   int64     // M, µs of the server's clock
}

// markAge bounds the age of a refused attempt's mark that a BLPOP may use
// instead of a TIME of its own: the 1% allowed for clock rates grows with
// the time since the mark.
const markAge = time.Second

// Watch implements driver.Waiter: see above and the package documentation.
// Watch itself costs no round trip.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	b := s.base(req.Name)
	return &watch{s: s, req: req, hash: b + "r", mailbox: b + "w:" + req.Owner, extra: extraFor(req.TTL)}, nil
}

// Replay implements driver.Replayer: a grant pushed into the mailbox stays
// there (until the queue entry would have expired) for the BLPOP of the
// next Wait. So the refused attempt needs no second attempt after the
// watch starts.
func (w *watch) Replay(time.Time) bool { return true }

type watch struct {
	s       *Store
	req     *driver.Request
	hash    string
	mailbox string
	extra   time.Duration

	mu sync.Mutex
	// pending receives the result of the BLPOP in flight, if any. A BLPOP
	// outlives the Wait that sent it, so that a grant it takes is handed to
	// the next Wait rather than lost.
	pending chan waitResult
}

type waitResult struct {
	err  error  // the server cannot be reached, or refused the BLPOP
	mark mark   // of this BLPOP
	msg  []byte // what the BLPOP took; nil if it timed out
}

// grantLen is the length of a grant in a mailbox: token, time of the grant
// and expiry, as big-endian doubles.
const grantLen = 24

func (w *watch) Wait(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		ch, err := w.start(ctx)
		if err != nil {
			return err
		}
		var r waitResult
		select {
		case r = <-ch:
		case <-ctx.Done():
			return ctx.Err() // the BLPOP stays in flight for the next Wait
		case <-w.s.done:
			return ErrClosed
		}
		w.mu.Lock()
		w.pending = nil
		w.mu.Unlock()
		switch {
		case r.err != nil:
			// The server cannot be reached, or refuses BLPOP: wait as a
			// poller would, for baton's retry time.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-w.s.done:
				return ErrClosed
			}
		case r.msg == nil:
			continue // the BLPOP timed out: still queued
		case len(r.msg) == grantLen:
			tok, at, exp := double(r.msg[0:]), double(r.msg[8:]), double(r.msg[16:])
			p := &prefetch{
				grant:   &driver.Grant{Token: uint64(tok), Created: usTime(at), Renewed: usTime(at), Expires: usTime(exp)},
				sent:    r.mark.sent,
				blocked: time.Duration(at-r.mark.at) * time.Microsecond,
				extra:   w.extra,
			}
			w.s.mu.Lock()
			w.s.prefetched[w.req] = p
			w.s.mu.Unlock()
			return nil
		}
		return nil // poked: baton tries
	}
}

func double(b []byte) int64 { return int64(math.Float64frombits(binary.BigEndian.Uint64(b))) }

// start returns the channel of the BLPOP in flight, sending one if none
// is; it waits for one of the store's MaxWaiters slots.
func (w *watch) start(ctx context.Context) (chan waitResult, error) {
	w.mu.Lock()
	ch := w.pending
	w.mu.Unlock()
	if ch != nil {
		return ch, nil
	}
	s := w.s
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
		return nil, ErrClosed
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.sem
		return nil, ErrClosed
	}
	s.blocked[w] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	ch = make(chan waitResult, 1)
	w.mu.Lock()
	w.pending = ch
	w.mu.Unlock()
	go func() {
		defer s.wg.Done()
		r := w.roundTrip()
		s.mu.Lock()
		delete(s.blocked, w)
		s.mu.Unlock()
		<-s.sem
		ch <- r
	}()
	return ch, nil
}

// roundTrip sends the BLPOP, after a TIME when the request's last refusal
// is too old a mark, and reads the replies. The store's context has no
// deadline: the BLPOP's own timeout, below the client's read timeout,
// bounds it, whatever the caller's deadline, so that it can outlive the
// Wait that sent it.
func (w *watch) roundTrip() waitResult {
	s := w.s
	ctx := s.ctx
	var r waitResult
	m, ok := s.mark(w.req)
	blpop := redis.NewStringSliceCmd(ctx, "blpop", w.mailbox, s.blockArg)
	if ok {
		r.mark = m
		_ = s.rdb.Process(ctx, blpop)
	} else {
		pipe := s.rdb.Pipeline()
		var tm *redis.TimeCmd
		var ms *redis.Cmd
		if _, single := s.rdb.(*redis.Client); single {
			tm = pipe.Time(ctx)
		} else {
			// On a cluster a TIME command could go to another node.
			ms = markScript.EvalSha(ctx, pipe, []string{w.mailbox})
		}
		_ = pipe.Process(ctx, blpop)
		r.mark.sent = time.Now()
		_, _ = pipe.Exec(ctx)
		if tm != nil {
			t, err := tm.Result()
			if err != nil {
				r.err = err
				return r
			}
			r.mark.at = t.UnixMicro()
		} else {
			if err := ms.Err(); err != nil {
				if noScript(err) {
					markScript.Load(ctx, s.rdb)
				}
				r.err = err
				return r
			}
			r.mark.at, _ = ms.Int64()
		}
	}
	v, err := blpop.Result()
	switch {
	case errors.Is(err, redis.Nil):
		// timed out
	case err != nil:
		r.err = err
	case len(v) == 2:
		r.msg = []byte(v[1])
	default:
		r.err = errors.New("redis: unexpected BLPOP reply")
	}
	return r
}

func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// maxBlock bounds one BLPOP, so that a blocked connection notices a lost
// server within that time.
const maxBlock = 2 * time.Second

// blockArg is the BLPOP timeout to send: at most maxBlock, and below the
// read timeout that go-redis gives pipelines.
func blockArg(rdb redis.UniversalClient) string {
	rt := time.Duration(0)
	switch c := rdb.(type) {
	case *redis.Client:
		rt = c.Options().ReadTimeout
	case *redis.ClusterClient:
		rt = c.Options().ReadTimeout
	case *redis.Ring:
		rt = c.Options().ReadTimeout
	default:
		rt = 3 * time.Second
	}
	t := maxBlock
	if rt > 0 {
		t = min(t, rt-min(rt/4, time.Second))
	}
	if t%time.Second == 0 {
		return strconv.FormatInt(int64(t/time.Second), 10)
	}
	// Fractions of a second need Redis 6.
	return strconv.FormatFloat(max(t.Seconds(), 0.01), 'f', 3, 64)
}

// Close ends the BLPOP in flight, if any (see poke), and drops an unused
// handed-over grant (baton released it, or holds it through an Acquire
// call of its own).
func (w *watch) Close() error {
	s := w.s
	s.mu.Lock()
	delete(s.prefetched, w.req)
	delete(s.marks, w.req)
	s.mu.Unlock()
	w.mu.Lock()
	ch := w.pending
	w.pending = nil
	w.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil // it ended already
	default:
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil // Close ends it
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
		defer cancel()
		s.poke(ctx, []*watch{w})
	}()
	return nil
}

// poke ends the BLPOPs of watches whose Lock is over: it takes their
// owners out of the queue and pushes "0" into their mailboxes.
func (s *Store) poke(ctx context.Context, ws []*watch) {
	calls := make([]*call, len(ws))
	for i, w := range ws {
		calls[i] = &call{keys: []string{w.hash, w.mailbox}, args: []any{w.req.Owner, s.linger}}
	}
	_ = s.run(ctx, pokeScript, calls)
}
