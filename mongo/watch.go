package mongo

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton/driver"
)

// Watch polls.
const (
	watchMin = 10 * time.Millisecond
	watchMax = 50 * time.Millisecond
)

// Watch implements driver.Waiter by polling: FerretDB has no change
// streams. Wait reads the name's live entries (a small indexed query,
// projected) every few milliseconds, and returns as soon as the grant
// rules would let the request in, or its queue entry is gone: only the
// waiter at the head of the queue wakes, not the herd. Expiry of a
// blocking entry is no change Wait sees; baton waits for it on its own
// (driver.Busy.After).
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	return &watch{s: s, req: req}, nil
}

type watch struct {
	s   *Store
	req *driver.Request
}

// ready reads the name and reports whether an attempt may now succeed.
func (w *watch) ready(ctx context.Context) (bool, error) {
	cur, err := w.s.coll.Find(ctx, bson.D{{Key: "n", Value: w.req.Name}, {Key: "x", Value: false}},
		options.Find().SetProjection(bson.D{{Key: "o", Value: 1}, {Key: "t", Value: 1}, {Key: "m", Value: 1}, {Key: "g", Value: 1}}))
	if err != nil {
		return false, err
	}
	var es []entry
	if err := cur.All(ctx, &es); err != nil {
		return false, err
	}
	var mine int64
	for _, e := range es {
		if e.Owner == w.req.Owner && (mine == 0 || e.Ticket < mine) {
			mine = e.Ticket
		}
	}
	return mine == 0 || grantable(w.req, es, mine), nil
}

// Wait implements driver.Watch.
func (w *watch) Wait(ctx context.Context) error {
	d := watchMin
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if ok, err := w.ready(ctx); ok || err != nil {
			return err
		}
		t.Reset(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
		d = min(d*3/2, watchMax)
	}
}

// Close implements driver.Watch.
func (w *watch) Close() error { return nil }
