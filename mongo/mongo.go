package mongo

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/records"
)

func init() {
	for _, scheme := range []string{"mongodb", "mongodb+srv"} {
		baton.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Store, error) {
			return Open(ctx, u.String(), nil)
		})
	}
}

// DefaultDatabase and DefaultCollection are used when neither the URL nor
// Options name them.
const (
	DefaultDatabase   = "baton"
	DefaultCollection = "baton_locks"
)

// Options configures a Store. The zero value is usable.
type Options struct {
	// Database is the database of the lock collection; for Open, the URL's
	// path overrides it. Default "baton".
	Database string
	// Collection holds the locks; default "baton_locks". Give each
	// application its own, or share one: names are compared exactly.
	Collection string
	// WriteConcern of every write. Default: majority, so that a grant
	// survives the failover of a replica set (see the package
	// documentation). A URL's w= (or journal=, wtimeoutMS=) option sets it
	// too.
	WriteConcern *writeconcern.WriteConcern
	// Poll is how often a waiter reads its lock's document when the
	// deployment has no change streams (a standalone server): 50ms if
	// zero.
	Poll time.Duration
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("mongo: %w", driver.ErrClosed)

// Store is a baton store on a MongoDB collection: one document per lock
// name.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, Watch) are its contract with baton's Client, not an application
// API: use the store through baton.New.
type Store struct {
	*records.Store
	d *docs
}

// New returns a store over a client you own (its TLS, auth, pools and
// timeouts are yours). Before its first operation the store checks the
// server (MongoDB 5.0 or later; FerretDB is refused) and creates the
// collection's indexes if missing. Close does not disconnect the client.
func New(client *mongo.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("mongo: New needs a client")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Database == "" {
		o.Database = DefaultDatabase
	}
	if o.Collection == "" {
		o.Collection = DefaultCollection
	}
	if o.WriteConcern == nil {
		o.WriteConcern = writeconcern.Majority()
	}
	switch {
	case o.Poll == 0:
		o.Poll = 50 * time.Millisecond
	case o.Poll < time.Millisecond:
		return nil, fmt.Errorf("mongo: Poll %v is below 1ms", o.Poll)
	}
	// Listings and waiters read from the primary, and only what a majority
	// has: a write that a failover rolls back is never shown. A decision
	// reads the primary's latest ("local"): its write is conditional on
	// the version it read, so it commits only after that version does,
	// and is rolled back with it (see "Failover").
	db := client.Database(o.Database)
	co := func(rc *readconcern.ReadConcern) *options.CollectionOptionsBuilder {
		return options.Collection().SetWriteConcern(o.WriteConcern).SetReadPreference(readpref.Primary()).SetReadConcern(rc)
	}
	coll := db.Collection(o.Collection, co(readconcern.Majority()))
	latest := db.Collection(o.Collection, co(readconcern.Local()))
	d := &docs{client: client, coll: coll, latest: latest, poll: o.Poll, sid: newSID()}
	d.stream.d = d
	// Store.Watch wakes waiters (by the change stream, or every o.Poll).
	return &Store{Store: records.New(d, nil), d: d}, nil
}

// Collection returns the store's collection.
func (s *Store) Collection() *mongo.Collection { return s.d.coll }

// Indexes are the store's indexes besides _id's (the lock name): one
// serves the listings and purges of the names that have holders or
// waiters.
func Indexes() []Index {
	return []Index{{
		Name: "baton_active", Keys: bson.D{{Key: "a", Value: 1}, {Key: "_id", Value: 1}},
		Partial: bson.D{{Key: "a", Value: bson.D{{Key: "$exists", Value: true}}}},
	}}
}

// Index describes one index of the store's collection.
type Index struct {
	Name    string
	Keys    bson.D
	Partial bson.D // the partial filter expression, if any
}

// CreateIndexes creates the store's indexes; indexes that exist already
// (by name) are skipped. Open calls it, and a Store calls it before its
// first operation. Mutual exclusion does not depend on them: every
// decision is a write to one document, by _id.
func (s *Store) CreateIndexes(ctx context.Context) error { return s.d.createIndexes(ctx) }

// docs are the lock documents of one collection: the records the Store
// works on.
type docs struct {
	client *mongo.Client
	coll   *mongo.Collection // majority read concern
	latest *mongo.Collection // the same, local read concern: decisions' reads
	// listing is what listings and waiters read: coll, or latest on a
	// standalone server (no majority reads there). Set by ensure.
	listing *mongo.Collection
	owns    bool
	poll    time.Duration

	readyMu sync.Mutex
	ready   atomic.Bool // the server was checked and the indexes exist

	// sid is this Store's id, random, kept in the queue entries it writes
	// (and the holds they become): the change stream reports the hand-off
	// of a lock only to the Store of its new holder (see stream).
	sid string

	stagesOnce sync.Once
	stagesV    *stages

	queuedMu sync.Mutex
	queued   map[driver.Key]mark   // waiters this store queued (see Store.Acquire)
	heads    map[driver.Key]bool   // waiters the change stream woke as the head of the queue
	handed   map[driver.Key]*entry // holds the change stream found handed to waiters
	busy     map[string]time.Time  // names the small commands skip until then

	stream stream
	closed atomic.Bool
}

func (d *docs) createIndexes(ctx context.Context) error {
	fail := func(err error) error {
		return fmt.Errorf("mongo: create indexes of %s.%s: %w", d.coll.Database().Name(), d.coll.Name(), err)
	}
	specs, err := d.coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fail(err)
	}
	have := map[string]bool{}
	for _, sp := range specs {
		have[sp.Name] = true
	}
	if have["baton_name_ticket"] {
		return fmt.Errorf("mongo: collection %s.%s holds the documents of baton's earlier MongoDB store (one per request; this one keeps one per name): use another collection, or drop it once no process of the earlier version uses it", d.coll.Database().Name(), d.coll.Name())
	}
	for _, m := range Indexes() {
		if have[m.Name] {
			continue
		}
		o := options.Index().SetName(m.Name)
		if m.Partial != nil {
			o.SetPartialFilterExpression(m.Partial)
		}
		if _, err := d.coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: m.Keys, Options: o}); err != nil {
			return fail(err)
		}
	}
	return nil
}

// ensure checks the server and creates the indexes, once per Store.
func (d *docs) ensure(ctx context.Context) error {
	if d.closed.Load() {
		return ErrClosed
	}
	if d.ready.Load() {
		return nil
	}
	d.readyMu.Lock()
	defer d.readyMu.Unlock()
	if d.ready.Load() {
		return nil
	}
	standalone, err := checkServer(ctx, d.client)
	if err != nil {
		return err
	}
	d.listing = d.coll
	if standalone {
		// No majority reads, no change streams: listings read what the
		// server has, and waiters poll.
		d.listing = d.latest
		d.stream.mu.Lock()
		d.stream.none = true
		d.stream.mu.Unlock()
	}
	if err := d.createIndexes(ctx); err != nil {
		return err
	}
	d.ready.Store(true)
	return nil
}

// checkServer refuses servers the store would not be correct on: FerretDB
// (whose updates are not atomic) and MongoDB before 5.0. It reports
// whether the server is a standalone one (not a replica set member, not
// mongos).
func checkServer(ctx context.Context, c *mongo.Client) (standalone bool, err error) {
	var bi struct {
		Version      string  `bson:"version"`
		VersionArray []int32 `bson:"versionArray"`
		Ferret       string  `bson:"ferretdbVersion"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil {
		return false, fmt.Errorf("mongo: reading the server's buildInfo: %w", err)
	}
	if bi.Ferret != "" {
		return false, fmt.Errorf("mongo: FerretDB %s is not supported: its updates are not atomic (a conditional update by version can lose to a concurrent one), and it has no $$NOW or change streams; use MongoDB 5.0 or later", bi.Ferret)
	}
	if len(bi.VersionArray) > 0 && bi.VersionArray[0] < 5 {
		return false, fmt.Errorf("mongo: MongoDB %s is not supported: the store needs 5.0 or later", bi.Version)
	}
	var h struct {
		SetName string `bson:"setName"`
		Msg     string `bson:"msg"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&h); err != nil {
		return false, fmt.Errorf("mongo: hello: %w", err)
	}
	return h.SetName == "" && h.Msg != "isdbgrid", nil
}

// Close implements records.Records: it stops the change stream and, for a
// store made by Open, disconnects.
func (d *docs) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.stream.close()
	if d.owns {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return d.client.Disconnect(ctx)
	}
	return nil
}

// Open connects to the server of a mongodb:// or mongodb+srv:// URL (the
// driver's connection string: hosts, credentials, tls, authSource,
// replicaSet, w, timeouts, … all apply) and returns a store that owns the
// connection. The URL's path names the database; the option collection=
// names the collection. Options given in the URL apply where opts leaves
// the field zero; opts may be nil. Open checks the server and creates the
// indexes, within ctx.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("mongo: store URL: %w", err)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	q := u.Query()
	if c := q.Get("collection"); c != "" && o.Collection == "" {
		o.Collection = c
	}
	q.Del("collection")
	if p := q.Get("poll"); p != "" {
		d, err := time.ParseDuration(p)
		if err != nil {
			return nil, fmt.Errorf("mongo: store URL: poll=%q: %w", p, err)
		}
		if o.Poll == 0 {
			o.Poll = d
		}
	}
	q.Del("poll")
	u.RawQuery = q.Encode()
	if db := strings.TrimPrefix(u.Path, "/"); db != "" && o.Database == "" {
		o.Database = db
	}
	co := options.Client().ApplyURI(u.String())
	if co.WriteConcern != nil && o.WriteConcern == nil {
		o.WriteConcern = co.WriteConcern
	}
	client, err := mongo.Connect(co)
	if err != nil {
		return nil, fmt.Errorf("mongo: connect %s: %w", u.Redacted(), err)
	}
	s, err := New(client, &o)
	if err == nil {
		err = s.d.ensure(ctx)
	}
	if err != nil {
		client.Disconnect(context.WithoutCancel(ctx))
		return nil, err
	}
	s.d.owns = true
	return s, nil
}
