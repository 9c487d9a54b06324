package mongo

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// document is the record of one lock name. Times are Unix nanoseconds of
// the server's clock.
type document struct {
	Name    string  `bson:"_id"`
	Ver     int64   `bson:"v"`   // random, new with every write: the compare-and-swap key
	Seq     int64   `bson:"seq"` // the last fencing token handed out
	Ticket  int64   `bson:"tkt"` // the last queue ticket handed out
	Holders []entry `bson:"h,omitempty"`
	Queue   []entry `bson:"q,omitempty"`
	// Active is set while the name has holders or queue entries: the
	// listings' index covers only those documents.
	Active bool `bson:"a,omitempty"`
	// Freed is set by a write that let a holder or queue entry go, to a
	// new value (an update event lists the field only if its value
	// changed): freedFor(to), where to is the id of the Store whose waiter
	// the write handed the lock to, or "*". The change stream wakes
	// waiters for those writes only, and the server skips the other
	// Stores' hand-offs before it looks anything up. (Versions before the
	// ids wrote a random int64.)
	Freed any `bson:"fr,omitempty"`
}

type entry struct {
	Owner   string `bson:"o"`
	Mode    int32  `bson:"m"`
	Limit   int32  `bson:"l,omitempty"`
	Token   int64  `bson:"t"`
	Host    string `bson:"host,omitempty"`
	Meta    []kv   `bson:"meta,omitempty"`
	TTL     int64  `bson:"ttl"`
	HoldTTL int64  `bson:"ht,omitempty"` // a queue entry's: the TTL of the hold it asks for
	Store   string `bson:"s,omitempty"`  // the id of the Store that queued it (docs.sid)
	Created int64  `bson:"c"`
	Renewed int64  `bson:"r"`
	Expires int64  `bson:"x"`
}

// kv is one metadata pair: stored as pairs so that keys never become field
// names ("$", ".").
type kv struct {
	K string `bson:"k"`
	V string `bson:"v"`
}

// newSID returns a new Store id: 8 random bytes, in hex.
func newSID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// freedFor is a new value of the fr field of a write that hands the lock to a
// waiter of the Store to ("*": none, or not known).
func freedFor(to string) string { return to + ":" + strconv.FormatInt(newVer(), 36) }

func newVer() int64 {
	var b [8]byte
	rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

func toEntries(es []lockstate.Entry) []entry {
	out := make([]entry, len(es))
	for i, e := range es {
		var meta []kv
		for _, k := range slices.Sorted(maps.Keys(e.Meta)) {
			meta = append(meta, kv{k, e.Meta[k]})
		}
		out[i] = entry{
			Owner: e.Owner, Mode: int32(e.Mode), Limit: int32(e.Limit), Token: int64(e.Token), Host: e.Host, Meta: meta,
			TTL: int64(e.TTL), HoldTTL: int64(e.HoldTTL), Created: nanos(e.Created), Renewed: nanos(e.Renewed), Expires: nanos(e.Expires),
		}
	}
	return out
}

func fromEntries(es []entry) []lockstate.Entry {
	if len(es) == 0 {
		return nil
	}
	out := make([]lockstate.Entry, len(es))
	for i, e := range es {
		var meta map[string]string
		if len(e.Meta) > 0 {
			meta = make(map[string]string, len(e.Meta))
			for _, p := range e.Meta {
				meta[p.K] = p.V
			}
		}
		out[i] = lockstate.Entry{
			Owner: e.Owner, Mode: driver.Mode(e.Mode), Limit: int(e.Limit), Token: uint64(e.Token), Host: e.Host, Meta: meta,
			TTL: time.Duration(e.TTL), HoldTTL: time.Duration(e.HoldTTL), Created: fromNanos(e.Created), Renewed: fromNanos(e.Renewed), Expires: fromNanos(e.Expires),
		}
	}
	return out
}

func (d *document) state() *lockstate.State {
	return &lockstate.State{Seq: uint64(d.Seq), Ticket: uint64(d.Ticket), Holders: fromEntries(d.Holders), Queue: fromEntries(d.Queue)}
}

func toDocument(name string, st *lockstate.State) *document {
	return &document{
		Name: name, Ver: newVer(), Seq: int64(st.Seq), Ticket: int64(st.Ticket),
		Holders: toEntries(st.Holders), Queue: toEntries(st.Queue),
		Active: !st.Idle(),
	}
}

// left reports whether an owner of a holder or queue entry of old has none
// in new: a waiter may then be granted. A queued request that became a
// holder did not leave (lockstate's Freed counts it, for its local
// waiters, but no other request is granted for it).
func left(old, new *document) bool {
	owners := map[string]bool{}
	for _, es := range [][]entry{new.Holders, new.Queue} {
		for _, e := range es {
			owners[e.Owner] = true
		}
	}
	for _, es := range [][]entry{old.Holders, old.Queue} {
		for _, e := range es {
			if !owners[e.Owner] {
				return true
			}
		}
	}
	return false
}

// readBatch is the most names one read (and one bulk write) carries.
const readBatch = 1000

// fields is the projection of a decision's read: the whole document and
// the server's clock ($$NOW).
var fields = bson.D{
	{Key: "v", Value: 1}, {Key: "seq", Value: 1}, {Key: "tkt", Value: 1}, {Key: "h", Value: 1}, {Key: "q", Value: 1},
	{Key: "now", Value: "$$NOW"},
}

// read returns the documents of names (absent for a name never written)
// and the server's time: one find, whose projection adds $$NOW to each
// document; when no document matched, one aggregate more asks the time
// ($facet answers one document even without input).
func (d *docs) read(ctx context.Context, names []string) (map[string]*document, time.Time, error) {
	var filter bson.D
	if len(names) == 1 {
		filter = bson.D{{Key: "_id", Value: names[0]}}
	} else {
		filter = bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: names}}}}
	}
	cur, err := d.latest.Find(ctx, filter, options.Find().SetProjection(fields))
	if err != nil {
		return nil, time.Time{}, err
	}
	var rs []struct {
		Doc document      `bson:",inline"`
		Now bson.DateTime `bson:"now"`
	}
	if err := cur.All(ctx, &rs); err != nil {
		return nil, time.Time{}, fmt.Errorf("mongo: reading lock documents: %w", err)
	}
	out := make(map[string]*document, len(rs))
	var now bson.DateTime
	for i := range rs {
		out[rs[i].Doc.Name] = &rs[i].Doc
		now = max(now, rs[i].Now)
	}
	if len(rs) == 0 {
		if now, err = d.serverTime(ctx); err != nil {
			return nil, time.Time{}, err
		}
	}
	return out, now.Time().UTC(), nil
}

// serverTime reads the server's clock.
func (d *docs) serverTime(ctx context.Context) (bson.DateTime, error) {
	cur, err := d.latest.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$limit", Value: 1}},
		{{Key: "$facet", Value: bson.D{{Key: "d", Value: bson.A{}}}}},
		{{Key: "$project", Value: bson.D{{Key: "_id", Value: 0}, {Key: "now", Value: "$$NOW"}}}},
	})
	if err != nil {
		return 0, err
	}
	defer cur.Close(ctx)
	var r struct {
		Now bson.DateTime `bson:"now"`
	}
	if !cur.Next(ctx) {
		return 0, errors.Join(cur.Err(), errors.New("mongo: no answer to a read of the server's time"))
	}
	if err := cur.Decode(&r); err != nil {
		return 0, fmt.Errorf("mongo: reading the server's time: %w", err)
	}
	return r.Now, nil
}

// maxAttempts bounds how often Update tries a name whose compare-and-swap
// keeps losing.
const maxAttempts = 64

// Update implements records.Records. Per batch of names: one read of the
// documents with the server's time, then one unordered bulk write of the
// changed ones, each an insert (a name never written) or a replace
// filtered by _id and the version read, so that a decision counts only if
// no one wrote the document since it was read. The names whose write
// lost are read and decided again.
func (d *docs) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	if err := d.ensure(ctx); err != nil {
		return err
	}
	for len(names) > 0 {
		n := min(len(names), readBatch)
		if err := d.update(ctx, names[:n], fn); err != nil {
			return d.opErr(err)
		}
		names = names[n:]
		next := fn
		fn = func(i int, st *lockstate.State, now time.Time) error { return next(i+n, st, now) }
	}
	return nil
}

func (d *docs) opErr(err error) error {
	if d.closed.Load() {
		return ErrClosed
	}
	return err
}

func (d *docs) update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	pending := make([]int, len(names))
	for i := range pending {
		pending[i] = i
	}
	for attempt := 0; len(pending) > 0; attempt++ {
		if attempt >= maxAttempts {
			return fmt.Errorf("mongo: lock %q: gave up after %d conflicting writes", names[pending[0]], attempt)
		}
		if attempt > 2 {
			if err := driver.Sleep(ctx, time.Duration(mrand.Int64N(int64(min(attempt, 20))*int64(time.Millisecond)))); err != nil {
				return err
			}
		}
		ask := make([]string, len(pending))
		for j, i := range pending {
			ask[j] = names[i]
		}
		var docs map[string]*document
		var now time.Time
		var err error
		if p, ok := ctx.Value(prefetchKey{}).(*prefetch); ok && attempt == 0 && len(ask) == 1 && p.name == ask[0] {
			docs, now = map[string]*document{}, p.now
			if p.doc != nil {
				docs[p.name] = p.doc
			}
		} else {
			if docs, now, err = d.read(ctx, ask); err != nil {
				return err
			}
		}
		var models []mongo.WriteModel
		var wrote []int // index into names, per model
		var vers []int64
		for _, i := range pending {
			old := docs[names[i]]
			st := &lockstate.State{}
			if old != nil {
				st = old.state()
			}
			if err := fn(i, st, now); err != nil {
				return err
			}
			if st.Freed {
				st.Promote(names[i], now) // the hand-off: see fast.go
			}
			if !st.Dirty {
				continue
			}
			doc := toDocument(names[i], st)
			d.stamp(old, doc)
			if old != nil && left(old, doc) {
				doc.Freed = freedFor("*")
			}
			if old == nil {
				models = append(models, mongo.NewInsertOneModel().SetDocument(doc))
			} else {
				models = append(models, mongo.NewReplaceOneModel().
					SetFilter(bson.D{{Key: "_id", Value: names[i]}, {Key: "v", Value: old.Ver}}).SetReplacement(doc))
			}
			wrote = append(wrote, i)
			vers = append(vers, doc.Ver)
		}
		if len(models) == 0 {
			return nil
		}
		if pending, err = d.write(ctx, names, models, wrote, vers); err != nil {
			return err
		}
	}
	return nil
}

// stamp sets the Store ids of doc's entries (see docs.sid): an entry
// keeps the id its owner had in old (a promoted hold, its queue entry's);
// an owner new to the document came with this call, from this Store.
func (d *docs) stamp(old, doc *document) {
	ids := map[string]string{}
	if old != nil {
		for _, e := range slices.Concat(old.Holders, old.Queue) {
			ids[e.Owner] = e.Store
		}
	}
	for _, es := range [][]entry{doc.Holders, doc.Queue} {
		for i := range es {
			id, ok := ids[es[i].Owner]
			if !ok {
				id = d.sid
			}
			es[i].Store = id
		}
	}
}

// write runs the writes of one round and returns the names (indexes) whose
// write lost its race.
func (d *docs) write(ctx context.Context, names []string, models []mongo.WriteModel, wrote []int, vers []int64) ([]int, error) {
	res, err := d.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	lost := map[int]bool{} // model index
	if err != nil {
		var bwe mongo.BulkWriteException
		if !errors.As(err, &bwe) || bwe.WriteConcernError != nil {
			return nil, err
		}
		for _, we := range bwe.WriteErrors {
			if !mongo.IsDuplicateKeyError(we) || !strings.Contains(we.Message, " index: _id_ ") {
				return nil, err
			}
			lost[we.Index] = true // inserted by someone else meanwhile
		}
	}
	replaces := 0
	for _, m := range models {
		if _, ok := m.(*mongo.ReplaceOneModel); ok {
			replaces++
		}
	}
	var out []int
	matched := int64(-1) // unknown: a failed bulk write may report no counts
	if res != nil {
		matched = res.MatchedCount
	}
	if matched < int64(replaces) {
		// Some replace found its version gone: ask which documents hold
		// the versions this round wrote.
		var ids []string
		for k, m := range models {
			if _, ok := m.(*mongo.ReplaceOneModel); ok {
				ids = append(ids, names[wrote[k]])
			}
		}
		have, err := d.versions(ctx, ids)
		if err != nil {
			return nil, err
		}
		for k, m := range models {
			if _, ok := m.(*mongo.ReplaceOneModel); ok && have[names[wrote[k]]] != vers[k] {
				lost[k] = true
			}
		}
	}
	for k := range models {
		if lost[k] {
			out = append(out, wrote[k])
		}
	}
	slices.Sort(out)
	return out, nil
}

// versions returns the current version of each document of names: a
// bulk write, whose result counts only how many of its writes matched,
// learns from them which did (each write sets a version of its own).
func (d *docs) versions(ctx context.Context, names []string) (map[string]int64, error) {
	cur, err := d.latest.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: names}}}},
		options.Find().SetProjection(bson.D{{Key: "v", Value: 1}}))
	if err != nil {
		return nil, err
	}
	var vs []struct {
		Name string `bson:"_id"`
		Ver  int64  `bson:"v"`
	}
	if err := cur.All(ctx, &vs); err != nil {
		return nil, err
	}
	have := make(map[string]int64, len(vs))
	for _, v := range vs {
		have[v.Name] = v.Ver
	}
	return have, nil
}

// Scan implements records.Records: one query, of the name's document, or
// of the documents with holders or waiters (whose name starts with
// prefix), each with the server's time.
func (d *docs) Scan(ctx context.Context, name, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	if err := d.ensure(ctx); err != nil {
		return err
	}
	var match bson.D
	switch {
	case name != "":
		match = bson.D{{Key: "_id", Value: name}}
	case prefix != "":
		match = bson.D{{Key: "a", Value: true}, {Key: "_id", Value: bson.D{{Key: "$regex", Value: "^" + regexp.QuoteMeta(prefix)}}}}
	default:
		match = bson.D{{Key: "a", Value: true}}
	}
	cur, err := d.listing.Aggregate(ctx, mongo.Pipeline{
		{{Key: "$match", Value: match}},
		{{Key: "$sort", Value: bson.D{{Key: "_id", Value: 1}}}},
		{{Key: "$set", Value: bson.D{{Key: "now", Value: "$$NOW"}}}},
	})
	if err != nil {
		return d.opErr(err)
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var r struct {
			Doc document      `bson:",inline"`
			Now bson.DateTime `bson:"now"`
		}
		if err := cur.Decode(&r); err != nil {
			return fmt.Errorf("mongo: decoding a lock document: %w", err)
		}
		if !fn(r.Doc.Name, r.Doc.state(), r.Now.Time().UTC()) {
			return nil
		}
	}
	return d.opErr(cur.Err())
}
