package etcd

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/metadata"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/driver"
)

// Watch returns a watch for a blocking acquire of req. It makes no call to
// the server: each Wait watches the key that blocks the request then.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	w := &watch{s: s, name: req.Name, key: s.key(req.Name, req.Owner)}
	s.mu.Lock()
	if p := s.pending[w.key]; p != nil {
		p.watched = true
	}
	s.mu.Unlock()
	return w, nil
}

type watch struct {
	s    *Store
	name string
	key  string
}

func (w *watch) Close() error { return nil }

// Wait returns when the request's blocker is gone (or its key is, or the
// session ended), or when ctx ends.
//
// It finds the blocker in the keys last read (by the request's attempt,
// or read now), watches it without a start revision (the server then
// serves the watch as writes commit, not from its 100 ms catch-up loop),
// waits for the watch's creation, and reads the keys again: a deletion
// before that read shows in it, and one after it comes as an event. If the
// blocker changed meanwhile, it watches the new one.
func (w *watch) Wait(ctx context.Context) error {
	s := w.s
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // Close ends the wait
	defer stop()
	var sessDone <-chan struct{}
	if ss := s.currentSession(); ss != nil {
		sessDone = ss.Done()
	}

	es, rev := w.snapshot()
	if es == nil {
		var err error
		if es, rev, err = s.read(ctx, w.name); err != nil {
			return err
		}
	}
	for {
		i := find(es, w.key)
		if i < 0 {
			return nil // no key: the next attempt makes one
		}
		granted, b := judge(es, i)
		if granted {
			return nil
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		opts := []clientv3.OpOption{clientv3.WithFilterPut(), clientv3.WithCreatedNotify()}
		target := b.key
		// sole: the blocker is all that keeps the request out. Then the
		// watch covers the request's own key too (the key range between
		// the two: it may carry deletions of other keys, which are
		// skipped), and, since one watch delivers events in revision
		// order, the blocker's deletion seen before any of the own key's
		// is a grant, which the next attempt takes without a read.
		sole := target != "" && soleBlocker(es, i)
		if target == "" {
			target = s.nameRange(w.name)
			opts = append(opts, clientv3.WithPrefix(), clientv3.WithPrevKV())
		} else if sole {
			lo, hi := min(b.key, w.key), max(b.key, w.key)
			target = lo
			opts = append(opts, clientv3.WithRange(hi+"\x00"))
		}
		wch := s.cli.Watch(wctx, target, opts...)
		wrev, ok := created(ctx, wch)
		if !ok {
			wcancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// No watch (no leader, or an old server): poll, the caller
			// bounds the wait.
			<-ctx.Done()
			return ctx.Err()
		}
		s.keepStream(ctx)
		// The watch reports every change after revision wrev: a read at
		// wrev or later misses nothing, and the keys in hand do if nothing
		// happened since. Otherwise a serializable read (no raft round)
		// is enough when its member has caught up that far.
		es2, rev2 := es, rev
		if wrev > rev {
			var err error
			if es2, rev2, err = s.readSince(ctx, w.name, wrev); err != nil {
				wcancel()
				return err
			}
		}
		i = find(es2, w.key)
		if i < 0 {
			wcancel()
			return nil
		}
		granted, b2 := judge(es2, i)
		if granted {
			wcancel()
			return nil
		}
		if b2.key != b.key {
			wcancel() // another blocker now: watch that one
			es, rev = es2, rev2
			continue
		}
		own := ""
		if sole && soleBlocker(es2, i) {
			own = w.key
		}
		woke, err := block(ctx, wch, b2, own, rev2, es2[i].rev, sessDone)
		wcancel()
		if woke > 0 {
			s.mu.Lock()
			if p := s.pending[w.key]; p != nil {
				p.woke = woke
				if own != "" {
					e := es2[i]
					p.granted = &e
				}
			}
			s.mu.Unlock()
		}
		return err
	}
}

// snapshot takes the keys the request's last attempt read, if any, and
// the revision they were read at.
func (w *watch) snapshot() ([]entry, int64) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[w.key]; p != nil {
		es := p.snap
		p.snap = nil
		return es, p.snapRev
	}
	return nil, 0
}

// created waits for the watch's creation and returns the revision it
// started after; false if it failed.
func created(ctx context.Context, wch clientv3.WatchChan) (int64, bool) {
	for {
		select {
		case <-ctx.Done():
			return 0, false
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return 0, false
			}
			if wr.Created {
				return wr.Header.Revision, true
			}
		}
	}
}

// soleBlocker reports whether the i-th key would be granted without its
// blocker (the key judge names): no other key before it keeps it out, and
// none can come before it later (create revisions only grow).
func soleBlocker(es []entry, i int) bool {
	_, b := judge(es, i)
	if b.key == "" {
		return false
	}
	rest := make([]entry, 0, i)
	for _, e := range es[:i+1] {
		if e.key != b.key {
			rest = append(rest, e)
		}
	}
	granted, _ := judge(rest, len(rest)-1)
	return granted
}

// block waits for the deletion of b's key, or for b.need deletions of keys
// created before myRev, after revision rev. It returns the revision of the
// deletion that unblocked the request (0 if something else ended the wait).
// With own set, the watch also covers keys other than b's (skipped), and
// the deletion of own, the request's key, ends the wait with 0.
func block(ctx context.Context, wch clientv3.WatchChan, b blocker, own string, rev, myRev int64, sessDone <-chan struct{}) (int64, error) {
	deleted := 0
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-sessDone:
			return 0, nil // our key goes with the session: try again
		case wr, ok := <-wch:
			if !ok || wr.Canceled || wr.Err() != nil {
				return 0, nil // the watch broke: let the caller try again
			}
			for _, ev := range wr.Events {
				if ev.Type != mvccpb.DELETE || ev.Kv.ModRevision <= rev {
					continue
				}
				if b.key != "" {
					switch k := string(ev.Kv.Key); {
					case k == b.key:
						return ev.Kv.ModRevision, nil
					case k == own:
						return 0, nil // gone: the next attempt queues again
					case own != "":
						continue // another key in the watched range
					}
					return ev.Kv.ModRevision, nil
				}
				if ev.PrevKv == nil || ev.PrevKv.CreateRevision < myRev {
					deleted++
				}
				if deleted >= b.need {
					return ev.Kv.ModRevision, nil
				}
			}
		}
	}
}

// maxKeptStreams bounds the watch streams keepStream keeps open.
const maxKeptStreams = 4

// keepStream keeps one idle watch open on the gRPC watch stream that the
// waits of ctx share (the client keys its streams by the context's
// outgoing metadata, here WithRequireLeader's, and closes a stream with its
// last watch). Without it every Wait would open a stream and close it
// again, which cost the server a fifth of its CPU per contended
// acquisition. The idle watch is on a key nobody writes, filtered of every
// event, and ends with the store, or when its stream breaks (the next Wait
// then makes another). It is created in a goroutine, as the client may
// block until the stream is up, bounded by the store's life only.
func (s *Store) keepStream(ctx context.Context) {
	md, _ := metadata.FromOutgoingContext(clientv3.WithRequireLeader(ctx))
	key := fmt.Sprint(md)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if ch, ok := s.streams[key]; ok {
		if ch == nil {
			return // being made
		}
		select {
		case _, open := <-ch:
			if open {
				return // an error response: the channel closes next
			}
		default:
			return
		}
	}
	if s.streams == nil {
		s.streams = map[string]clientv3.WatchChan{}
	}
	if len(s.streams) >= maxKeptStreams {
		// Contexts that each carry other metadata get a stream each:
		// keep a few, not one per request.
		return
	}
	s.streams[key] = nil
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// The idle watch carries ctx's metadata, not its deadline.
		ch := s.cli.Watch(metadata.NewOutgoingContext(s.ctx, md), s.prefix+"\x00idle",
			clientv3.WithFilterPut(), clientv3.WithFilterDelete())
		s.mu.Lock()
		s.streams[key] = ch
		s.mu.Unlock()
	}()
}

// WatchHolders implements driver.HolderWatcher: one etcd watch on the
// name's keys, created before it returns; every put or deletion of one (a
// request, a grant, a release, a session's end) wakes it.
func (s *Store) WatchHolders(ctx context.Context, name string) (driver.Watch, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	stop := context.AfterFunc(ctx, cancel) // until created, ctx bounds it
	wch := s.cli.Watch(wctx, s.nameRange(name), clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	_, ok := created(wctx, wch)
	if !stop() || !ok {
		cancel()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("etcd: watching lock %q: the watch was not created", name)
	}
	return &holderWatch{wch: wch, cancel: cancel}, nil
}

type holderWatch struct {
	wch    clientv3.WatchChan
	cancel context.CancelFunc
}

// Wait implements driver.Watch.
func (w *holderWatch) Wait(ctx context.Context) error {
	select {
	case wr, ok := <-w.wch:
		if !ok || wr.Canceled {
			return errors.New("etcd: the watch of the lock ended")
		}
		return wr.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close implements driver.Watch.
func (w *holderWatch) Close() error {
	w.cancel()
	return nil
}
