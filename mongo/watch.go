package mongo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton/driver"
)

// stream is the Store's one change stream on its collection, opened by a
// waiter and closed when no one has waited for 200ms (an open stream
// costs the server work for every write it reports). It reports only the
// writes that let a holder or queue entry go (the documents' fr field),
// each with the name's live holders and the first live entry of its
// queue. Every write that lets an entry go also hands the lock over to
// the queued requests the rules now let in (lockstate.Promote): a waiter
// found among the holders is woken with its grant. Otherwise, while an
// exclusive hold is live or an exclusive request heads a queue behind
// holders, no one here can be granted, and no one is woken; else only the
// head of the queue is, unless it is shared (then every waiter of the
// name is, as several may be granted) or there is none.
type stream struct {
	d *docs

	mu      sync.Mutex
	running bool
	none    bool // the deployment has no change streams: waiters poll
	subs    map[string]map[*sub]struct{}
	used    time.Time // when a waiter last subscribed
	cancel  context.CancelFunc
	wg      sync.WaitGroup // the streams' goroutines
}

// idleStream is how long a stream stays open without waiters.
const idleStream = 200 * time.Millisecond

// sub is one waiter's subscription; head is set when it was woken as the
// head of the queue, grant when it was woken because the lock was handed
// to it.
type sub struct {
	owner string
	ch    chan struct{}
	head  bool
	grant *entry
}

// events is the change stream's pipeline for the Store sid: writes that
// freed an entry, with the live holders and the first live queue entry of
// the document (looked up for updates), deletes, and the events that end a
// stream. Of the writes, the server keeps only those that may matter to
// sid's waiters (see wake): an update that handed the lock to another
// Store is skipped before the lookup (its fr field names that Store);
// then, a hold handed to one of sid's waiters (or any hold of sid), or,
// while the lock is not blocked by a hold, a queue whose head is sid's,
// shared, of an older version (no Store id) or missing. So a hand-off
// costs the server one lookup and wakes one process, not every one with a
// change stream open.
func events(sid string) mongo.Pipeline {
	excl := int32(driver.Exclusive)
	head := bson.D{{Key: "$ifNull", Value: bson.A{"$head", bson.D{}}}}
	anyHolder := func(c bson.D) bson.D {
		return bson.D{{Key: "$anyElementTrue", Value: bson.A{bson.D{{Key: "$map", Value: bson.D{
			{Key: "input", Value: orEmpty("$holders")}, {Key: "in", Value: c}}}}}}}
	}
	missing := func(x any) bson.D { return eq(bson.D{{Key: "$type", Value: x}}, "missing") }
	headField := func(f string) bson.D { return fieldOf(head, f) }
	blocked := bson.D{{Key: "$or", Value: bson.A{
		anyHolder(eq("$$this.m", excl)),
		bson.D{{Key: "$and", Value: bson.A{
			eq(headField("m"), excl),
			bson.D{{Key: "$gt", Value: bson.A{size(orEmpty("$holders")), 0}}},
		}}},
	}}}
	mine := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "$not", Value: bson.A{bson.D{{Key: "$in", Value: bson.A{"$operationType", bson.A{"update", "replace"}}}}}}},
		anyHolder(eq("$$this.s", sid)),
		bson.D{{Key: "$and", Value: bson.A{
			bson.D{{Key: "$not", Value: bson.A{blocked}}},
			bson.D{{Key: "$or", Value: bson.A{
				missing(headField("m")), // no head
				bson.D{{Key: "$ne", Value: bson.A{headField("m"), excl}}},
				missing(headField("s")),
				eq(headField("s"), sid),
			}}},
		}}},
	}}}
	return mongo.Pipeline{
		{{Key: "$match", Value: bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: "operationType", Value: "replace"}, {Key: "fullDocument.fr", Value: bson.D{{Key: "$exists", Value: true}}}},
			// A hand-off to another Store's waiter is skipped here, before
			// the server looks the document up (see freedFor; an int64 is
			// an older version's).
			bson.D{{Key: "operationType", Value: "update"}, {Key: "$or", Value: bson.A{
				bson.D{{Key: "updateDescription.updatedFields.fr", Value: bson.D{{Key: "$regex", Value: "^(\\*|" + sid + "):"}}}},
				bson.D{{Key: "updateDescription.updatedFields.fr", Value: bson.D{{Key: "$type", Value: "long"}}}},
			}}},
			bson.D{{Key: "operationType", Value: bson.D{{Key: "$nin", Value: bson.A{"replace", "insert", "update"}}}}},
		}}}}},
		{{Key: "$project", Value: bson.D{
			{Key: "documentKey", Value: 1}, {Key: "operationType", Value: 1},
			{Key: "head", Value: bson.D{{Key: "$arrayElemAt", Value: bson.A{live("$fullDocument.q", nil), 0}}}},
			{Key: "holders", Value: live("$fullDocument.h", nil)},
		}}},
		{{Key: "$match", Value: bson.D{{Key: "$expr", Value: mine}}}},
	}
}

// Watch implements driver.Waiter: a waiter is woken by the change stream
// (only the head of the queue, see stream), and on a deployment without
// change streams every Options.Poll.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if err := s.d.ensure(ctx); err != nil {
		return nil, err
	}
	w := &watch{d: s.d, key: driver.Key{Name: req.Name, Owner: req.Owner}}
	if err := w.subscribe(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

type watch struct {
	d   *docs
	key driver.Key
	sub *sub // nil when waiters poll
}

func (w *watch) subscribe(ctx context.Context) error {
	x, err := w.d.stream.subscribe(ctx, w.key)
	w.sub = x
	return err
}

// Wait implements driver.Watch.
func (w *watch) Wait(ctx context.Context) error {
	if w.sub == nil {
		return driver.Sleep(ctx, w.d.poll)
	}
	select {
	case <-w.sub.ch:
	case <-ctx.Done():
		return ctx.Err()
	}
	switch {
	case w.sub.grant != nil:
		w.d.setHanded(w.key, w.sub.grant)
	case w.sub.head:
		w.d.setHead(w.key)
	}
	// Subscribe again before the caller tries, so that no write after its
	// try goes unreported. Failing that, the waiter polls.
	w.d.stream.unsubscribe(w.key.Name, w.sub)
	if err := w.subscribe(ctx); err != nil {
		w.sub = nil
	}
	return nil
}

// Close implements driver.Watch.
func (w *watch) Close() error {
	if w.sub != nil {
		w.d.stream.unsubscribe(w.key.Name, w.sub)
	}
	return nil
}

// subscribe returns a subscription for k, opening the stream if needed;
// nil when the deployment has no change streams.
func (s *stream) subscribe(ctx context.Context, k driver.Key) (*sub, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d.closed.Load() {
		return nil, ErrClosed
	}
	if !s.running && !s.none {
		if err := s.start(ctx); err != nil {
			return nil, err
		}
	}
	if s.none {
		return nil, nil
	}
	s.used = time.Now()
	x := &sub{owner: k.Owner, ch: make(chan struct{})}
	if s.subs == nil {
		s.subs = map[string]map[*sub]struct{}{}
	}
	if s.subs[k.Name] == nil {
		s.subs[k.Name] = map[*sub]struct{}{}
	}
	s.subs[k.Name][x] = struct{}{}
	return x, nil
}

func (s *stream) unsubscribe(name string, x *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.subs[name]; m != nil {
		delete(m, x)
		if len(m) == 0 {
			delete(s.subs, name)
		}
	}
}

// start opens the change stream: when it returns, every later write is
// reported. s.mu is held.
func (s *stream) start(ctx context.Context) error {
	cs, err := s.d.coll.Watch(ctx, events(s.d.sid), options.ChangeStream().
		SetFullDocument(options.UpdateLookup).SetMaxAwaitTime(time.Second))
	if err != nil {
		var ce mongo.CommandError
		// 40573: "The $changeStream stage is only supported on replica sets".
		if errors.As(err, &ce) && ce.Code == 40573 {
			s.none = true
			return nil
		}
		return err
	}
	sctx, cancel := context.WithCancel(context.Background())
	s.running, s.cancel = true, cancel
	s.wg.Add(1)
	go s.run(sctx, cancel, cs)
	return nil
}

func (s *stream) run(ctx context.Context, cancel context.CancelFunc, cs *mongo.ChangeStream) {
	defer s.wg.Done()
	defer cancel()
	defer cs.Close(context.Background())
	for {
		if !cs.TryNext(ctx) {
			if cs.Err() != nil || cs.ID() == 0 {
				break
			}
			s.mu.Lock()
			idle := len(s.subs) == 0 && time.Since(s.used) > idleStream
			if idle {
				s.running = false
			}
			s.mu.Unlock()
			if idle {
				return
			}
			continue
		}
		var ev struct {
			Op  string `bson:"operationType"`
			Key struct {
				ID string `bson:"_id"`
			} `bson:"documentKey"`
			Head    *entry  `bson:"head"`
			Holders []entry `bson:"holders"`
		}
		if err := cs.Decode(&ev); err != nil || ev.Op != "replace" && ev.Op != "update" && ev.Op != "delete" {
			break // a drop, a rename, an invalidate: the stream ends
		}
		s.wake(ev.Key.ID, ev.Head, ev.Holders)
	}
	// The stream ended (an error, a failover the driver could not resume,
	// Close): wake every waiter, and let the next one open a new stream.
	s.mu.Lock()
	s.running = false
	for name, m := range s.subs {
		for x := range m {
			close(x.ch)
		}
		delete(s.subs, name)
	}
	s.mu.Unlock()
}

// wake wakes the waiters of name (see stream): those among the holders,
// with their grants; no one else while no one can be granted; else the
// head of its queue only, if it is exclusive and waits here; else all of
// them.
func (s *stream) wake(name string, head *entry, holders []entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.subs[name]
	// blocked: no request can be granted until a holder leaves, which
	// another event reports.
	blocked := head != nil && driver.Mode(head.Mode) == driver.Exclusive && len(holders) > 0
	for i := range holders {
		blocked = blocked || driver.Mode(holders[i].Mode) == driver.Exclusive
		for x := range m {
			if x.owner == holders[i].Owner {
				x.grant = &holders[i]
				close(x.ch)
				delete(m, x)
			}
		}
	}
	if len(m) == 0 {
		delete(s.subs, name)
	}
	if blocked {
		return
	}
	if head != nil && driver.Mode(head.Mode) == driver.Exclusive {
		for x := range m {
			if x.owner == head.Owner {
				x.head = true
				close(x.ch)
				delete(m, x)
				return
			}
		}
		if len(m) > 0 {
			// The head waits in another process; wake no one here.
			return
		}
	}
	for x := range m {
		close(x.ch)
	}
	delete(s.subs, name)
}

// close stops the stream and waits for its goroutines. The store is
// closed already: no stream starts after this.
func (s *stream) close() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// WatchHolders implements driver.HolderWatcher: a change stream of the
// name's document, open while it is followed; every write of the document
// (a grant, a release, a renewal too) wakes it. A deployment without
// change streams (a standalone server) answers errors.ErrUnsupported, and
// baton polls.
func (s *Store) WatchHolders(ctx context.Context, name string) (driver.Watch, error) {
	if err := s.d.ensure(ctx); err != nil {
		return nil, err
	}
	if s.d.closed.Load() {
		return nil, ErrClosed
	}
	match := mongo.Pipeline{{{Key: "$match", Value: bson.D{{Key: "documentKey._id", Value: name}}}}}
	cs, err := s.d.coll.Watch(ctx, match, options.ChangeStream().SetMaxAwaitTime(time.Second))
	if err != nil {
		var ce mongo.CommandError
		if errors.As(err, &ce) && ce.Code == 40573 {
			return nil, fmt.Errorf("mongo: no change streams on this deployment: %w", errors.ErrUnsupported)
		}
		return nil, fmt.Errorf("mongo: watching lock %q: %w", name, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	w := &holderWatch{ch: make(chan struct{}, 1), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.done)
		defer cs.Close(context.Background())
		for cs.Next(sctx) {
			select {
			case w.ch <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
	}()
	return w, nil
}

type holderWatch struct {
	ch     chan struct{} // holds a wake-up not yet taken
	done   chan struct{} // closed when the stream ended
	cancel context.CancelFunc
}

// Wait implements driver.Watch.
func (w *holderWatch) Wait(ctx context.Context) error {
	select {
	case <-w.ch:
		return nil
	case <-w.done:
		return errors.New("mongo: the change stream of the lock ended")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close implements driver.Watch: it closes the stream.
func (w *holderWatch) Close() error {
	w.cancel()
	<-w.done
	return nil
}
