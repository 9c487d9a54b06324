package mongo

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"regexp"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton/driver"
)

// entry is one document: a request of one owner for one name, holding or
// queued, alive or a tombstone.
type entry struct {
	ID      string    `bson:"_id"`
	Name    string    `bson:"n"`
	Ticket  int64     `bson:"t"` // place in the name's order, and fencing token
	Owner   string    `bson:"o"`
	Mode    int32     `bson:"m"`
	Limit   int32     `bson:"l"`
	Granted bool      `bson:"g"`
	Dead    bool      `bson:"x"`
	Ver     int64     `bson:"v"`   // changed by every write of the owner
	TTL     int64     `bson:"ttl"` // nanoseconds: the hold's TTL, or the queue TTL
	Created time.Time `bson:"c"`   // server time
	Renewed time.Time `bson:"r"`   // server time of the last write
	Host    string    `bson:"h,omitempty"`
	Meta    []kv      `bson:"meta,omitempty"`
}

// kv is one metadata pair; metadata is stored as pairs so that keys never
// become field names ("$", ".").
type kv struct {
	K string `bson:"k"`
	V string `bson:"v"`
}

// own is what this store knows of an entry it wrote last: its version,
// and until when, on this machine's clock, no one can take it over.
type own struct {
	id       string
	ver      int64
	ticket   int64
	granted  bool
	deadline time.Time
	lost     bool // a write came back after its deadline: never renew it
}

// seen is the observation of another entry: its version, and when this
// store first received it.
type seen struct {
	ver int64
	at  time.Time
}

// staleInsert bounds the time from the read an insert is based on to the
// insert's reply; a slower insert is kept only if the name's highest
// ticket shows that its ticket was never deleted (see the package
// documentation, "Tickets"). A variable for tests.
var staleInsert = 300 * time.Millisecond

// beforeInsert, when set by a test, runs between an acquire's read and
// its insert.
var beforeInsert func()

const (
	// pruneAfter is how long a tombstone is kept before it may be
	// deleted: more than twice staleInsert.
	pruneAfter = time.Second
	// pruneBatch is how many prunable tombstones of a name an acquire
	// lets gather before it deletes them.
	pruneBatch = 4
	// keepTickets is how many tickets below a name's highest are never
	// deleted: a slow insert whose ticket is within that many of the
	// highest cannot have reused a deleted one.
	keepTickets = 16
)

// patience is how long an entry must be seen unchanged before it is taken
// over: its TTL plus a margin for clocks that run at different rates.
func patience(ttl time.Duration) time.Duration { return ttl + ttl/50 + 5*time.Millisecond }

// margin is what the holder's own deadline keeps from its TTL, as baton's
// leases do.
func margin(ttl time.Duration) time.Duration { return driver.Margin(ttl) }

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newVer() int64 {
	var b [8]byte
	rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

func metaPairs(m map[string]string) []kv {
	if len(m) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(m))
	out := make([]kv, len(keys))
	for i, k := range keys {
		out[i] = kv{k, m[k]}
	}
	return out
}

func metaMap(p []kv) map[string]string {
	if len(p) == 0 {
		return nil
	}
	m := make(map[string]string, len(p))
	for _, e := range p {
		m[e.K] = e.V
	}
	return m
}

// state is one read of a name, judged by this store's observations.
type state struct {
	live  []entry // alive and not seen unchanged for their patience
	gone  []entry // alive in the store, but seen unchanged for their patience
	max   int64   // the highest ticket of the name, tombstones included
	prune []string
}

func (s *Store) read(ctx context.Context, name string) ([]entry, error) {
	cur, err := s.coll.Find(ctx, bson.D{{Key: "n", Value: name}})
	if err != nil {
		return nil, err
	}
	var es []entry
	if err := cur.All(ctx, &es); err != nil {
		return nil, err
	}
	return es, nil
}

// observe records what a read of name received at recv showed.
func (s *Store) observe(name, owner string, es []entry, recv time.Time) *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &state{}
	old, oldDead := s.seen[name], s.dead[name]
	now := make(map[string]seen, len(es))
	dead := map[string]time.Time{}
	for _, e := range es {
		st.max = max(st.max, e.Ticket)
		if e.Dead {
			at, ok := oldDead[e.ID]
			if !ok {
				at = recv
			}
			dead[e.ID] = at
			if recv.Sub(at) >= pruneAfter {
				st.prune = append(st.prune, e.ID)
			}
			continue
		}
		o, ok := old[e.ID]
		if !ok || o.ver != e.Ver {
			o = seen{ver: e.Ver, at: recv}
		}
		now[e.ID] = o
		if left := o.at.Add(patience(time.Duration(e.TTL))).Sub(recv); left <= 0 && e.Owner != owner {
			st.gone = append(st.gone, e)
		} else {
			st.live = append(st.live, e)
		}
	}
	// The highest tickets stay: the highest is the name's counter, and
	// the ones below it let a slow insert check its own (stale).
	st.prune = slices.DeleteFunc(st.prune, func(id string) bool { return ticketOf(es, id) >= st.max-keepTickets })
	if len(now) == 0 {
		delete(s.seen, name)
	} else {
		s.seen[name] = now
	}
	if len(dead) == 0 {
		delete(s.dead, name)
	} else {
		s.dead[name] = dead
	}
	return st
}

func ticketOf(es []entry, id string) int64 {
	for _, e := range es {
		if e.ID == id {
			return e.Ticket
		}
	}
	return 0
}

// grantable applies baton's grant rules (package lockstate) to a request
// whose place is ticket (0: a newcomer, behind everyone).
func grantable(req *driver.Request, live []entry, ticket int64) bool {
	n, excl := 0, false
	for _, e := range live {
		if e.Owner == req.Owner {
			continue
		}
		if !e.Granted && ticket != 0 && e.Ticket > ticket {
			continue // queued behind
		}
		n++
		// A request queued ahead for another limit keeps a shared one
		// out, as an exclusive one does.
		excl = excl || driver.Mode(e.Mode) == driver.Exclusive || !e.Granted && int(e.Limit) != req.Limit
	}
	if req.Mode == driver.Exclusive {
		return n == 0
	}
	return !excl && (req.Limit == 0 || n < req.Limit)
}

// limitConflict reports whether req is shared and the name is held shared
// with another limit.
func limitConflict(req *driver.Request, live []entry) bool {
	if req.Mode != driver.Shared {
		return false
	}
	for _, e := range live {
		if e.Granted && e.Owner != req.Owner && driver.Mode(e.Mode) == driver.Shared && int(e.Limit) != req.Limit {
			return true
		}
	}
	return false
}

func (s *Store) retryAfter(st *state, req *driver.Request, recv time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, e := range st.live {
		if e.Owner == req.Owner {
			continue
		}
		if o, ok := s.seen[req.Name][e.ID]; ok {
			if left := o.at.Add(patience(time.Duration(e.TTL))).Sub(recv); d == 0 || left < d {
				d = left
			}
		}
	}
	return max(d, time.Millisecond)
}

// Acquire implements driver.Store.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	if err := s.ensureIndexes(ctx); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sent := time.Now()
		es, err := s.read(ctx, req.Name)
		if err != nil {
			return nil, err
		}
		recv := time.Now()
		st := s.observe(req.Name, req.Owner, es, recv)
		if len(st.prune) >= pruneBatch {
			if err := s.pruneIDs(ctx, st.prune); err != nil {
				return nil, err
			}
		}
		if len(st.gone) > 0 {
			// Take over what was seen unchanged for its whole TTL, then
			// look again.
			if err := s.tombstone(ctx, st.gone, true); err != nil {
				return nil, err
			}
			continue
		}
		g, again, err := s.decide(ctx, req, st, sent, recv)
		if again && err == nil {
			continue
		}
		return g, err
	}
}

// decide makes one attempt from a read; again asks for a fresh read.
func (s *Store) decide(ctx context.Context, req *driver.Request, st *state, sent, recv time.Time) (g *driver.Grant, again bool, err error) {
	key := driver.Key{Name: req.Name, Owner: req.Owner}
	var mine *entry
	for i := range st.live {
		if e := &st.live[i]; e.Owner == req.Owner && (mine == nil || e.Granted && !mine.Granted) {
			mine = e
		}
	}
	if mine != nil && mine.Granted {
		if driver.Mode(mine.Mode) != req.Mode || int(mine.Limit) != req.Limit {
			return nil, false, driver.ErrModeConflict
		}
		ok, err := s.rewrite(ctx, key, mine, bson.D{
			{Key: "ttl", Value: int64(req.TTL)}, {Key: "h", Value: req.Host}, {Key: "meta", Value: metaPairs(req.Meta)},
		}, req.TTL)
		if err != nil || !ok {
			if err == nil && s.isLost(key, mine.ID) {
				err = s.tombstone(ctx, []entry{*mine}, false)
			}
			return nil, true, err
		}
		now := time.Now()
		return &driver.Grant{Token: uint64(mine.Ticket), Created: mine.Created, Renewed: now, Expires: now.Add(req.TTL), Extended: true}, false, nil
	}
	if mine != nil && (driver.Mode(mine.Mode) != req.Mode || int(mine.Limit) != req.Limit) {
		// A queue entry of an earlier request in another mode: drop it.
		return nil, true, s.tombstone(ctx, []entry{*mine}, false)
	}
	if limitConflict(req, st.live) {
		return nil, false, driver.ErrLimitConflict
	}
	if mine != nil {
		if grantable(req, st.live, mine.Ticket) && mine.Ticket < st.max {
			// Later tickets exist, and some may have been granted (a
			// shared request can be granted past a queued one): the
			// grant takes a fresh ticket, so that tokens grow in the
			// order of grants, and the queue entry goes.
			g, again, err := s.insert(ctx, req, st, sent, recv, true)
			if err == nil && g != nil {
				err = s.tombstone(ctx, []entry{*mine}, false)
			}
			return g, again, err
		}
		if grantable(req, st.live, mine.Ticket) {
			ok, err := s.rewrite(ctx, key, mine, bson.D{
				{Key: "g", Value: true}, {Key: "ttl", Value: int64(req.TTL)}, {Key: "h", Value: req.Host},
				{Key: "meta", Value: metaPairs(req.Meta)},
			}, req.TTL, "c")
			if err != nil || !ok {
				if err == nil && s.isLost(key, mine.ID) {
					err = s.tombstone(ctx, []entry{*mine}, false)
				}
				return nil, true, err
			}
			now := time.Now()
			return &driver.Grant{Token: uint64(mine.Ticket), Created: now, Renewed: now, Expires: now.Add(req.TTL)}, false, nil
		}
		if req.Queue && s.refreshDue(key, mine, req.QueueTTL) {
			if _, err := s.rewrite(ctx, key, mine, bson.D{{Key: "ttl", Value: int64(req.QueueTTL)}}, req.QueueTTL); err != nil {
				return nil, false, err
			}
		}
		return nil, false, &driver.Busy{After: s.retryAfter(st, req, recv)}
	}
	ok := grantable(req, st.live, 0)
	if !ok && !req.Queue {
		return nil, false, &driver.Busy{After: s.retryAfter(st, req, recv)}
	}
	return s.insert(ctx, req, st, sent, recv, ok)
}

// insert inserts req's entry with the next ticket, granted if ok, else
// queued; again asks for a fresh read.
func (s *Store) insert(ctx context.Context, req *driver.Request, st *state, sent, recv time.Time, ok bool) (g *driver.Grant, again bool, err error) {
	key := driver.Key{Name: req.Name, Owner: req.Owner}
	ttl := req.TTL
	if !ok {
		ttl = req.QueueTTL
	}
	e := entry{
		ID: newID(), Name: req.Name, Ticket: st.max + 1, Owner: req.Owner, Mode: int32(req.Mode), Limit: int32(req.Limit),
		Granted: ok, Ver: newVer(), TTL: int64(ttl), Created: recv, Renewed: recv, Host: req.Host, Meta: metaPairs(req.Meta),
	}
	if beforeInsert != nil {
		beforeInsert()
	}
	isent := time.Now()
	_, err = s.coll.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(&e),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: e.ID}}).
			SetUpdate(bson.D{{Key: "$currentDate", Value: bson.D{{Key: "c", Value: true}, {Key: "r", Value: true}}}}),
	}, options.BulkWrite().SetOrdered(true))
	if mongo.IsDuplicateKeyError(err) {
		return nil, true, nil // someone took this ticket first
	}
	if err != nil {
		return nil, false, err
	}
	if time.Since(sent) > staleInsert {
		// The read this ticket came from may be older than a pruned
		// tombstone of the same ticket: keep it only if it is provably
		// new, else withdraw it and start again.
		if stale, err := s.stale(ctx, &e); err != nil || stale {
			return nil, true, errors.Join(err, s.tombstone(ctx, []entry{e}, false))
		}
	}
	s.remember(key, &own{id: e.ID, ver: e.Ver, ticket: e.Ticket, granted: ok, deadline: isent.Add(ttl - margin(ttl))})
	if !ok {
		return nil, false, &driver.Busy{After: s.retryAfter(st, req, recv)}
	}
	return &driver.Grant{Token: uint64(e.Ticket), Created: recv, Renewed: recv, Expires: recv.Add(req.TTL)}, false, nil
}

// stale reports whether the ticket of e, just inserted from a read that
// may be old, may have been inserted, deleted and so reused. A deleted
// ticket is at least keepTickets+1 below the highest one at its
// deletion, and the highest ticket of a name is never deleted; so when
// the highest now is within keepTickets of e's, e's ticket was new. (And
// then no ticket above it existed before it: each ticket is inserted
// after the one below.)
func (s *Store) stale(ctx context.Context, e *entry) (bool, error) {
	var top entry
	err := s.coll.FindOne(ctx, bson.D{{Key: "n", Value: e.Name}}, options.FindOne().SetSort(bson.D{{Key: "t", Value: -1}}).
		SetProjection(bson.D{{Key: "t", Value: 1}})).Decode(&top)
	if err != nil {
		return false, err
	}
	return top.Ticket > e.Ticket+keepTickets, nil
}

func (s *Store) remember(key driver.Key, o *own) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o == nil {
		delete(s.own, key)
	} else {
		s.own[key] = o
	}
}

func (s *Store) isLost(key driver.Key, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.own[key]
	return o != nil && o.id == id && o.lost
}

func (s *Store) refreshDue(key driver.Key, e *entry, queueTTL time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.own[key]
	return o == nil || o.id != e.ID || time.Until(o.deadline) < queueTTL/2
}

// rewrite changes an entry of key that was read as e, if it is still that
// version, setting set and a new version, and stamping the server's time
// on r (and on the fields of stamp). It reports whether the entry was
// rewritten in time: when this store wrote the version it replaces, the
// reply must come before the deadline of that version, since an observer
// may take the entry over after it (see "Renewals" in the package
// documentation).
func (s *Store) rewrite(ctx context.Context, key driver.Key, e *entry, set bson.D, ttl time.Duration, stamp ...string) (bool, error) {
	h := fnv.New32a()
	h.Write([]byte(key.Name))
	h.Write([]byte{0})
	h.Write([]byte(key.Owner))
	stripe := &s.rewriting[h.Sum32()%uint32(len(s.rewriting))]
	stripe.Lock()
	defer stripe.Unlock()
	s.mu.Lock()
	o := s.own[key]
	s.mu.Unlock()
	var deadline time.Time
	if o != nil && o.id == e.ID && o.lost {
		return false, nil
	}
	if o != nil && o.id == e.ID && o.ver == e.Ver {
		deadline = o.deadline
	}
	nv := newVer()
	dates := bson.D{{Key: "r", Value: true}}
	for _, f := range stamp {
		dates = append(dates, bson.E{Key: f, Value: true})
	}
	wsent := time.Now()
	res, err := s.coll.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: e.ID}, {Key: "v", Value: e.Ver}, {Key: "x", Value: false}},
		bson.D{{Key: "$set", Value: append(set, bson.E{Key: "v", Value: nv})}, {Key: "$currentDate", Value: dates}})
	if err != nil {
		return false, err
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		// Too late to be sure no one took it over meanwhile: the entry
		// is lost for good, whatever the store shows.
		s.remember(key, &own{id: e.ID, lost: true})
		return false, nil
	}
	granted := e.Granted
	for _, f := range set {
		if f.Key == "g" {
			granted = true
		}
	}
	s.remember(key, &own{id: e.ID, ver: nv, ticket: e.Ticket, granted: granted, deadline: wsent.Add(ttl - margin(ttl))})
	return true, nil
}

// tombstone marks entries dead, each only if it is still the version read
// (takeover) or, for the owner's own entries, whatever its version.
func (s *Store) tombstone(ctx context.Context, es []entry, versioned bool) error {
	models := make([]mongo.WriteModel, len(es))
	for i, e := range es {
		f := bson.D{{Key: "_id", Value: e.ID}, {Key: "x", Value: false}}
		if versioned {
			f = append(f, bson.E{Key: "v", Value: e.Ver})
		}
		models[i] = mongo.NewUpdateOneModel().SetFilter(f).SetUpdate(deadUpdate)
	}
	_, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	return err
}

var deadUpdate = bson.D{
	{Key: "$set", Value: bson.D{{Key: "x", Value: true}}},
	{Key: "$currentDate", Value: bson.D{{Key: "r", Value: true}}},
}

func (s *Store) pruneIDs(ctx context.Context, ids []string) error {
	_, err := s.coll.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "x", Value: true}})
	return err
}

// Renew implements driver.Store: one update per hold.
func (s *Store) Renew(ctx context.Context, holds []driver.Hold) ([]*driver.Grant, error) {
	out := make([]*driver.Grant, len(holds))
	for i, h := range holds {
		key := driver.Key{Name: h.Name, Owner: h.Owner}
		e, err := s.ownEntry(ctx, key, true)
		if err != nil {
			return nil, err
		}
		if e == nil {
			continue
		}
		ok, err := s.rewrite(ctx, key, e, bson.D{{Key: "ttl", Value: int64(h.TTL)}}, h.TTL)
		if err == nil && !ok {
			// Another renewal of ours (keepalive and a manual Renew) may
			// have changed the version meanwhile: try its version once.
			if e2, err2 := s.ownEntry(ctx, key, true); err2 == nil && e2 != nil && e2.ID == e.ID && e2.Ver != e.Ver {
				e = e2
				ok, err = s.rewrite(ctx, key, e, bson.D{{Key: "ttl", Value: int64(h.TTL)}}, h.TTL)
			}
		}
		if err != nil {
			return nil, err
		}
		if ok {
			now := time.Now()
			out[i] = &driver.Grant{Token: uint64(e.Ticket), Created: e.Created, Renewed: now, Expires: now.Add(h.TTL)}
		}
	}
	return out, nil
}

// ownEntry returns the live entry of key (only a hold if held), from this
// store's memory when it wrote it last, else read from the server.
func (s *Store) ownEntry(ctx context.Context, key driver.Key, held bool) (*entry, error) {
	s.mu.Lock()
	o := s.own[key]
	s.mu.Unlock()
	if o != nil && o.lost {
		return nil, nil
	}
	if o != nil && (o.granted || !held) {
		return &entry{ID: o.id, Ver: o.ver, Ticket: o.ticket, Granted: o.granted, Name: key.Name, Owner: key.Owner}, nil
	}
	f := bson.D{{Key: "n", Value: key.Name}, {Key: "o", Value: key.Owner}, {Key: "x", Value: false}}
	if held {
		f = append(f, bson.E{Key: "g", Value: true})
	}
	var e entry
	err := s.coll.FindOne(ctx, f).Decode(&e)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// Release implements driver.Store: one update per key when this store
// wrote the owner's entry last, two otherwise.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, key := range keys {
		f := bson.D{{Key: "n", Value: key.Name}, {Key: "o", Value: key.Owner}, {Key: "x", Value: false}}
		s.mu.Lock()
		o := s.own[key]
		delete(s.own, key)
		s.mu.Unlock()
		if o == nil {
			res, err := s.coll.UpdateMany(ctx, append(f, bson.E{Key: "g", Value: true}), deadUpdate)
			if err != nil {
				return nil, err
			}
			out[i] = res.MatchedCount > 0
		}
		res, err := s.coll.UpdateMany(ctx, f, deadUpdate)
		if err != nil {
			return nil, err
		}
		if o != nil {
			out[i] = res.MatchedCount > 0 && o.granted
		}
	}
	return out, nil
}

// serverTime asks the server for its clock (hello's localTime).
func (s *Store) serverTime(ctx context.Context) (time.Time, error) {
	var r struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := s.coll.Database().RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&r); err != nil {
		return time.Time{}, err
	}
	if r.LocalTime.IsZero() {
		return time.Time{}, errors.New("the server's hello reply has no localTime")
	}
	return r.LocalTime, nil
}

// List implements driver.Store, judging expiry by the server's clock.
func (s *Store) List(ctx context.Context, f *driver.Filter) ([]driver.Holder, error) {
	now, err := s.serverTime(ctx)
	if err != nil {
		return nil, err
	}
	q := bson.D{{Key: "x", Value: false}}
	switch {
	case f.Name != "":
		q = append(q, bson.E{Key: "n", Value: f.Name})
	case f.Prefix != "":
		q = append(q, bson.E{Key: "n", Value: bson.D{{Key: "$regex", Value: "^" + regexp.QuoteMeta(f.Prefix)}}})
	}
	if f.Owner != "" {
		q = append(q, bson.E{Key: "o", Value: f.Owner})
	}
	if !f.Queued {
		q = append(q, bson.E{Key: "g", Value: true})
	}
	cur, err := s.coll.Find(ctx, q)
	if err != nil {
		return nil, err
	}
	var es []entry
	if err := cur.All(ctx, &es); err != nil {
		return nil, err
	}
	out := make([]driver.Holder, 0, len(es))
	for _, e := range es {
		if len(e.Name) < len(f.Prefix) || e.Name[:len(f.Prefix)] != f.Prefix {
			continue
		}
		out = append(out, holder(&e, now))
	}
	return out, nil
}

func holder(e *entry, now time.Time) driver.Holder {
	ttl := time.Duration(e.TTL)
	h := driver.Holder{
		Name: e.Name, Owner: e.Owner, Mode: driver.Mode(e.Mode), Limit: int(e.Limit), Queued: !e.Granted,
		Host: e.Host, Meta: metaMap(e.Meta), TTL: ttl, Created: e.Created, Renewed: e.Renewed,
		Expires: e.Renewed.Add(ttl), Left: e.Renewed.Add(ttl).Sub(now),
	}
	if e.Granted {
		h.Token = uint64(e.Ticket)
	}
	return h
}

// Purge implements driver.Store: it marks dead every entry expired by the
// server's clock, and deletes tombstones old enough, except each name's
// highest ticket.
func (s *Store) Purge(ctx context.Context) ([]driver.Holder, error) {
	now, err := s.serverTime(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := s.coll.Find(ctx, bson.D{{Key: "x", Value: false}})
	if err != nil {
		return nil, err
	}
	var es []entry
	if err := cur.All(ctx, &es); err != nil {
		return nil, err
	}
	var out []driver.Holder
	for _, e := range es {
		ttl := time.Duration(e.TTL)
		if now.Before(e.Renewed.Add(ttl + margin(ttl))) {
			continue
		}
		res, err := s.coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: e.ID}, {Key: "v", Value: e.Ver}, {Key: "x", Value: false}}, deadUpdate)
		if err != nil {
			return out, err
		}
		if res.MatchedCount == 1 && e.Granted {
			out = append(out, holder(&e, now))
		}
	}
	// Tombstones: keep each name's highest ticket.
	cur, err = s.coll.Find(ctx, bson.D{{Key: "x", Value: true}, {Key: "r", Value: bson.D{{Key: "$lt", Value: now.Add(-pruneAfter)}}}},
		options.Find().SetProjection(bson.D{{Key: "n", Value: 1}, {Key: "t", Value: 1}}))
	if err != nil {
		return out, err
	}
	var dead []entry
	if err := cur.All(ctx, &dead); err != nil {
		return out, err
	}
	names := map[string]bool{}
	for _, e := range dead {
		names[e.Name] = true
	}
	var ids []string
	for n := range names {
		var top entry
		err := s.coll.FindOne(ctx, bson.D{{Key: "n", Value: n}}, options.FindOne().SetSort(bson.D{{Key: "t", Value: -1}}).
			SetProjection(bson.D{{Key: "t", Value: 1}})).Decode(&top)
		if err != nil {
			return out, err
		}
		for _, e := range dead {
			if e.Name == n && e.Ticket < top.Ticket-keepTickets {
				ids = append(ids, e.ID)
			}
		}
	}
	for len(ids) > 0 {
		k := min(len(ids), 1000)
		if err := s.pruneIDs(ctx, ids[:k]); err != nil {
			return out, err
		}
		ids = ids[k:]
	}
	return out, nil
}

// Close implements driver.Store; it disconnects the client if the store
// opened it.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	if s.owns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.client.Disconnect(ctx); err != nil {
			return fmt.Errorf("mongo: disconnect: %w", err)
		}
	}
	return nil
}
