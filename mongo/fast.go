package mongo

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/baton-go/baton/driver"
)

// The common cases are decided on the server, in one write and without a
// read: an exclusive acquire of a name nobody holds and no one waits
// ahead for, and the release of a live hold. Each is a pipeline update of
// the name's document whose filter states the case, with $$NOW for every
// expiry judgement and every time it sets; it does what lockstate's rules
// do in that case (drivertest.Model checks it). Anything else goes the
// general way: a read, lockstate's rules, a compare-and-swap.
//
// Every value a caller gives (owner, host, metadata) enters the pipeline
// as {$literal: …}, never as an expression or a field path.

// nowNS is the server's clock in Unix nanoseconds, as the documents keep
// times.
var nowNS = bson.D{{Key: "$multiply", Value: bson.A{bson.D{{Key: "$toLong", Value: "$$NOW"}}, int64(time.Millisecond)}}}

func lit(v any) bson.D { return bson.D{{Key: "$literal", Value: v}} }

func orEmpty(field string) bson.D { return bson.D{{Key: "$ifNull", Value: bson.A{field, bson.A{}}}} }

// live is the entries of field (h or q) unexpired by the server's clock,
// less those of owner if owner is not nil.
func live(field string, owner any) bson.D {
	cond := bson.A{bson.D{{Key: "$gt", Value: bson.A{"$$this.x", nowNS}}}}
	if owner != nil {
		cond = append(cond, bson.D{{Key: "$ne", Value: bson.A{"$$this.o", owner}}})
	}
	return bson.D{{Key: "$filter", Value: bson.D{{Key: "input", Value: orEmpty(field)}, {Key: "cond", Value: bson.D{{Key: "$and", Value: cond}}}}}}
}

func size(x any) bson.D { return bson.D{{Key: "$size", Value: x}} }

// prefetch is a lock document and the server's time that a refused
// acquireFree returned: the general decision that follows starts from it
// instead of reading again. It travels in the context of that one call.
type prefetch struct {
	name string
	doc  *document // nil: no document
	now  time.Time
}

type prefetchKey struct{}

// acquireFree decides an exclusive request on the server, in one
// findAndModify (an upsert for a name never written), as lockstate's rules
// do:
//
//   - the name has no live holder and no live queue entry ahead of the
//     owner's: granted, with the name's next token;
//   - otherwise, for a request that queues: the owner's entry is appended
//     to the queue with the next ticket, or refreshed when half its time
//     is used;
//   - otherwise (the owner holds the name already, or the request does not
//     queue) nothing changes.
//
// Expired entries are dropped by every write. The command returns the
// document and the server's time: when it wrote nothing (pre is set), the
// caller decides the general way from them. freed reports that entries
// left. Requests that are not exclusive go the general way.
func (d *docs) acquireFree(ctx context.Context, req *driver.Request) (g *driver.Grant, freed bool, pre *prefetch, err error) {
	if req.Mode != driver.Exclusive {
		return nil, false, nil, nil
	}
	if err := d.ensure(ctx); err != nil {
		return nil, false, nil, err
	}
	owner := lit(req.Owner)
	first := func(arr any) bson.D { return bson.D{{Key: "$arrayElemAt", Value: bson.A{arr, 0}}} }
	field := func(doc any, f string) bson.D { // doc.f, for an expression doc
		return bson.D{{Key: "$let", Value: bson.D{{Key: "vars", Value: bson.D{{Key: "e", Value: doc}}}, {Key: "in", Value: "$$e." + f}}}}
	}
	eq := func(x, y any) bson.D { return bson.D{{Key: "$eq", Value: bson.A{x, y}}} }
	and := func(xs ...any) bson.D { return bson.D{{Key: "$and", Value: bson.A(xs)}} }
	cond := func(c, yes, no any) bson.D { return bson.D{{Key: "$cond", Value: bson.A{c, yes, no}}} }
	filter := func(input any, c any) bson.D {
		return bson.D{{Key: "$filter", Value: bson.D{{Key: "input", Value: input}, {Key: "cond", Value: c}}}}
	}
	add := func(xs ...any) bson.D { return bson.D{{Key: "$add", Value: bson.A(xs)}} }
	isLive := bson.D{{Key: "$gt", Value: bson.A{"$$this.x", "$_now"}}}
	var meta bson.A
	for _, k := range slices.Sorted(maps.Keys(req.Meta)) {
		meta = append(meta, bson.D{{Key: "k", Value: lit(k)}, {Key: "v", Value: lit(req.Meta[k])}})
	}
	entry := func(token any, ttl time.Duration) bson.D {
		e := bson.D{{Key: "o", Value: owner}, {Key: "m", Value: int32(driver.Exclusive)}, {Key: "t", Value: token}}
		if req.Host != "" {
			e = append(e, bson.E{Key: "host", Value: lit(req.Host)})
		}
		if len(meta) > 0 {
			e = append(e, bson.E{Key: "meta", Value: meta})
		}
		return append(e, bson.E{Key: "ttl", Value: int64(ttl)}, bson.E{Key: "c", Value: "$_now"}, bson.E{Key: "r", Value: "$_now"},
			bson.E{Key: "x", Value: add("$_now", int64(ttl))})
	}
	ver := newVer()
	// Stages compute temporaries (_now, the live entries, the decision)
	// once, then the fields; the temporaries are dropped at the end.
	pipeline := mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: "_now", Value: nowNS}}}},
		{{Key: "$set", Value: bson.D{
			{Key: "_lh", Value: filter(orEmpty("$h"), isLive)},
			{Key: "_lq", Value: filter(orEmpty("$q"), isLive)},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "_held", Value: bson.D{{Key: "$in", Value: bson.A{owner, "$_lh.o"}}}},
			{Key: "_mine", Value: first(filter("$_lq", eq("$$this.o", owner)))}, // missing if none
			{Key: "_free", Value: and(eq(size("$_lh"), 0),
				bson.D{{Key: "$or", Value: bson.A{eq(size("$_lq"), 0), eq(field(first("$_lq"), "o"), owner)}}})},
			{Key: "_dead", Value: bson.D{{Key: "$lt", Value: bson.A{
				add(size("$_lh"), size("$_lq")), add(size(orEmpty("$h")), size(orEmpty("$q")))}}}},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "_enq", Value: and(req.Queue, bson.D{{Key: "$not", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{"$_free", "$_held"}}}}}},
				eq(bson.D{{Key: "$type", Value: "$_mine"}}, "missing"))},
			// Refresh the owner's queue entry when less than half its time is left.
			{Key: "_ref", Value: and(req.Queue, bson.D{{Key: "$not", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{"$_free", "$_held"}}}}}},
				bson.D{{Key: "$lt", Value: bson.A{bson.D{{Key: "$subtract", Value: bson.A{"$_mine.x", "$_now"}}}, int64(req.QueueTTL / 2)}}})},
		}}},
		{{Key: "$set", Value: bson.D{{Key: "_w", Value: bson.D{{Key: "$or", Value: bson.A{"$_free", "$_enq", "$_ref"}}}}}}},
		// A document the rules leave as it is keeps every field (a missing
		// one stays missing): the command then writes nothing.
		{{Key: "$set", Value: bson.D{
			{Key: "fr", Value: cond("$_w", cond("$_dead", newVer(), "$$REMOVE"), "$fr")},
			{Key: "seq", Value: cond("$_free", add(bson.D{{Key: "$ifNull", Value: bson.A{"$seq", int64(0)}}}, int64(1)), "$seq")},
			{Key: "tkt", Value: cond("$_enq", add(bson.D{{Key: "$ifNull", Value: bson.A{"$tkt", int64(0)}}}, int64(1)),
				cond("$_w", bson.D{{Key: "$ifNull", Value: bson.A{"$tkt", int64(0)}}}, "$tkt"))},
			{Key: "v", Value: cond("$_w", ver, "$v")},
			{Key: "a", Value: cond("$_w", true, "$a")},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "h", Value: cond("$_free", bson.A{entry("$seq", req.TTL)}, cond("$_w", "$_lh", "$h"))},
			{Key: "q", Value: cond("$_free", filter("$_lq", bson.D{{Key: "$ne", Value: bson.A{"$$this.o", owner}}}),
				cond("$_enq", bson.D{{Key: "$concatArrays", Value: bson.A{"$_lq", bson.A{entry("$tkt", req.QueueTTL)}}}},
					cond("$_ref", bson.D{{Key: "$map", Value: bson.D{{Key: "input", Value: "$_lq"}, {Key: "in", Value: cond(eq("$$this.o", owner),
						bson.D{{Key: "$mergeObjects", Value: bson.A{"$$this", bson.D{{Key: "r", Value: "$_now"}, {Key: "x", Value: add("$_now", int64(req.QueueTTL))}}}}},
						"$$this")}}}}, "$q")))},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "h", Value: cond(and("$_w", eq(size(orEmpty("$h")), 0)), "$$REMOVE", "$h")},
			{Key: "q", Value: cond(and("$_w", eq(size(orEmpty("$q")), 0)), "$$REMOVE", "$q")},
		}}},
		{{Key: "$unset", Value: bson.A{"_now", "_lh", "_lq", "_held", "_mine", "_free", "_dead", "_enq", "_ref", "_w"}}},
	}
	var out struct {
		Doc document      `bson:",inline"`
		Now bson.DateTime `bson:"now"`
	}
	err = d.coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: req.Name}}, pipeline,
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After).SetProjection(fields),
	).Decode(&out)
	if err != nil {
		if mongo.IsDuplicateKeyError(err) {
			// Two first acquires of a name raced to insert its document:
			// the general way reads it.
			return nil, false, nil, nil
		}
		return nil, false, nil, d.opErr(err)
	}
	now := out.Now.Time().UTC()
	if out.Doc.Ver != ver {
		return nil, false, &prefetch{name: req.Name, doc: &out.Doc, now: now}, nil
	}
	freed = out.Doc.Freed != 0
	for _, h := range out.Doc.Holders {
		if h.Owner == req.Owner {
			return &driver.Grant{Token: uint64(h.Token), Created: fromNanos(h.Created), Renewed: fromNanos(h.Renewed), Expires: fromNanos(h.Expires)}, freed, nil, nil
		}
	}
	// Queued: not granted before the first holder's hold runs out.
	var after time.Duration
	for i, h := range out.Doc.Holders {
		if left := fromNanos(h.Expires).Sub(now); i == 0 || left < after {
			after = left
		}
	}
	return nil, freed, nil, &driver.Busy{After: after}
}

// releaseHeld releases each key whose owner holds its name, live by the
// server's clock, dropping the name's expired entries as lockstate's
// Release does; it reports which it released. The others (an expired
// hold, a queue entry) go the general way. The keys' names are distinct:
// each write's version tells whether it was the one that matched.
func (d *docs) releaseHeld(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	models := make([]mongo.WriteModel, len(keys))
	vers := make([]int64, len(keys))
	for i, k := range keys {
		owner := lit(k.Owner)
		holds := bson.D{{Key: "$gt", Value: bson.A{size(bson.D{{Key: "$filter", Value: bson.D{
			{Key: "input", Value: orEmpty("$h")},
			{Key: "cond", Value: bson.D{{Key: "$and", Value: bson.A{
				bson.D{{Key: "$eq", Value: bson.A{"$$this.o", owner}}},
				bson.D{{Key: "$gt", Value: bson.A{"$$this.x", nowNS}}},
			}}}},
		}}}), 0}}}
		vers[i] = newVer()
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: k.Name}, {Key: "$expr", Value: holds}}).
			SetUpdate(mongo.Pipeline{
				{{Key: "$set", Value: bson.D{
					{Key: "h", Value: live("$h", owner)}, {Key: "q", Value: live("$q", owner)},
					{Key: "v", Value: vers[i]}, {Key: "fr", Value: newVer()},
				}}},
				{{Key: "$set", Value: bson.D{
					{Key: "a", Value: bson.D{{Key: "$cond", Value: bson.A{
						bson.D{{Key: "$gt", Value: bson.A{bson.D{{Key: "$add", Value: bson.A{size("$h"), size("$q")}}}, 0}}}, true, "$$REMOVE"}}}},
					{Key: "h", Value: bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$eq", Value: bson.A{size("$h"), 0}}}, "$$REMOVE", "$h"}}}},
					{Key: "q", Value: bson.D{{Key: "$cond", Value: bson.A{bson.D{{Key: "$eq", Value: bson.A{size("$q"), 0}}}, "$$REMOVE", "$q"}}}},
				}}},
			})
	}
	res, err := d.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return nil, d.opErr(err)
	}
	if res.MatchedCount == int64(len(keys)) {
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	if res.MatchedCount == 0 {
		return out, nil
	}
	// Some matched: the documents that carry this write's versions.
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	have, err := d.versions(ctx, names)
	if err != nil {
		return nil, d.opErr(err)
	}
	for i, k := range keys {
		out[i] = have[k.Name] == vers[i]
	}
	return out, nil
}

// Acquire implements driver.Store: the server decides exclusive requests
// in one command (acquireFree), except those of a waiter this store has
// queued and the change stream did not wake as the head of the queue,
// which read first and write only if the rules now grant them: waiters'
// commands would otherwise contend for the document with the writes that
// matter. The rest goes through the records layer, starting from the
// document already read.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	key := driver.Key{Name: req.Name, Owner: req.Owner}
	if s.d.isQueued(key) && !s.d.takeHead(key) {
		docs, now, err := s.d.read(ctx, []string{req.Name})
		if err != nil {
			return nil, err
		}
		ctx = context.WithValue(ctx, prefetchKey{}, &prefetch{name: req.Name, doc: docs[req.Name], now: now})
		g, err := s.Store.Acquire(ctx, req)
		if err == nil || !errors.Is(err, driver.ErrNotGranted) {
			s.d.setQueued(key, false)
		}
		return g, err
	}
	g, freed, pre, err := s.d.acquireFree(ctx, req)
	if freed {
		s.Store.Freed(req.Name)
	}
	if err != nil {
		if errors.Is(err, driver.ErrNotGranted) {
			s.d.setQueued(key, true)
		}
		return nil, err
	}
	if g != nil {
		return g, nil
	}
	if pre != nil {
		ctx = context.WithValue(ctx, prefetchKey{}, pre)
	}
	g, err = s.Store.Acquire(ctx, req)
	if err != nil && req.Queue && errors.Is(err, driver.ErrNotGranted) {
		s.d.setQueued(key, true)
	}
	return g, err
}

// setHead notes that the change stream woke k as the head of its queue:
// its next attempt writes at once, without reading first.
func (d *docs) setHead(k driver.Key) {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	if d.heads == nil || len(d.heads) >= maxQueued {
		d.heads = map[driver.Key]bool{}
	}
	d.heads[k] = true
}

func (d *docs) takeHead(k driver.Key) bool {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	ok := d.heads[k]
	delete(d.heads, k)
	return ok
}

// maxQueued bounds the waiters a store remembers as queued; beyond it,
// they are forgotten (a forgotten waiter's next attempt writes).
const maxQueued = 10000

func (d *docs) isQueued(k driver.Key) bool {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	return d.queued[k]
}

func (d *docs) setQueued(k driver.Key, on bool) {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	switch {
	case !on:
		delete(d.queued, k)
	case d.queued == nil || len(d.queued) >= maxQueued:
		d.queued = map[driver.Key]bool{k: true}
	default:
		d.queued[k] = true
	}
}

// Release implements driver.Store: live holds are released by the server
// in one write each (one bulk write for all); the rest goes through the
// records layer.
func (s *Store) Release(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if len(keys) == 0 {
		return []bool{}, nil
	}
	for _, k := range keys {
		s.d.setQueued(k, false)
		s.d.takeHead(k)
	}
	// The first key of each name goes to the server; a second key of a
	// name (two shared holds) goes the general way.
	var first []driver.Key
	var firstAt []int
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		if !seen[k.Name] {
			seen[k.Name] = true
			first = append(first, k)
			firstAt = append(firstAt, i)
		}
	}
	fast, err := s.d.releaseHeld(ctx, first)
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	for j, i := range firstAt {
		out[i] = fast[j]
	}
	var done, rest []driver.Key
	var at []int
	for i, k := range keys {
		if out[i] {
			done = append(done, k)
		} else {
			rest = append(rest, k)
			at = append(at, i)
		}
	}
	names := make([]string, len(done))
	for i, k := range done {
		names[i] = k.Name
	}
	s.Store.Freed(names...)
	if len(rest) == 0 {
		return out, nil
	}
	more, err := s.Store.Release(ctx, rest)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = more[j]
	}
	return out, nil
}
