package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton/driver"
)

// maxTxnKeys bounds the keys of one Release or Renew transaction: etcd
// refuses transactions of more than 128 operations by default.
const maxTxnKeys = 60

// Acquire creates the request's key if it has none, then applies the grant
// rules to the name's keys, read in the same transaction.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	for attempt := 0; ; attempt++ {
		sess, err := s.session(ctx)
		if err != nil {
			return nil, err
		}
		g, err := s.acquire(ctx, req, sess)
		if attempt < 3 && (isLeaseNotFound(err) || errors.Is(err, errRetry)) {
			if isLeaseNotFound(err) {
				sess.lost(err) // the server dropped the lease: take a new one
			}
			continue
		}
		return g, err
	}
}

// errRetry makes Acquire try again: a key vanished between two steps.
var errRetry = errors.New("etcd: key changed, retry")

func (s *Store) acquire(ctx context.Context, req *driver.Request, sess *session) (*driver.Grant, error) {
	key := s.key(req.Name, req.Owner)
	rng := s.nameRange(req.Name)
	now := time.Now()

	var es []entry
	var rev int64
	created := false
	s.mu.Lock()
	delete(s.orphans, key) // acquiring it again: not to be deleted later
	p := s.pending[key]
	if p != nil && p.watched && p.snap != nil {
		// baton retries at once after starting a watch, to cover changes
		// made before the watch began; Wait reads the keys again after
		// its etcd watch is created, so that retry would only repeat the
		// read just made: answer from it.
		p.watched = false
		s.mu.Unlock()
		return nil, &driver.Busy{}
	}
	var woke int64
	var given *entry
	var psess *session
	var prev int64
	if p != nil {
		woke, p.woke = p.woke, 0
		given, p.granted = p.granted, nil
		psess, prev = p.sess, p.rev
	}
	s.mu.Unlock()
	if e := given; e != nil && psess == sess && e.lease == sess.id && e.rev == prev && e.v.sameAs(req) &&
		e.exclusive() == (req.Mode == driver.Exclusive) && e.v.Limit == req.Limit {
		// Granted by the deletion its Wait saw: no read needed (the key
		// still exists in this session, or its deletion would have come
		// first on the same watch).
		s.mu.Lock()
		delete(s.pending, key)
		s.held[key] = heldKey{rev: e.rev, sess: sess}
		s.mu.Unlock()
		return &driver.Grant{Token: uint64(e.rev), Created: e.v.Created, Renewed: now, Session: sess}, nil
	}
	if p != nil {
		// Queued by this store: its key most likely exists, and a read
		// (no raft write, no fsync) tells whether it is granted now. After
		// a wake-up by the deletion at revision woke, any snapshot at woke
		// or later will do: it shows our key as a holder only if it was
		// one then, and grants are stable until the key is deleted.
		var err error
		if woke > 0 {
			es, rev, err = s.readSince(ctx, req.Name, woke)
		} else {
			es, rev, err = s.read(ctx, req.Name)
		}
		if err != nil {
			return nil, err
		}
		if find(es, key) < 0 {
			s.forget(key)
			es = nil
		}
	}
	if es == nil {
		v := newValue(req, now)
		get := s.getName(req.Name)
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, v.encode(), clientv3.WithLease(sess.id)), get).
			Else(get).
			Commit()
		if err != nil {
			return nil, err
		}
		created = resp.Succeeded
		rr := resp.Responses[len(resp.Responses)-1].GetResponseRange()
		es, rev = entries(rng, rr.Kvs), resp.Header.Revision
	}
	i := find(es, key)
	if i < 0 {
		return nil, errRetry // created and gone already: its lease ended
	}
	e := es[i]
	if !created && (e.exclusive() != (req.Mode == driver.Exclusive) || e.v.Limit != req.Limit) {
		return nil, driver.ErrModeConflict
	}
	granted, _ := judge(es, i)
	if !granted && req.Mode == driver.Shared && heldWithOtherLimit(es, i, req.Limit) {
		if created {
			if err := s.withdraw(ctx, key, e.rev); err != nil {
				return nil, err
			}
		}
		return nil, driver.ErrLimitConflict
	}
	if granted {
		s.mu.Lock()
		delete(s.pending, key)
		s.held[key] = heldKey{rev: e.rev, sess: sess}
		s.mu.Unlock()
		g := &driver.Grant{Token: uint64(e.rev), Created: e.v.Created, Renewed: now, Session: sess,
			// A key queued by this store and granted since is a new hold;
			// any other key that existed was held (or queued elsewhere)
			// by this owner: a re-acquire.
			Extended: !created && p == nil}
		if created {
			return g, nil
		}
		if e.lease != sess.id || !e.v.sameAs(req) {
			if err := s.rewrite(ctx, key, &e, req, sess); err != nil {
				return nil, err
			}
		}
		return g, nil
	}
	if !req.Queue {
		if created {
			// Not granted and not to wait: take the key back at once.
			if err := s.withdraw(ctx, key, e.rev); err != nil {
				return nil, err
			}
		}
		return nil, &driver.Busy{}
	}
	if !created && e.lease != sess.id {
		// Queued under a session that ended: bind it to the live one,
		// keeping its place.
		if err := s.rewrite(ctx, key, &e, req, sess); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	s.pending[key] = &pendingKey{rev: e.rev, snap: es, snapRev: rev, sess: sess}
	s.mu.Unlock()
	return nil, &driver.Busy{}
}

// withdraw deletes the key this request created at rev, which was not
// granted and must not wait.
func (s *Store) withdraw(ctx context.Context, key string, rev int64) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), defaultDialTimeout)
	defer cancel()
	_, err := s.cli.Txn(dctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return fmt.Errorf("etcd: withdrawing a request that was not granted: %w", err)
	}
	return nil
}

// heldWithOtherLimit reports whether the name's holders (its first keys)
// are shared with a limit other than limit, judging the keys other than
// the i-th.
func heldWithOtherLimit(es []entry, i, limit int) bool {
	rest := append(slices.Clone(es[:i]), es[i+1:]...)
	return len(rest) > 0 && !rest[0].exclusive() && rest[0].v.Limit != limit
}

// rewrite updates an existing key's value (meta, host, TTL) and binds it to
// sess, keeping its create revision; errRetry if the key is gone.
func (s *Store) rewrite(ctx context.Context, key string, e *entry, req *driver.Request, sess *session) error {
	v := e.v
	if !e.ok {
		v = newValue(req, time.Now())
	}
	v.Host, v.TTL, v.Meta = req.Host, req.TTL, maps.Clone(req.Meta)
	resp, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", e.rev)).
		Then(clientv3.OpPut(key, v.encode(), clientv3.WithLease(sess.id))).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errRetry
	}
	return nil
}

func (s *Store) forget(key string) {
	s.mu.Lock()
	delete(s.pending, key)
	delete(s.held, key)
	s.mu.Unlock()
}

// names returns the distinct names of a batch, in first-seen order.
func names[T any](xs []T, name func(T) string) []string {
	var ns []string
	seen := map[string]bool{}
	for _, x := range xs {
		if n := name(x); !seen[n] {
			seen[n] = true
			ns = append(ns, n)
		}
	}
	return ns
}

// Renew reports, for each hold, whether its key exists and is granted: a
// session-bound hold needs no renewal (its session is kept alive), so
// nothing is written.
func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	out := make([]*driver.Grant, len(holds))
	sess := s.currentSession()
	for start := 0; start < len(holds); start += maxTxnKeys {
		batch := holds[start:min(start+maxTxnKeys, len(holds))]
		ns := names(batch, func(h driver.Hold) string { return h.Name })
		ops := make([]clientv3.Op, len(ns))
		for i, n := range ns {
			ops[i] = s.getName(n)
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		for j, h := range batch {
			ni := slices.Index(ns, h.Name)
			es := entries(s.nameRange(h.Name), resp.Responses[ni].GetResponseRange().Kvs)
			i := find(es, s.key(h.Name, h.Owner))
			if i < 0 {
				continue
			}
			if granted, _ := judge(es, i); !granted {
				continue
			}
			g := &driver.Grant{Token: uint64(es[i].rev), Created: es[i].v.Created, Renewed: now, Extended: true}
			if sess != nil && es[i].lease == sess.id {
				g.Session = sess
			}
			out[start+j] = g
		}
	}
	return out, nil
}

// Release deletes each key and reports whether it was a holder (granted)
// when deleted. A session-bound hold outlives a lost release for as long as
// its session, so Release retries transient failures, and keys of this
// store it could not delete are deleted later by the session's goroutine
// (if they still have the create revision they had).
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	held := map[string]int64{}  // keys this store granted: create revisions
	known := map[string]int64{} // and those it queued too
	s.mu.Lock()
	for _, k := range keys {
		key := s.key(k.Name, k.Owner)
		if h, ok := s.held[key]; ok {
			held[key], known[key] = h.rev, h.rev
		} else if p := s.pending[key]; p != nil {
			known[key] = p.rev
		}
		delete(s.held, key)
		delete(s.pending, key)
		delete(s.orphans, key)
	}
	s.mu.Unlock()
	var out []bool
	err := driver.Retry(ctx, 4, 50*time.Millisecond, transient, func() error {
		var err error
		out, err = s.release(ctx, keys, held)
		return err
	})
	if err != nil {
		s.mu.Lock()
		if !s.closed {
			maps.Copy(s.orphans, known)
		}
		s.mu.Unlock()
		return nil, err
	}
	return out, nil
}

func (s *Store) release(ctx context.Context, keys []driver.Key, held map[string]int64) ([]bool, error) {
	if len(keys) == 1 {
		key := s.key(keys[0].Name, keys[0].Owner)
		if rev, ok := held[key]; ok {
			return s.releaseHeld(ctx, key, rev)
		}
	}
	out := make([]bool, len(keys))
	for start := 0; start < len(keys); start += maxTxnKeys {
		batch := keys[start:min(start+maxTxnKeys, len(keys))]
		ns := names(batch, func(k driver.Key) string { return k.Name })
		ops := make([]clientv3.Op, 0, len(ns)+len(batch))
		for _, n := range ns {
			ops = append(ops, s.getName(n))
		}
		seen := map[string]bool{}
		for _, k := range batch {
			if key := s.key(k.Name, k.Owner); !seen[key] {
				seen[key] = true
				ops = append(ops, clientv3.OpDelete(key))
			}
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		clear(seen)
		for j, k := range batch {
			key := s.key(k.Name, k.Owner)
			if seen[key] {
				continue // a duplicate: released once
			}
			seen[key] = true
			ni := slices.Index(ns, k.Name)
			es := entries(s.nameRange(k.Name), resp.Responses[ni].GetResponseRange().Kvs)
			if i := find(es, key); i >= 0 {
				out[start+j], _ = judge(es, i)
			}
		}
	}
	return out, nil
}

// cleanOrphans deletes the keys whose release failed, if they still have
// the create revision they had then (a key made since is another hold).
func (s *Store) cleanOrphans(ctx context.Context) {
	s.mu.Lock()
	orphans := maps.Clone(s.orphans)
	s.mu.Unlock()
	for key, rev := range orphans {
		_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.orphans[key] == rev {
			delete(s.orphans, key)
		}
		s.mu.Unlock()
	}
}

// transient reports whether a failed call may succeed if repeated: the
// server or its leader was unreachable for a moment.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed) {
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	return status.Code(err) == codes.Unavailable
}

// releaseHeld releases a key this store granted, with one plain delete:
// if the key deleted still had the create revision it had when granted, it
// was still a holder (grants are stable). If it had another (the hold
// ended, by an administrator's release or its session's end, and the owner
// queued or acquired the name anew), that later entry is deleted too, as
// any release of the owner would, but the hold the caller released was
// gone: it reports false.
func (s *Store) releaseHeld(ctx context.Context, key string, rev int64) ([]bool, error) {
	resp, err := s.cli.Delete(ctx, key, clientv3.WithPrevKV())
	if err != nil {
		return nil, err
	}
	return []bool{len(resp.PrevKvs) == 1 && resp.PrevKvs[0].CreateRevision == rev}, nil
}

// List reads the keys of one name, of the names with a prefix (one key
// range, thanks to the hex encoding), or of the whole store, and reports
// each as a holder or a queued request. Holds live as long as their
// session: Expires and Left are zero.
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	var rng string
	switch {
	case f.Name != "":
		rng = s.nameRange(f.Name)
	case f.Prefix != "":
		rng = s.prefix + encodeName(f.Prefix)
	default:
		rng = s.prefix
	}
	resp, err := s.cli.Get(ctx, rng, clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	// Group by name, keeping each name's keys in create-revision order.
	type group struct {
		name string
		rng  string
		kvs  []int
	}
	var groups []*group
	byName := map[string]*group{}
	for i, kv := range resp.Kvs {
		name, _, ok := s.splitKey(string(kv.Key))
		if !ok || (f.Name != "" && name != f.Name) || !strings.HasPrefix(name, f.Prefix) {
			continue
		}
		g := byName[name]
		if g == nil {
			g = &group{name: name, rng: s.nameRange(name)}
			byName[name] = g
			groups = append(groups, g)
		}
		g.kvs = append(g.kvs, i)
	}
	var out []driver.Holder
	for _, g := range groups {
		kvs := make([]*mvccpb.KeyValue, 0, len(g.kvs))
		for _, i := range g.kvs {
			kvs = append(kvs, resp.Kvs[i])
		}
		es := entries(g.rng, kvs)
		for i := range es {
			if f.Owner != "" && es[i].owner != f.Owner {
				continue
			}
			out = append(out, holder(g.name, es, i))
		}
	}
	return out, nil
}

// Purge has nothing to do: keys go with their session's lease.
func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	if s.isClosed() {
		return nil, ErrClosed
	}
	return nil, nil
}
