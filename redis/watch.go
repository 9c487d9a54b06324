package redis

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/driver"
)

// A waiting Lock blocks in Wait. Wait sends, in one pipeline on one
// connection,
//
//	EVALSHA mark   1 <mailbox>            the server's time M
//	BLPOP          <mailbox> <timeout>    blocks until a script pushes a token
//	EVALSHA acquire … waiting=1           the waiter's attempt, run by the
//	                                      server as soon as BLPOP returns
//
// so that a woken waiter's attempt reaches the server with no round trip
// of its own: the hand-off from a releasing holder to the next waiter costs
// the release and one reply. The attempt only acts for an owner that is
// still queued (not one that was granted meanwhile by an attempt of its
// own, or that left the queue), so a pipeline still in flight when the
// Lock ended changes nothing.
//
// A grant obtained so is kept for baton's next Acquire call, which returns
// it at once, and only if that is safe: baton counts the lease from the
// moment it calls Acquire (s), while the server counted the hold from the
// moment the attempt ran (A), which is earlier. The grant therefore lasts
// extra longer in the store than the TTL asked for, and is used only if
// s - A ≤ extra can be proven: the pipeline was sent at b ≤ M (by this
// machine's clock), and the server says A - M (by its clock, taken 1%
// short for clocks that run at different rates), so s - A ≤ (s - b) - (A - M).
// Otherwise Acquire asks the server as usual, which extends the hold and
// counts the TTL anew.

// prefetch is a grant obtained by a waiter's pipelined attempt.
type prefetch struct {
	grant   *driver.Grant
	sent    time.Time     // b: when the pipeline was sent (monotonic)
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

// extraFor is how much longer than ttl a prefetched grant lasts in the
// store: room for the reply and the caller's scheduling.
func extraFor(ttl time.Duration) time.Duration {
	return min(max(ttl/20, time.Millisecond), 50*time.Millisecond)
}

// Watch implements driver.Waiter: see above and the package documentation.
// Watch itself costs no round trip.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	in, err := encodeInfo(req.Host, req.Meta)
	if err != nil {
		return nil, err
	}
	b := s.base(req.Name)
	extra := extraFor(req.TTL)
	return &watch{
		s: s, req: req, mailbox: b + "w:" + req.Owner, extra: extra,
		keys: []string{b + "s", b + "c"},
		args: []any{req.Name, req.Owner, int(req.Mode), req.Limit, micros(req.TTL),
			"1", micros(req.QueueTTL), in, s.linger, "1", micros(extra), "", 0},
	}, nil
}

// Replay implements driver.Replayer: a release that lets a queued owner in
// pushes a token into its mailbox, which keeps it (until the queue entry
// would expire) for the BLPOP of the next Wait. So the refused attempt
// needs no second attempt after the watch starts.
func (w *watch) Replay(time.Time) bool { return true }

type watch struct {
	s       *Store
	req     *driver.Request
	mailbox string
	keys    []string
	args    []any
	extra   time.Duration

	mu sync.Mutex
	// pending receives the result of the pipeline in flight, if any. A
	// pipeline outlives the Wait that sent it, so that the token its BLPOP
	// may take is handed to the next Wait rather than lost.
	pending chan waitResult
}

type waitResult struct {
	sent    time.Time
	err     error // of the mark or the BLPOP: the server cannot be reached
	mark    int64 // M, µs
	acquire []int64
	acqErr  error
}

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
			return ctx.Err() // the pipeline stays in flight for the next Wait
		case <-w.s.done:
			return ErrClosed
		}
		w.mu.Lock()
		w.pending = nil
		w.mu.Unlock()
		switch {
		case r.err != nil:
			// BLPOP failed (the server cannot be reached, or refuses it):
			// wait as a poller would, for baton's retry time.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-w.s.done:
				return ErrClosed
			}
		case r.acqErr != nil:
			return nil // say, NOSCRIPT: let baton's own attempt run
		}
		a := r.acquire
		switch {
		case len(a) == 6 && a[0] == 1:
			p := &prefetch{
				grant:   &driver.Grant{Token: uint64(a[1]), Created: usTime(a[2]), Renewed: usTime(a[3]), Expires: usTime(a[4])},
				sent:    r.sent,
				blocked: time.Duration(a[2]-r.mark) * time.Microsecond,
				extra:   w.extra,
			}
			w.s.mu.Lock()
			w.s.prefetched[w.req] = p
			w.s.mu.Unlock()
			return nil
		case len(a) == 4 && a[0] == 0:
			continue // a stale token, or BLPOP timed out: still queued
		}
		return nil // held already, or not queued any more: baton tries
	}
}

// start returns the channel of the pipeline in flight, sending one if none
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

// roundTrip sends the mark, BLPOP and attempt (see above) and reads their
// replies. The store's context has no deadline: the BLPOP's own timeout,
// below the client's read timeout, bounds it, whatever the caller's
// deadline, so that it can outlive the Wait that sent it.
func (w *watch) roundTrip() waitResult {
	s := w.s
	ctx := s.ctx
	pipe := s.rdb.Pipeline()
	var mark *redis.Cmd
	var tm *redis.TimeCmd
	if _, single := s.rdb.(*redis.Client); single {
		tm = pipe.Time(ctx)
	} else {
		// On a cluster a TIME command could go to another node.
		mark = markScript.EvalSha(ctx, pipe, []string{w.mailbox})
	}
	blpop := redis.NewStringSliceCmd(ctx, "blpop", w.mailbox, s.blockArg)
	_ = pipe.Process(ctx, blpop)
	acq := acquireScript.EvalSha(ctx, pipe, w.keys, w.args...)
	r := waitResult{sent: time.Now()}
	_, _ = pipe.Exec(ctx)
	if tm != nil {
		t, err := tm.Result()
		if err != nil {
			r.err = err
			return r
		}
		r.mark = t.UnixMicro()
	} else {
		if err := mark.Err(); err != nil {
			if noScript(err) {
				markScript.Load(ctx, s.rdb)
				return waitResult{sent: r.sent, acqErr: err}
			}
			r.err = err
			return r
		}
		r.mark, _ = mark.Int64()
	}
	if err := blpop.Err(); err != nil && !errors.Is(err, redis.Nil) {
		r.err = err // redis.Nil: it timed out
		return r
	}
	r.acquire, r.acqErr = acq.Int64Slice()
	if noScript(r.acqErr) {
		acquireScript.Load(ctx, s.rdb)
	}
	return r
}

func noScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// maxBlock bounds one BLPOP: a prefetched grant allows 1% of the time
// blocked for clocks that run at different rates, which must fit in its
// extra time (see prefetch.usable).
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

// Close ends the pipeline in flight, if any (see poke), and drops an
// unused prefetched grant (baton released it, or holds it through an
// Acquire call of its own).
func (w *watch) Close() error {
	s := w.s
	s.mu.Lock()
	delete(s.prefetched, w.req)
	delete(s.refused, w.req)
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

// poke ends the pipelines of watches whose Lock is over: it takes their
// owners out of the queue and pushes a token into their mailboxes, so that
// their BLPOPs return and the attempts behind them change nothing.
func (s *Store) poke(ctx context.Context, ws []*watch) {
	calls := make([]*call, len(ws))
	for i, w := range ws {
		calls[i] = &call{keys: []string{w.keys[0], w.mailbox}, args: []any{w.req.Owner, s.linger}}
	}
	_ = s.run(ctx, pokeScript, calls)
}
