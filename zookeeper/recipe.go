package zookeeper

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/baton-go/baton/driver"
)

// node is a request node this session created.
type node struct {
	path, parent, name string
	mode               driver.Mode
	limit              int
	czxid              int64
	ctime, mtime       int64 // ms, server clock
	granted            bool
	data               nodeData
}

// waitOn is what a queued request waits for: the deletion (or change) of
// path, or, when path is empty, a change of the parent's children since
// cversion.
type waitOn struct {
	path     string
	cversion int32
	// own is the request's node; grantIfGone says that the deletion of
	// path alone grants it (nodes ahead only ever go away).
	own         string
	grantIfGone bool
	cleared     bool // path was deleted while own still existed: granted
}

// nodeData is the JSON data of a request node.
type nodeData struct {
	Mode    string            `json:"mode"`
	Limit   int               `json:"limit,omitempty"`
	Host    string            `json:"host,omitempty"`
	Meta    map[string]string `json:"meta,omitempty"`
	TTL     string            `json:"ttl"`
	Created time.Time         `json:"created"` // the requester's clock
}

func newData(req *driver.Request) nodeData {
	return nodeData{
		Mode: req.Mode.String(), Limit: req.Limit, Host: req.Host, Meta: maps.Clone(req.Meta),
		TTL: req.TTL.String(), Created: time.Now().UTC().Truncate(time.Millisecond),
	}
}

func (d *nodeData) bytes() []byte {
	b, _ := json.Marshal(d)
	return b
}

func (d *nodeData) ttl() time.Duration {
	t, _ := time.ParseDuration(d.TTL)
	return t
}

// escape writes every byte of s other than ASCII letters, digits, '-' and
// '_' as %XX: a valid node name that cannot be ".", ".." or contain "/",
// one-to-one, and such that escape(p) is a prefix of escape(s) exactly
// when p is a prefix of s.
func escape(s string) string { return driver.EscapeName(s, '%', "-_") }

// unescape reverses escape.
func unescape(s string) (string, bool) {
	if !strings.Contains(s, "%") {
		return s, true
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b = append(b, s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b = append(b, byte(v))
		i += 2
	}
	return string(b), true
}

func (s *Store) parentPath(name string) string { return s.root + "/" + escape(name) }

// childPrefix is the name of a request node before ZooKeeper's sequence
// number: <escaped owner>-x- or <escaped owner>-s<limit>-.
func childPrefix(owner string, mode driver.Mode, limit int) string {
	tag := "x"
	if mode == driver.Shared {
		tag = "s" + strconv.Itoa(limit)
	}
	return escape(owner) + "-" + tag + "-"
}

// child is a request node as its name describes it.
type child struct {
	name  string
	owner string
	mode  driver.Mode
	limit int
	seq   int64
}

func parseChild(name string) (child, bool) {
	c := child{name: name}
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return c, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return c, false
	}
	c.seq = seq
	rest := name[:i]
	j := strings.LastIndexByte(rest, '-')
	if j < 0 {
		return c, false
	}
	switch tag := rest[j+1:]; {
	case tag == "x":
		c.mode = driver.Exclusive
	case strings.HasPrefix(tag, "s"):
		l, err := strconv.Atoi(tag[1:])
		if err != nil || l < 0 {
			return c, false
		}
		c.mode, c.limit = driver.Shared, l
	default:
		return c, false
	}
	owner, ok := unescape(rest[:j])
	if !ok || owner == "" {
		return c, false
	}
	c.owner = owner
	return c, true
}

// queue parses and orders children; names not made by this store are
// ignored.
func queue(names []string) []child {
	cs := make([]child, 0, len(names))
	for _, n := range names {
		if c, ok := parseChild(n); ok {
			cs = append(cs, c)
		}
	}
	slices.SortFunc(cs, func(a, b child) int { return int(a.seq - b.seq) })
	return cs
}

// verdict applies the grant rules to cs[i]: whether it is granted and,
// if not, the index of the node it waits for (-1: any node ahead). A
// shared node is granted when every node ahead of it is shared with its
// limit, and, for a limit L, fewer than L are: the holders are always the
// first nodes, and a node once granted stays granted until it goes
// (package lockstate's rules, by position).
func verdict(cs []child, i int) (bool, int) {
	c := cs[i]
	if c.mode == driver.Exclusive {
		return i == 0, i - 1
	}
	for j := i - 1; j >= 0; j-- {
		if cs[j].mode == driver.Exclusive || cs[j].limit != c.limit {
			return false, j
		}
	}
	if c.limit > 0 && i >= c.limit {
		return false, -1
	}
	return true, 0
}

// verdicts is verdict for every node, in one pass.
func verdicts(cs []child) []bool {
	out := make([]bool, len(cs))
	for i, c := range cs {
		if c.mode == driver.Exclusive {
			out[i] = i == 0
			continue
		}
		out[i] = (c.limit == 0 || i < c.limit) && (i == 0 || out[i-1] && cs[i-1].mode == driver.Shared && cs[i-1].limit == c.limit)
	}
	return out
}

// heldWithOtherLimit reports whether the name's holders (its first nodes)
// are shared with a limit other than limit, judging the nodes other than
// cs[i].
func heldWithOtherLimit(cs []child, i, limit int) bool {
	rest := append(slices.Clone(cs[:i]), cs[i+1:]...)
	return len(rest) > 0 && rest[0].mode == driver.Shared && rest[0].limit != limit
}

func index(cs []child, name string) int {
	for i := range cs {
		if cs[i].name == name {
			return i
		}
	}
	return -1
}

func (sess *session) node(k nodeKey) (*node, bool) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	n := sess.nodes[k]
	fresh := sess.fresh[k]
	delete(sess.fresh, k)
	return n, fresh
}

func (sess *session) remember(k nodeKey, n *node) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.nodes != nil {
		sess.nodes[k] = n
	}
}

func (sess *session) forget(k nodeKey) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	delete(sess.nodes, k)
	delete(sess.waits, k)
	delete(sess.fresh, k)
}

func (sess *session) setGranted(k nodeKey, n *node) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	n.granted = true
	delete(sess.waits, k)
}

func (sess *session) cleared(k nodeKey) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	w := sess.waits[k]
	return w != nil && w.cleared
}

func (sess *session) setWait(k nodeKey, w *waitOn) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if w == nil {
		delete(sess.waits, k)
	} else {
		sess.waits[k] = w
	}
}

func ms(t int64) time.Time { return time.UnixMilli(t) }

func (n *node) grant(sess *session, extended bool) *driver.Grant {
	return &driver.Grant{Token: uint64(n.czxid), Created: ms(n.ctime), Renewed: ms(n.mtime), Extended: extended, Session: sess}
}

// Acquire implements driver.Store: see the package documentation for the
// recipe.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	var g *driver.Grant
	err := s.inSession(ctx, func(sess *session) error {
		var err error
		g, err = s.acquire(ctx, sess, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

func (s *Store) acquire(ctx context.Context, sess *session, req *driver.Request) (*driver.Grant, error) {
	k := nodeKey{req.Name, req.Owner}
	parent := s.parentPath(req.Name)
	s.unscheduleCleanup(parent)
	for range 5 {
		n, fresh := sess.node(k)
		if n != nil && (n.mode != req.Mode || n.limit != req.Limit) {
			if n.granted {
				return nil, driver.ErrModeConflict
			}
			// A queue entry in another mode: queue again in this one.
			if err := s.deleteNode(ctx, sess, n.path); err != nil {
				return nil, err
			}
			sess.forget(k)
			n = nil
		}
		if n != nil && n.granted {
			data := newData(req)
			data.Created = n.data.Created
			var st *zk.Stat
			err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
				st, err = c.Set(n.path, data.bytes(), -1)
				return err
			})
			switch {
			case err == nil:
				sess.mu.Lock()
				n.mtime, n.data = st.Mtime, data
				sess.mu.Unlock()
				return n.grant(sess, true), nil
			case errors.Is(err, zk.ErrNoNode):
				sess.forget(k) // released by someone else: ask anew
				continue
			default:
				return nil, err
			}
		}
		if n != nil && sess.cleared(k) {
			// The node this one waited for is gone, and that was all that
			// kept it out (see watch.Wait).
			sess.setGranted(k, n)
			return n.grant(sess, false), nil
		}
		if n != nil && fresh && req.Queue {
			// Refused a moment ago, and the watch that baton just started
			// checks the blocker before it waits: no need to ask again.
			return nil, &driver.Busy{}
		}
		created := n == nil
		if n == nil {
			var alone bool
			var err error
			n, alone, err = s.create(ctx, sess, req, parent)
			if err != nil {
				return nil, err
			}
			if alone {
				sess.setGranted(k, n)
				return n.grant(sess, false), nil
			}
		}
		g, err := s.judge(ctx, sess, req, n, created)
		if errors.Is(err, errGone) {
			continue
		}
		return g, err
	}
	return nil, &driver.Busy{}
}

// errGone: the request's node vanished (an administrator released it);
// the request starts again.
var errGone = errors.New("zookeeper: request node vanished")

// create makes the request's node, with the parent's data in the same
// transaction: the parent's stat after it gives the node's creation zxid
// (Mzxid) and time, and whether the node is alone (NumChildren 1).
func (s *Store) create(ctx context.Context, sess *session, req *driver.Request, parent string) (*node, bool, error) {
	k := nodeKey{req.Name, req.Owner}
	prefix := childPrefix(req.Owner, req.Mode, req.Limit)
	data := newData(req)
	raw := data.bytes()
	var n *node
	alone := false
	lostReply := false
	err := s.retry(ctx, sess, func() error {
		if lostReply {
			// The create may have happened before the connection broke:
			// look for it, so as not to leave a node behind.
			found, err := s.findOwn(ctx, sess, parent, req, prefix)
			if err != nil {
				return err
			}
			if found != nil {
				found.data = data
				n = found
				return nil
			}
			lostReply = false
		}
		for range 10 {
			var res []zk.MultiResponse
			err := s.call(ctx, func() (err error) {
				res, err = sess.conn.Multi(
					&zk.CreateRequest{Path: parent + "/" + prefix, Data: raw, Acl: s.acl, Flags: zk.FlagEphemeralSequential},
					&zk.SetDataRequest{Path: parent, Data: []byte(req.Name), Version: -1})
				return err
			})
			switch {
			case err == nil && len(res) == 2 && res[1].Stat != nil:
				st := res[1].Stat
				p := res[0].String
				n = &node{
					path: p, parent: parent, name: p[strings.LastIndexByte(p, '/')+1:],
					mode: req.Mode, limit: req.Limit, czxid: st.Mzxid, ctime: st.Mtime, mtime: st.Mtime, data: data,
				}
				alone = st.NumChildren == 1
				return nil
			case err == nil:
				return errors.New("zookeeper: unexpected multi response")
			case errors.Is(err, zk.ErrNoNode):
				if err := s.makeParent(ctx, sess, parent, req.Name); err != nil {
					return err
				}
				continue
			case retryable(err):
				lostReply = true
				return err
			default:
				return err
			}
		}
		return errors.New("zookeeper: lock parent keeps vanishing")
	})
	if err != nil {
		return nil, false, err
	}
	sess.remember(k, n)
	return n, alone, nil
}

// findOwn looks for a node of req made by this session.
func (s *Store) findOwn(ctx context.Context, sess *session, parent string, req *driver.Request, prefix string) (*node, error) {
	var names []string
	err := s.call(ctx, func() (err error) {
		names, _, err = sess.conn.Children(parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	for _, c := range queue(names) {
		if !strings.HasPrefix(c.name, prefix) {
			continue
		}
		p := parent + "/" + c.name
		var st *zk.Stat
		var ok bool
		if err := s.call(ctx, func() (err error) {
			ok, st, err = sess.conn.Exists(p)
			return err
		}); err != nil {
			return nil, err
		}
		if ok && st.EphemeralOwner == sess.sessionID() {
			return &node{
				path: p, parent: parent, name: c.name, mode: req.Mode, limit: req.Limit,
				czxid: st.Czxid, ctime: st.Ctime, mtime: st.Mtime,
			}, nil
		}
	}
	return nil, nil
}

// makeParent creates the lock's parent, a container node holding the
// name, and the root if it is missing.
func (s *Store) makeParent(ctx context.Context, sess *session, parent, name string) error {
	for range 10 {
		err := s.do(ctx, sess, func(c *zk.Conn) error {
			_, err := c.CreateContainer(parent, []byte(name), zk.FlagContainer, s.acl)
			return err
		})
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return nil
		case errors.Is(err, zk.ErrNoNode):
			if err := s.makeRoot(ctx, sess); err != nil {
				return err
			}
		default:
			return err
		}
	}
	return errors.New("zookeeper: cannot create " + parent)
}

func (s *Store) makeRoot(ctx context.Context, sess *session) error {
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(s.root, "/"), "/") {
		p += "/" + part
		err := s.do(ctx, sess, func(c *zk.Conn) error {
			_, err := c.Create(p, nil, zk.FlagPersistent, s.acl)
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// judge lists the queue and applies the grant rules to n, which this call
// created if created is set.
func (s *Store) judge(ctx context.Context, sess *session, req *driver.Request, n *node, created bool) (*driver.Grant, error) {
	k := nodeKey{req.Name, req.Owner}
	var names []string
	var pst *zk.Stat
	err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
		names, pst, err = c.Children(n.parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		sess.forget(k)
		return nil, errGone
	}
	if err != nil {
		return nil, err
	}
	cs := queue(names)
	i := index(cs, n.name)
	if i < 0 {
		sess.forget(k)
		return nil, errGone
	}
	for j := 0; j < i; j++ {
		if cs[j].owner == req.Owner {
			if drop, err := s.abandoned(ctx, sess, n.parent+"/"+cs[j].name); err != nil {
				return nil, err
			} else if drop {
				cs = slices.Delete(cs, j, j+1)
				i, j = i-1, j-1
				continue
			}
			// The owner already has a node, made elsewhere (another
			// store, or a create this store gave up on): that one counts.
			if err := s.deleteNode(ctx, sess, n.path); err != nil {
				return nil, err
			}
			sess.forget(k)
			return s.adopt(ctx, sess, req, cs, j)
		}
	}
	granted, blk := verdict(cs, i)
	if granted {
		sess.setGranted(k, n)
		return n.grant(sess, false), nil
	}
	if req.Mode == driver.Shared && heldWithOtherLimit(cs, i, req.Limit) {
		if created {
			if err := s.deleteNode(ctx, sess, n.path); err != nil {
				return nil, err
			}
			sess.forget(k)
		}
		return nil, driver.ErrLimitConflict
	}
	if !req.Queue {
		// Not to wait: take back the node this call made (one queued
		// before keeps its place).
		if created {
			if err := s.deleteNode(ctx, sess, n.path); err != nil {
				return nil, err
			}
			sess.forget(k)
		}
		return nil, &driver.Busy{}
	}
	w := &waitOn{cversion: pst.Cversion, own: n.path}
	if blk >= 0 {
		w.path = n.parent + "/" + cs[blk].name
		rest := append(slices.Clone(cs[:blk]), cs[blk+1:i+1]...)
		w.grantIfGone, _ = verdict(rest, len(rest)-1)
	}
	sess.setWait(k, w)
	return nil, &driver.Busy{}
}

// abandoned deletes the node at p if it belongs to a session this store
// has given up, and reports whether p is gone. Such a node must not be
// adopted: the server may expire its session at any moment and grant the
// lock to the next waiter, and the adopter would learn it only afterwards
// (a Lock that retried after its session was judged lost once shared the
// lock so, while its server restarted).
func (s *Store) abandoned(ctx context.Context, sess *session, p string) (bool, error) {
	var ok bool
	var st *zk.Stat
	err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
		ok, st, err = c.Exists(p)
		return err
	})
	if err != nil {
		return false, err
	}
	if !ok {
		return true, nil
	}
	if st.EphemeralOwner == sess.sessionID() || !s.gaveUp(st.EphemeralOwner) {
		return false, nil
	}
	return true, s.deleteNode(ctx, sess, p)
}

func (s *Store) gaveUp(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.givenUp[id]
}

// adopt re-acquires the owner's node cs[j], made elsewhere.
func (s *Store) adopt(ctx context.Context, sess *session, req *driver.Request, cs []child, j int) (*driver.Grant, error) {
	c := cs[j]
	if c.mode != req.Mode || c.limit != req.Limit {
		return nil, driver.ErrModeConflict
	}
	if granted, _ := verdict(cs, j); !granted {
		return nil, &driver.Busy{}
	}
	p := s.parentPath(req.Name) + "/" + c.name
	data := newData(req)
	var st *zk.Stat
	err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
		st, err = c.Set(p, data.bytes(), -1)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, &driver.Busy{}
	}
	if err != nil {
		return nil, err
	}
	g := &driver.Grant{Token: uint64(st.Czxid), Created: ms(st.Ctime), Renewed: ms(st.Mtime), Extended: true}
	if st.EphemeralOwner == sess.sessionID() {
		n := &node{
			path: p, parent: s.parentPath(req.Name), name: c.name, mode: c.mode, limit: c.limit,
			czxid: st.Czxid, ctime: st.Ctime, mtime: st.Mtime, granted: true, data: data,
		}
		sess.remember(nodeKey{req.Name, req.Owner}, n)
		g.Session = sess
	} else {
		g.Session = s.foreign(sess, p)
	}
	return g, nil
}

// deleteNode deletes a node; gone already is fine.
func (s *Store) deleteNode(ctx context.Context, sess *session, p string) error {
	err := s.do(ctx, sess, func(c *zk.Conn) error { return c.Delete(p, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// foreign is the session of a hold that lives in another store's
// session: it ends when the node goes, or when this store's session does.
// baton is told of the loss only once the node is gone, when someone else
// may already hold the lock: re-acquiring a hold from another session
// shares it, it does not move it.
func (s *Store) foreign(sess *session, p string) driver.Session {
	fs := &foreignSession{done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		fs.end(ErrClosed)
		return fs
	}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stop := context.AfterFunc(ctxOf(sess.done), cancel)
		defer stop()
		stop2 := context.AfterFunc(ctxOf(s.quit), cancel)
		defer stop2()
		for {
			var ch <-chan zk.Event
			err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
				_, _, ch, err = c.GetW(p)
				return err
			})
			switch {
			case errors.Is(err, zk.ErrNoNode):
				fs.end(errHoldGone)
				return
			case err != nil:
				fs.end(err)
				return
			}
			select {
			case ev := <-ch:
				if ev.Type == zk.EventNodeDataChanged {
					continue
				}
				fs.end(errHoldGone)
				return
			case <-sess.done:
				fs.end(sess.Err())
				return
			case <-s.quit:
				fs.end(ErrClosed)
				return
			}
		}
	}()
	return fs
}

var errHoldGone = errors.New("zookeeper: the hold's node is gone")

type foreignSession struct {
	once sync.Once
	done chan struct{}
	err  error
}

func (f *foreignSession) end(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}

func (f *foreignSession) Done() <-chan struct{} { return f.done }

func (f *foreignSession) Err() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// Renew implements driver.Store. A hold lives as long as its session, so
// renewing only checks that its node still exists (and records a new TTL
// in its data); the result is nil for a hold that is gone or only queued.
func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	out := make([]*driver.Grant, len(holds))
	errs := make([]error, len(holds))
	parallel(len(holds), func(i int) {
		errs[i] = s.inSession(ctx, func(sess *session) error {
			var err error
			out[i], err = s.renew(ctx, sess, holds[i])
			return err
		})
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) renew(ctx context.Context, sess *session, h driver.Hold) (*driver.Grant, error) {
	k := nodeKey{h.Name, h.Owner}
	if n, _ := sess.node(k); n != nil && n.granted {
		var st *zk.Stat
		var err error
		if n.data.ttl() != h.TTL {
			sess.mu.Lock()
			data := n.data
			sess.mu.Unlock()
			data.TTL = h.TTL.String()
			err = s.do(ctx, sess, func(c *zk.Conn) (err error) {
				st, err = c.Set(n.path, data.bytes(), -1)
				return err
			})
			if err == nil {
				sess.mu.Lock()
				n.data, n.mtime = data, st.Mtime
				sess.mu.Unlock()
			}
		} else {
			var ok bool
			err = s.do(ctx, sess, func(c *zk.Conn) (err error) {
				ok, _, err = c.Exists(n.path)
				return err
			})
			if err == nil && !ok {
				err = zk.ErrNoNode
			}
		}
		switch {
		case errors.Is(err, zk.ErrNoNode):
			sess.forget(k)
			return nil, nil
		case err != nil:
			return nil, err
		}
		g := n.grant(sess, false)
		g.Renewed = time.Now()
		return g, nil
	}
	parent := s.parentPath(h.Name)
	cs, err := s.children(ctx, sess, parent)
	if err != nil || len(cs) == 0 {
		return nil, err
	}
	ok := verdicts(cs)
	for i, c := range cs {
		if c.owner != h.Owner {
			continue
		}
		if !ok[i] {
			return nil, nil
		}
		p := parent + "/" + c.name
		var raw []byte
		var st *zk.Stat
		err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
			raw, st, err = c.Get(p)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if st.EphemeralOwner != sess.sessionID() && s.gaveUp(st.EphemeralOwner) {
			return nil, s.deleteNode(ctx, sess, p) // see abandoned
		}
		var d nodeData
		if json.Unmarshal(raw, &d) == nil && d.ttl() != h.TTL {
			d.TTL = h.TTL.String()
			if nst, err := s.setData(ctx, sess, p, d.bytes(), st.Version); err == nil {
				st = nst
			}
		}
		g := &driver.Grant{Token: uint64(st.Czxid), Created: ms(st.Ctime), Renewed: time.Now()}
		if st.EphemeralOwner == sess.sessionID() {
			g.Session = sess
		}
		return g, nil
	}
	return nil, nil
}

func (s *Store) setData(ctx context.Context, sess *session, p string, data []byte, version int32) (*zk.Stat, error) {
	var st *zk.Stat
	err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
		st, err = c.Set(p, data, version)
		return err
	})
	return st, err
}

// children returns a parent's queue (nil if the parent is gone).
func (s *Store) children(ctx context.Context, sess *session, parent string) ([]child, error) {
	var names []string
	err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
		names, _, err = c.Children(parent)
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return queue(names), nil
}

// Release implements driver.Store: it deletes the owner's node of each
// name, and reports whether it was granted.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	out := make([]bool, len(keys))
	errs := make([]error, len(keys))
	parallel(len(keys), func(i int) {
		errs[i] = s.inSession(ctx, func(sess *session) error {
			var err error
			out[i], err = s.release(ctx, sess, keys[i])
			return err
		})
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Store) release(ctx context.Context, sess *session, key driver.Key) (bool, error) {
	k := nodeKey{key.Name, key.Owner}
	parent := s.parentPath(key.Name)
	if n, _ := sess.node(k); n != nil {
		granted := n.granted
		if !granted {
			// Queued, as far as this store knows: the nodes ahead may
			// have gone since, which granted it.
			cs, err := s.children(ctx, sess, parent)
			if err != nil {
				return false, err
			}
			if i := index(cs, n.name); i >= 0 {
				granted, _ = verdict(cs, i)
			}
		}
		deleted, err := s.delete(ctx, sess, n.path)
		if err != nil {
			return false, err
		}
		sess.forget(k)
		if deleted {
			s.scheduleCleanup(sess, parent)
			return granted, nil
		}
	}
	cs, err := s.children(ctx, sess, parent)
	if err != nil {
		return false, err
	}
	ok := verdicts(cs)
	held, any := false, false
	for i, c := range cs {
		if c.owner != key.Owner {
			continue
		}
		deleted, err := s.delete(ctx, sess, parent+"/"+c.name)
		if err != nil {
			return held, err
		}
		held = held || deleted && ok[i]
		any = any || deleted
	}
	if any {
		s.scheduleCleanup(sess, parent)
	}
	return held, nil
}

// delete deletes p and reports whether this call deleted it: a retry that
// finds the node gone after a lost reply counts as deleted.
func (s *Store) delete(ctx context.Context, sess *session, p string) (bool, error) {
	sent := false
	err := s.retry(ctx, sess, func() error {
		err := s.call(ctx, func() error { return sess.conn.Delete(p, -1) })
		if errors.Is(err, zk.ErrNoNode) && sent {
			return nil
		}
		if retryable(err) {
			sent = true
		}
		return err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	return err == nil, err
}

// List implements driver.Store. A hold lives as long as its session, so
// it is listed with Expires and Left zero (see driver.Holder).
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	var out []driver.Holder
	err := s.inSession(ctx, func(sess *session) error {
		var err error
		out, err = s.list(ctx, sess, f)
		return err
	})
	return out, err
}

func (s *Store) list(ctx context.Context, sess *session, f *driver.Filter) ([]driver.Holder, error) {
	var parents []string
	if f.Name != "" {
		parents = []string{escape(f.Name)}
	} else {
		var names []string
		err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
			names, _, err = c.Children(s.root)
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		pre := escape(f.Prefix)
		for _, n := range names {
			if strings.HasPrefix(n, pre) {
				parents = append(parents, n)
			}
		}
	}
	var mu sync.Mutex
	var out []driver.Holder
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	parallel(len(parents), func(i int) {
		name, ok := unescape(parents[i])
		if !ok {
			return
		}
		parent := s.root + "/" + parents[i]
		cs, err := s.children(ctx, sess, parent)
		if err != nil {
			fail(err)
			return
		}
		granted := verdicts(cs)
		var pick []int
		for j, c := range cs {
			if (granted[j] || f.Queued) && (f.Owner == "" || c.owner == f.Owner) {
				pick = append(pick, j)
			}
		}
		hs := make([]*driver.Holder, len(pick))
		parallel(len(pick), func(x int) {
			c := cs[pick[x]]
			var raw []byte
			var st *zk.Stat
			err := s.do(ctx, sess, func(conn *zk.Conn) (err error) {
				raw, st, err = conn.Get(parent + "/" + c.name)
				return err
			})
			if errors.Is(err, zk.ErrNoNode) {
				return
			}
			if err != nil {
				fail(err)
				return
			}
			var d nodeData
			_ = json.Unmarshal(raw, &d)
			ttl := d.ttl()
			h := &driver.Holder{
				Name: name, Owner: c.owner, Mode: c.mode, Limit: c.limit, Queued: !granted[pick[x]],
				Host: d.Host, Meta: d.Meta, TTL: ttl,
				Created: ms(st.Ctime), Renewed: ms(st.Mtime),
			}
			if granted[pick[x]] {
				h.Token = uint64(st.Czxid)
			}
			hs[x] = h
		})
		mu.Lock()
		for _, h := range hs {
			if h != nil {
				out = append(out, *h)
			}
		}
		mu.Unlock()
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Purge implements driver.Store: holds never expire in place (they go
// with their session), so it only deletes empty lock parents, and returns
// no holders.
func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	err := s.inSession(ctx, func(sess *session) error {
		var names []string
		err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
			names, _, err = c.Children(s.root)
			return err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		errs := make([]error, len(names))
		parallel(len(names), func(i int) {
			err := s.do(ctx, sess, func(c *zk.Conn) error { return c.Delete(s.root+"/"+names[i], -1) })
			if err != nil && !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode) {
				errs[i] = err
			}
		})
		return errors.Join(errs...)
	})
	return nil, err
}

// Watch implements driver.Waiter: see Wait.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	k := nodeKey{req.Name, req.Owner}
	s.mu.Lock()
	sess := s.cur
	s.mu.Unlock()
	if sess != nil {
		sess.mu.Lock()
		if sess.waits[k] != nil {
			sess.fresh[k] = true
		}
		sess.mu.Unlock()
	}
	return &watch{s: s, k: k, parent: s.parentPath(req.Name)}, nil
}

// watch waits for the node that blocks a queued request.
type watch struct {
	s      *Store
	k      nodeKey
	parent string

	// the watches set by an earlier Wait that have not fired yet
	ch    <-chan zk.Event
	sess  *session
	on    waitOn
	epoch uint64
	// on the request's own node
	ownCh    <-chan zk.Event
	ownSess  *session
	ownPath  string
	ownEpoch uint64
}

// Wait implements driver.Watch. It sets a watch on the node that blocks
// the request (a data watch, which fires when the node is deleted and,
// unlike an exists watch, leaves nothing behind when the node is already
// gone), or on the parent's children for a shared request blocked only by
// its limit, and returns at once if that node is gone or those children
// changed since the last attempt; otherwise when the watch fires, the
// session ends, or ctx does. A watch that has not fired is kept for the
// next Wait.
//
// When the blocking node was the only thing keeping the request out, Wait
// also watches the request's own node: ZooKeeper delivers a session's
// watch events in the order of the changes, so if the blocker's deletion
// arrives while the own node's watch has not fired, and the connection did
// not break meanwhile (events replayed after a reconnection come in no
// particular order), the request was granted by that deletion, and the
// next attempt says so without listing the children again: a hand-off is
// one notification, not a notification and a round trip.
func (w *watch) Wait(ctx context.Context) error {
	s := w.s
	sess, err := s.live(ctx)
	if err != nil {
		return err
	}
	sess.mu.Lock()
	var on waitOn
	wo := sess.waits[w.k]
	if wo != nil {
		on = *wo
	}
	delete(sess.fresh, w.k)
	epoch := sess.epoch
	sess.mu.Unlock()
	if wo == nil || on.cleared {
		if on.cleared {
			return nil
		}
		// Nothing known to wait for: poll (baton bounds the wait).
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sess.done:
			return nil
		case <-s.quit:
			return ErrClosed
		}
	}
	if on.grantIfGone && (w.ownCh == nil || w.ownSess != sess || w.ownPath != on.own) {
		var ch <-chan zk.Event
		err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
			_, _, ch, err = c.GetW(on.own)
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode), errors.Is(err, errSessionLost):
			w.ownCh = nil
			return nil // the next attempt finds the node gone
		case err != nil:
			return err
		}
		w.ownCh, w.ownSess, w.ownPath, w.ownEpoch = ch, sess, on.own, epoch
	}
	key := on
	key.cleared = false
	if w.ch == nil || w.sess != sess || w.on != key {
		var ch <-chan zk.Event
		var st *zk.Stat
		err := s.do(ctx, sess, func(c *zk.Conn) (err error) {
			if on.path != "" {
				_, _, ch, err = c.GetW(on.path)
			} else {
				_, st, ch, err = c.ChildrenW(w.parent)
			}
			return err
		})
		switch {
		case errors.Is(err, zk.ErrNoNode), errors.Is(err, errSessionLost):
			w.ch = nil
			return nil
		case err != nil:
			return err
		}
		w.ch, w.sess, w.on, w.epoch = ch, sess, key, epoch
		if st != nil && st.Cversion != on.cversion {
			return nil // the children changed since the last attempt
		}
	}
	select {
	case ev := <-w.ch:
		w.ch = nil
		if ev.Type == zk.EventNodeDeleted && on.grantIfGone && w.ownCh != nil {
			select {
			case <-w.ownCh:
				w.ownCh = nil // the own node changed first
			default:
				sess.clear(w.k, wo, w.epoch, w.ownEpoch)
			}
		}
		return nil
	case <-w.ownCh:
		w.ownCh = nil
		return nil
	case <-sess.done:
		w.ch, w.ownCh = nil, nil
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.quit:
		return ErrClosed
	}
}

// clear records that wo's blocker went while the request's node still
// existed, if the connection held since both watches were set.
func (sess *session) clear(k nodeKey, wo *waitOn, epochs ...uint64) {
	if sess.tracker == nil {
		return // a caller-owned connection's epoch lags its events
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for _, e := range epochs {
		if e != sess.epoch {
			return
		}
	}
	if sess.waits[k] == wo {
		wo.cleared = true
	}
}

// Close implements driver.Watch.
func (w *watch) Close() error {
	w.ch, w.ownCh = nil, nil
	return nil
}

var (
	_ driver.Store  = (*Store)(nil)
	_ driver.Waiter = (*Store)(nil)
)

// WatchHolders implements driver.HolderWatcher: a children watch on the
// name's node (an exists watch while it has none), set before it returns
// and again by each Wait after it fired; a change of the children (a
// request, a grant, a release, a session's end) wakes it.
func (s *Store) WatchHolders(ctx context.Context, name string) (driver.Watch, error) {
	w := &holderWatch{s: s, parent: s.parentPath(name), cversion: -2}
	if _, err := w.arm(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

type holderWatch struct {
	s        *Store
	parent   string
	ch       <-chan zk.Event // the watch set, until it fires
	sess     *session
	cversion int32 // of the children when the watch was set; -1: no node
}

// arm sets the watch and reports whether the children changed since the
// last one was set.
func (w *holderWatch) arm(ctx context.Context) (bool, error) {
	sess, err := w.s.live(ctx)
	if err != nil {
		return false, err
	}
	var ch <-chan zk.Event
	cv := int32(-1)
	err = w.s.do(ctx, sess, func(c *zk.Conn) error {
		_, st, wch, err := c.ChildrenW(w.parent)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, _, wch, err = c.ExistsW(w.parent)
			if err == nil && ok {
				return errRetryWatch // created meanwhile
			}
			ch = wch
			return err
		}
		if err == nil {
			ch, cv = wch, st.Cversion
		}
		return err
	})
	if errors.Is(err, errRetryWatch) {
		return true, nil // the next Wait sets it again
	}
	if err != nil {
		return false, err
	}
	changed := w.cversion != -2 && cv != w.cversion
	w.ch, w.sess, w.cversion = ch, sess, cv
	return changed, nil
}

var errRetryWatch = errors.New("zookeeper: the node was created while the watch was set")

// Wait implements driver.Watch.
func (w *holderWatch) Wait(ctx context.Context) error {
	if w.ch == nil || isClosed(w.sess.done) {
		changed, err := w.arm(ctx)
		if err != nil || changed || w.ch == nil {
			return err
		}
	}
	select {
	case <-w.ch:
		w.ch = nil
		return nil
	case <-w.sess.done:
		w.ch = nil // a new session sets the watch again
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.s.quit:
		return ErrClosed
	}
}

// Close implements driver.Watch: ZooKeeper's watches cannot be removed;
// the one set fires once, or ends with the session.
func (w *holderWatch) Close() error { return nil }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
