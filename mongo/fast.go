package mongo

import (
	"context"
	"errors"
	"fmt"
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
// ahead for, and the release of a live hold, which hands the lock to an
// exclusive request at the head of the queue. Each is a pipeline update
// of the name's document whose filter states the case, with $$NOW for
// every expiry judgement and every time it sets; it does what lockstate's
// rules, with lockstate.Promote after every write that lets an entry go,
// do in that case (drivertest.Model, with hand-off, checks it). Anything
// else goes the general way: a read, lockstate's rules and Promote, a
// compare-and-swap.
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

// Expression builders for the pipelines.

func eq(x, y any) bson.D         { return bson.D{{Key: "$eq", Value: bson.A{x, y}}} }
func and(xs ...any) bson.D       { return bson.D{{Key: "$and", Value: bson.A(xs)}} }
func add(xs ...any) bson.D       { return bson.D{{Key: "$add", Value: bson.A(xs)}} }
func cond(c, yes, no any) bson.D { return bson.D{{Key: "$cond", Value: bson.A{c, yes, no}}} }
func first(arr any) bson.D       { return bson.D{{Key: "$arrayElemAt", Value: bson.A{arr, 0}}} }

// filterBy is the elements of input for which c ($$this) is true.
func filterBy(input, c any) bson.D {
	return bson.D{{Key: "$filter", Value: bson.D{{Key: "input", Value: input}, {Key: "cond", Value: c}}}}
}

// fieldOf is field f of the document doc evaluates to.
func fieldOf(doc any, f string) bson.D {
	return bson.D{{Key: "$let", Value: bson.D{{Key: "vars", Value: bson.D{{Key: "e", Value: doc}}}, {Key: "in", Value: "$$e." + f}}}}
}

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
// left. Requests that are not exclusive go the general way. A name
// without entries is granted by acquireAlone, tried first unless the name
// is busy.
func (d *docs) acquireFree(ctx context.Context, req *driver.Request) (g *driver.Grant, freed bool, pre *prefetch, now time.Time, err error) {
	if req.Mode != driver.Exclusive {
		return nil, false, nil, now, nil
	}
	if err := d.ensure(ctx); err != nil {
		return nil, false, nil, now, err
	}
	// The request's values enter as temporaries of the first stage, and
	// the other stages, the same for every request, are marshaled once.
	in := bson.D{
		{Key: "_o", Value: lit(req.Owner)}, {Key: "_ttl", Value: int64(req.TTL)}, {Key: "_qttl", Value: int64(req.QueueTTL)},
		{Key: "_queue", Value: req.Queue}, {Key: "_fr", Value: freedFor("*")},
	}
	if req.Host != "" {
		in = append(in, bson.E{Key: "_host", Value: lit(req.Host)})
	}
	var meta bson.A
	for _, k := range slices.Sorted(maps.Keys(req.Meta)) {
		meta = append(meta, bson.D{{Key: "k", Value: lit(k)}, {Key: "v", Value: lit(req.Meta[k])}})
	}
	if len(meta) > 0 {
		in = append(in, bson.E{Key: "_meta", Value: meta})
	}
	if !d.isBusy(req.Name) {
		g, err := d.acquireAlone(ctx, req, meta)
		if err != nil {
			return nil, false, nil, now, err
		}
		if g != nil {
			return g, false, nil, g.Created, nil
		}
		d.setBusy(req.Name)
	}
	ver := newVer()
	in = append(in, bson.E{Key: "_ver", Value: ver})
	pipeline := append(bson.A{bson.D{{Key: "$set", Value: in}}}, d.stages().acquire...)
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
			return nil, false, nil, now, nil
		}
		return nil, false, nil, now, d.opErr(err)
	}
	now = out.Now.Time().UTC()
	if out.Doc.Ver != ver {
		return nil, false, &prefetch{name: req.Name, doc: &out.Doc, now: now}, now, nil
	}
	freed = out.Doc.Freed != nil
	for _, h := range out.Doc.Holders {
		if h.Owner == req.Owner {
			return &driver.Grant{Token: uint64(h.Token), Created: fromNanos(h.Created), Renewed: fromNanos(h.Renewed), Expires: fromNanos(h.Expires)}, freed, nil, now, nil
		}
	}
	// Queued: not granted before the first holder's hold runs out.
	var after time.Duration
	for i, h := range out.Doc.Holders {
		if left := fromNanos(h.Expires).Sub(now); i == 0 || left < after {
			after = left
		}
	}
	return nil, freed, nil, now, &driver.Busy{After: after}
}

// stages are the constant stages of the fast commands' pipelines,
// marshaled once per Store (they name its id).
type stages struct {
	acquire, release bson.A // of bson.Raw
}

func (d *docs) stages() *stages {
	d.stagesOnce.Do(func() {
		d.stagesV = &stages{acquire: marshalStages(acquireStages(d.sid)), release: marshalStages(releaseStages())}
	})
	return d.stagesV
}

func marshalStages(p mongo.Pipeline) bson.A {
	out := make(bson.A, len(p))
	for i, st := range p {
		raw, err := bson.Marshal(st)
		if err != nil {
			panic(err) // a constant pipeline of bson.D: cannot fail
		}
		out[i] = bson.Raw(raw)
	}
	return out
}

// acquireStages are the constant stages of acquireFree's pipeline, after
// the first, which sets the request's values as temporaries (_o, _ttl,
// _qttl, _queue, _fr, _host, _meta, _ver).
func acquireStages(sid string) mongo.Pipeline {
	owner := "$_o"
	isLive := bson.D{{Key: "$gt", Value: bson.A{"$$this.x", "$_now"}}}
	// entry is the owner's holder entry, or with queued its queue entry
	// (a missing _host or _meta leaves the field out).
	entry := func(token any, queued bool) bson.D {
		e := bson.D{{Key: "o", Value: owner}, {Key: "m", Value: int32(driver.Exclusive)}, {Key: "t", Value: token},
			{Key: "host", Value: "$_host"}, {Key: "meta", Value: "$_meta"}}
		ttl := "$_ttl"
		if queued {
			ttl = "$_qttl"
			e = append(e, bson.E{Key: "ht", Value: "$_ttl"}, bson.E{Key: "s", Value: sid})
		}
		return append(e, bson.E{Key: "ttl", Value: ttl}, bson.E{Key: "c", Value: "$_now"}, bson.E{Key: "r", Value: "$_now"},
			bson.E{Key: "x", Value: add("$_now", ttl)})
	}
	// Stages compute temporaries (_now, the live entries, the decision)
	// once, then the fields; the temporaries are dropped at the end.
	return mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: "_now", Value: nowNS}}}},
		{{Key: "$set", Value: bson.D{
			{Key: "_lh", Value: filterBy(orEmpty("$h"), isLive)},
			{Key: "_lq", Value: filterBy(orEmpty("$q"), isLive)},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "_held", Value: bson.D{{Key: "$in", Value: bson.A{owner, "$_lh.o"}}}},
			{Key: "_mine", Value: first(filterBy("$_lq", eq("$$this.o", owner)))}, // missing if none
			{Key: "_free", Value: and(eq(size("$_lh"), 0),
				bson.D{{Key: "$or", Value: bson.A{eq(size("$_lq"), 0), eq(fieldOf(first("$_lq"), "o"), owner)}}})},
			{Key: "_dead", Value: bson.D{{Key: "$lt", Value: bson.A{
				add(size("$_lh"), size("$_lq")), add(size(orEmpty("$h")), size(orEmpty("$q")))}}}},
		}}},
		// Entries expired and someone else heads the queue: the lock may be
		// due to be handed over (lockstate.Promote), which the general way
		// does; this command writes nothing.
		{{Key: "$set", Value: bson.D{{Key: "_pro", Value: and("$_dead", bson.D{{Key: "$gt", Value: bson.A{size("$_lq"), 0}}},
			bson.D{{Key: "$ne", Value: bson.A{fieldOf(first("$_lq"), "o"), owner}}})}}}},
		{{Key: "$set", Value: bson.D{
			{Key: "_enq", Value: and("$_queue", bson.D{{Key: "$not", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{"$_free", "$_held", "$_pro"}}}}}},
				eq(bson.D{{Key: "$type", Value: "$_mine"}}, "missing"))},
			// Refresh the owner's queue entry when less than half its time is left.
			{Key: "_ref", Value: and("$_queue", bson.D{{Key: "$not", Value: bson.A{bson.D{{Key: "$or", Value: bson.A{"$_free", "$_held", "$_pro"}}}}}},
				bson.D{{Key: "$lt", Value: bson.A{bson.D{{Key: "$subtract", Value: bson.A{"$_mine.x", "$_now"}}},
					bson.D{{Key: "$divide", Value: bson.A{"$_qttl", 2}}}}}})},
		}}},
		{{Key: "$set", Value: bson.D{{Key: "_w", Value: bson.D{{Key: "$or", Value: bson.A{"$_free", "$_enq", "$_ref"}}}}}}},
		// A document the rules leave as it is keeps every field (a missing
		// one stays missing): the command then writes nothing.
		{{Key: "$set", Value: bson.D{
			{Key: "fr", Value: cond("$_w", cond("$_dead", "$_fr", "$$REMOVE"), "$fr")},
			{Key: "seq", Value: cond("$_free", add(bson.D{{Key: "$ifNull", Value: bson.A{"$seq", int64(0)}}}, int64(1)), "$seq")},
			{Key: "tkt", Value: cond("$_enq", add(bson.D{{Key: "$ifNull", Value: bson.A{"$tkt", int64(0)}}}, int64(1)),
				cond("$_w", bson.D{{Key: "$ifNull", Value: bson.A{"$tkt", int64(0)}}}, "$tkt"))},
			{Key: "v", Value: cond("$_w", "$_ver", "$v")},
			{Key: "a", Value: cond("$_w", true, "$a")},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "h", Value: cond("$_free", bson.A{entry("$seq", false)}, cond("$_w", "$_lh", "$h"))},
			{Key: "q", Value: cond("$_free", filterBy("$_lq", bson.D{{Key: "$ne", Value: bson.A{"$$this.o", owner}}}),
				cond("$_enq", bson.D{{Key: "$concatArrays", Value: bson.A{"$_lq", bson.A{entry("$tkt", true)}}}},
					cond("$_ref", bson.D{{Key: "$map", Value: bson.D{{Key: "input", Value: "$_lq"}, {Key: "in", Value: cond(eq("$$this.o", owner),
						bson.D{{Key: "$mergeObjects", Value: bson.A{"$$this", bson.D{{Key: "r", Value: "$_now"}, {Key: "x", Value: add("$_now", "$_qttl")}, {Key: "ht", Value: "$_ttl"}}}}},
						"$$this")}}}}, "$q")))},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "h", Value: cond(and("$_w", eq(size(orEmpty("$h")), 0)), "$$REMOVE", "$h")},
			{Key: "q", Value: cond(and("$_w", eq(size(orEmpty("$q")), 0)), "$$REMOVE", "$q")},
		}}},
		{{Key: "$unset", Value: bson.A{"_o", "_ttl", "_qttl", "_queue", "_fr", "_host", "_meta", "_ver",
			"_now", "_lh", "_lq", "_held", "_mine", "_free", "_dead", "_pro", "_enq", "_ref", "_w"}}},
	}
}

// releaseHeld releases each key whose owner holds its name, live by the
// server's clock, dropping the name's expired entries as lockstate's
// Release does, and hands the lock over as lockstate's Promote does when
// the head of the queue is exclusive: with no holder left, the head's
// request becomes the holder, with the next token. It reports which keys
// it released. The others (an expired hold, a queue entry, a shared head
// of the queue) go the general way. The keys' names are distinct: each
// write's version tells whether it was the one that matched. A single
// key is first released by releaseAlone, unless its name is busy.
func (d *docs) releaseHeld(ctx context.Context, keys []driver.Key) ([]bool, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	out := make([]bool, len(keys))
	if len(keys) == 1 && !d.isBusy(keys[0].Name) {
		ok, err := d.releaseAlone(ctx, keys[0])
		if err != nil || ok {
			return []bool{ok}, err
		}
		d.setBusy(keys[0].Name)
	}
	models := make([]mongo.WriteModel, len(keys))
	vers := make([]int64, len(keys))
	for i, k := range keys {
		vers[i] = newVer()
		// The filter is the _id alone, which the server finds fastest; the
		// pipeline leaves a document it does not release as it is (every
		// field set to its own value, a missing one staying missing), and
		// the server then writes nothing.
		in := bson.D{{Key: "$set", Value: bson.D{{Key: "_o", Value: lit(k.Owner)}, {Key: "_ver", Value: vers[i]}, {Key: "_fr", Value: freedFor("")}}}}
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: k.Name}}).
			SetUpdate(append(bson.A{in}, d.stages().release...))
	}
	res, err := d.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return nil, d.opErr(err)
	}
	if res.ModifiedCount == int64(len(keys)) {
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	if res.ModifiedCount == 0 {
		return out, nil
	}
	// Some released: the documents that carry this write's versions.
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

// acquireAlone grants an exclusive request on a name whose document has
// no entry at all, or that has no document yet, by a small pipeline in one
// upsert; it returns nil, nil when the document has entries, having
// written nothing (the upsert then fails on the document's _id).
func (d *docs) acquireAlone(ctx context.Context, req *driver.Request, meta bson.A) (*driver.Grant, error) {
	e := bson.D{{Key: "o", Value: lit(req.Owner)}, {Key: "m", Value: int32(driver.Exclusive)}, {Key: "t", Value: "$seq"}}
	if req.Host != "" {
		e = append(e, bson.E{Key: "host", Value: lit(req.Host)})
	}
	if len(meta) > 0 {
		e = append(e, bson.E{Key: "meta", Value: meta})
	}
	e = append(e, bson.E{Key: "ttl", Value: int64(req.TTL)}, bson.E{Key: "c", Value: "$_now"}, bson.E{Key: "r", Value: "$_now"},
		bson.E{Key: "x", Value: add("$_now", int64(req.TTL))})
	pipeline := bson.A{
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "seq", Value: add(bson.D{{Key: "$ifNull", Value: bson.A{"$seq", int64(0)}}}, int64(1))},
			{Key: "tkt", Value: bson.D{{Key: "$ifNull", Value: bson.A{"$tkt", int64(0)}}}},
			{Key: "v", Value: newVer()}, {Key: "a", Value: true}, {Key: "_now", Value: nowNS},
		}}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "h", Value: bson.A{e}}}}},
		bson.D{{Key: "$unset", Value: bson.A{"_now", "fr"}}},
	}
	filter := bson.D{
		{Key: "_id", Value: req.Name},
		{Key: "h", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "q", Value: bson.D{{Key: "$exists", Value: false}}},
	}
	var out document
	err := d.coll.FindOneAndUpdate(ctx, filter, pipeline,
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After).SetProjection(bson.D{{Key: "h", Value: 1}}),
	).Decode(&out)
	if mongo.IsDuplicateKeyError(err) {
		return nil, nil // the document has entries (or was just inserted by another)
	}
	if err != nil {
		return nil, d.opErr(err)
	}
	if len(out.Holders) != 1 || out.Holders[0].Owner != req.Owner {
		return nil, fmt.Errorf("mongo: the grant of %q returned %d holders, not the owner's hold alone", req.Name, len(out.Holders))
	}
	h := out.Holders[0]
	return &driver.Grant{Token: uint64(h.Token), Created: fromNanos(h.Created), Renewed: fromNanos(h.Renewed), Expires: fromNanos(h.Expires)}, nil
}

// busyFor is how long a name whose document had entries, when a small
// command expected none, goes straight to the pipelines: under contention
// the small commands would only add a round trip.
var busyFor = time.Second

func (d *docs) isBusy(name string) bool {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	until, ok := d.busy[name]
	return ok && time.Now().Before(until)
}

func (d *docs) setBusy(name string) {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	if d.busy == nil || len(d.busy) >= maxQueued {
		d.busy = map[string]time.Time{}
	}
	d.busy[name] = time.Now().Add(busyFor)
}

// releaseAlone releases k by a plain update when the owner's live hold is
// the name's only entry (no other holder, no queue entry, live or not):
// then lockstate's Release leaves no entry and Promote has no one to hand
// the lock to. It reports whether it released; otherwise it wrote
// nothing.
func (d *docs) releaseAlone(ctx context.Context, k driver.Key) (bool, error) {
	filter := bson.D{
		{Key: "_id", Value: k.Name},
		{Key: "h", Value: bson.D{{Key: "$size", Value: 1}}},
		{Key: "h.o", Value: k.Owner},
		{Key: "q", Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: "$expr", Value: bson.D{{Key: "$gt", Value: bson.A{first("$h.x"), nowNS}}}},
	}
	update := bson.D{
		{Key: "$set", Value: bson.D{{Key: "v", Value: newVer()}, {Key: "fr", Value: freedFor("*")}}},
		{Key: "$unset", Value: bson.D{{Key: "h", Value: ""}, {Key: "a", Value: ""}}},
	}
	res, err := d.coll.UpdateOne(ctx, filter, update)
	if err != nil {
		return false, d.opErr(err)
	}
	return res.ModifiedCount == 1, nil
}

// Acquire implements driver.Store: the server decides exclusive requests
// in one command (acquireFree), except those of a waiter this store has
// queued and the change stream did not wake as the head of the queue,
// which read first and write only if the rules now grant them: waiters'
// commands would otherwise contend for the document with the writes that
// matter. A waiter the lock was handed to gets its grant without asking
// the server, when that is safe (see handedGrant). The rest goes through
// the records layer, starting from the document already read.
func (s *Store) Acquire(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	key := driver.Key{Name: req.Name, Owner: req.Owner}
	sent := time.Now()
	if g := s.d.handedGrant(req, sent); g != nil {
		return g, nil
	}
	if s.d.isQueued(key) && !s.d.takeHead(key) {
		docs, now, err := s.d.read(ctx, []string{req.Name})
		if err != nil {
			return nil, err
		}
		ctx = context.WithValue(ctx, prefetchKey{}, &prefetch{name: req.Name, doc: docs[req.Name], now: now})
		g, err := s.Store.Acquire(ctx, req)
		switch {
		case err == nil || !errors.Is(err, driver.ErrNotGranted):
			s.d.setQueued(key, mark{})
		case req.Queue:
			s.d.setQueued(key, newMark(sent, now))
		}
		return g, err
	}
	g, freed, pre, now, err := s.d.acquireFree(ctx, req)
	if freed {
		s.Store.Freed(req.Name)
	}
	if err != nil {
		if errors.Is(err, driver.ErrNotGranted) {
			s.d.setQueued(key, newMark(sent, now))
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
		s.d.setQueued(key, newMark(sent, now))
	}
	return g, err
}

// mark is a time of the server's clock ($$NOW, in milliseconds) read by a
// command sent at a time of this machine.
type mark = driver.ServerMark

func newMark(sent, server time.Time) mark {
	return mark{Sent: sent, Server: server, Resolution: time.Millisecond}
}

// handedGrant returns the hold the change stream found handed over to
// req's owner (see watch.go), if the mark of the owner's last refused
// attempt proves that baton may count it as a lease of req.TTL from now on
// (driver.ServerMark.Proves). Otherwise (no mark, a wait so long that drift
// eats the margin, another mode) Acquire asks the server, which finds the
// owner holding and extends the hold.
func (d *docs) handedGrant(req *driver.Request, now time.Time) *driver.Grant {
	k := driver.Key{Name: req.Name, Owner: req.Owner}
	d.queuedMu.Lock()
	e, m := d.handed[k], d.queued[k]
	delete(d.handed, k)
	if e != nil {
		delete(d.queued, k)
		delete(d.heads, k)
	}
	d.queuedMu.Unlock()
	if e == nil || driver.Mode(e.Mode) != req.Mode || int(e.Limit) != req.Limit ||
		!m.Proves(fromNanos(e.Created), fromNanos(e.Expires), req.TTL, now) {
		return nil
	}
	return &driver.Grant{Token: uint64(e.Token), Created: fromNanos(e.Created), Renewed: fromNanos(e.Renewed), Expires: fromNanos(e.Expires)}
}

// setHanded notes the hold the change stream found handed to k.
func (d *docs) setHanded(k driver.Key, e *entry) {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	if d.handed == nil || len(d.handed) >= maxQueued {
		d.handed = map[driver.Key]*entry{}
	}
	d.handed[k] = e
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
	_, ok := d.queued[k]
	return ok
}

// setQueued notes that k is queued, with the mark of its last attempt, or
// with a zero mark that it is not.
func (d *docs) setQueued(k driver.Key, m mark) {
	d.queuedMu.Lock()
	defer d.queuedMu.Unlock()
	switch {
	case m.Sent.IsZero():
		delete(d.queued, k)
		delete(d.handed, k)
	case d.queued == nil || len(d.queued) >= maxQueued:
		d.queued = map[driver.Key]mark{k: m}
	default:
		d.queued[k] = m
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
		s.d.setQueued(k, mark{})
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

// releaseStages are the constant stages of releaseHeld's pipeline, after
// the first, which sets the key's owner _o, the write's version _ver and
// the tail of its fr value _fr (see freedFor).
func releaseStages() mongo.Pipeline {
	owner := "$_o"
	head := func(f string) bson.D { return fieldOf(first("$_lq"), f) } // of the live queue
	// The promoted hold, from the head of the live queue _lq
	// (lockstate.Promote): the next token; it lasts its hold TTL plus
	// lockstate.HandOffExtra of it.
	ht := "$$e.ht"
	extra := bson.D{{Key: "$min", Value: bson.A{bson.D{{Key: "$max", Value: bson.A{
		bson.D{{Key: "$toLong", Value: bson.D{{Key: "$divide", Value: bson.A{ht, 20}}}}}, int64(time.Millisecond)}}}, int64(50 * time.Millisecond)}}}
	next := add(bson.D{{Key: "$ifNull", Value: bson.A{"$seq", int64(0)}}}, int64(1))
	promoted := bson.D{{Key: "$let", Value: bson.D{{Key: "vars", Value: bson.D{{Key: "e", Value: first("$_lq")}}}, {Key: "in", Value: bson.D{
		{Key: "o", Value: "$$e.o"}, {Key: "m", Value: "$$e.m"}, {Key: "t", Value: next},
		{Key: "host", Value: "$$e.host"}, {Key: "meta", Value: "$$e.meta"}, {Key: "ttl", Value: ht}, {Key: "s", Value: "$$e.s"},
		{Key: "c", Value: "$_now"}, {Key: "r", Value: "$_now"},
		{Key: "x", Value: add("$_now", ht, extra)},
	}}}}}
	empty := func(f string) bson.D { return eq(size(orEmpty(f)), 0) }
	holds := bson.D{{Key: "$gt", Value: bson.A{size(filterBy(orEmpty("$h"), and(
		eq("$$this.o", owner),
		bson.D{{Key: "$gt", Value: bson.A{"$$this.x", "$_now"}}},
	))), 0}}}
	// The server can hand over to an exclusive head that has a hold
	// TTL; any other head is the general way's.
	simple := bson.D{{Key: "$or", Value: bson.A{
		empty("$_lq"),
		and(
			eq(head("m"), int32(driver.Exclusive)),
			bson.D{{Key: "$gt", Value: bson.A{head("ht"), int64(0)}}},
		),
	}}}
	return mongo.Pipeline{
		{{Key: "$set", Value: bson.D{{Key: "_now", Value: nowNS}}}},
		{{Key: "$set", Value: bson.D{{Key: "_lh", Value: live("$h", owner)}, {Key: "_lq", Value: live("$q", owner)}}}},
		{{Key: "$set", Value: bson.D{{Key: "_ok", Value: and(holds, simple)}}}},
		{{Key: "$set", Value: bson.D{{Key: "_p", Value: and("$_ok", empty("$_lh"), bson.D{{Key: "$not", Value: bson.A{empty("$_lq")}}})}}}},
		{{Key: "$set", Value: bson.D{
			{Key: "seq", Value: cond("$_p", next, "$seq")},
			{Key: "v", Value: cond("$_ok", "$_ver", "$v")},
			// freedFor(the new holder's Store), from the head's id:
			{Key: "fr", Value: cond("$_ok", bson.D{{Key: "$concat", Value: bson.A{
				cond("$_p", bson.D{{Key: "$ifNull", Value: bson.A{head("s"), "*"}}}, "*"), "$_fr"}}}, "$fr")},
			{Key: "h", Value: cond("$_ok", cond("$_p", bson.A{promoted}, "$_lh"), "$h")},
			{Key: "q", Value: cond("$_ok", cond("$_p",
				bson.D{{Key: "$slice", Value: bson.A{"$_lq", 1, bson.D{{Key: "$max", Value: bson.A{size("$_lq"), 1}}}}}}, "$_lq"), "$q")},
		}}},
		{{Key: "$set", Value: bson.D{
			{Key: "a", Value: cond("$_ok", cond(and(empty("$h"), empty("$q")), "$$REMOVE", true), "$a")},
			{Key: "h", Value: cond(and("$_ok", empty("$h")), "$$REMOVE", "$h")},
			{Key: "q", Value: cond(and("$_ok", empty("$q")), "$$REMOVE", "$q")},
		}}},
		{{Key: "$unset", Value: bson.A{"_o", "_ver", "_fr", "_now", "_lh", "_lq", "_ok", "_p"}}},
	}
}
