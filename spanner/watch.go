package spanner

import (
	"context"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/baton-go/baton/driver"
)

// Watch implements driver.Waiter by polling: Spanner has no notifications
// a lock could wait on (change streams are read in batches, seconds late).
// A waiter reads the name's current row (one strong read) every few
// milliseconds, backing off to Options.Poll, and returns as soon as the
// grant rules, applied in Go to what it read, would grant its request: so
// only the waiters that can win try to, and a hand-off costs the releaser's
// commit plus at most one poll interval.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	r := *req
	r.Queue = false
	return &watch{s: s, req: &r}, nil
}

type watch struct {
	s   *Store
	req *driver.Request
}

const firstPoll = 2 * time.Millisecond

func (w *watch) Wait(ctx context.Context) error {
	d := firstPoll
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if w.s.closed.Load() {
			return ErrClosed
		}
		names, err := w.s.read(ctx, spanner.KeySets(keyRange(w.req.Name)))
		if err != nil {
			return err // the caller tries again, and finds out
		}
		x := names[w.req.Name]
		if x == nil {
			return nil // nothing there: try
		}
		if _, err := x.rec.Acquire(w.req, w.s.now(names)); err == nil {
			return nil
		}
		t.Reset(d)
		d = min(d*2, w.s.poll)
	}
}

func (w *watch) Close() error { return nil }
