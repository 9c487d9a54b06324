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
	// WriteConcern of every write. Default: majority, so that a
	// grant survives the failover of a replica set (see the package
	// documentation). A URL's w= (or journal=, wtimeoutMS=) option sets it
	// too.
	WriteConcern *writeconcern.WriteConcern
}

// Store is a baton store on a MongoDB collection.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	client *mongo.Client
	coll   *mongo.Collection
	owns   bool

	// rewriting serializes the rewrites of one key (by a stripe of its
	// hash), so that two renewals of one hold in this store (keepalive
	// and a manual Renew) each see the version the other wrote.
	rewriting [64]sync.Mutex

	indexMu sync.Mutex
	indexed atomic.Bool // CreateIndexes succeeded

	mu     sync.Mutex
	closed bool
	own    map[driver.Key]*own
	seen   map[string]map[string]seen      // name → entry id → observation
	dead   map[string]map[string]time.Time // name → tombstone id → first seen
}

// New returns a store over a client you own (its TLS, auth, pools and
// timeouts are yours). The store creates the collection's indexes, if
// missing, before its first acquire. Close does not disconnect the client.
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
	// Decisions read from the primary, and only what a majority has: a
	// write that a failover rolls back is never counted (see "Failover").
	coll := client.Database(o.Database).Collection(o.Collection, options.Collection().
		SetWriteConcern(o.WriteConcern).SetReadConcern(readconcern.Majority()).SetReadPreference(readpref.Primary()))
	s := &Store{
		client: client, coll: coll,
		own:  map[driver.Key]*own{},
		seen: map[string]map[string]seen{},
		dead: map[string]map[string]time.Time{},
	}
	return s, nil
}

// ensureIndexes creates the indexes once per Store: the required one makes
// each ticket's insert unique, which the grant relies on.
func (s *Store) ensureIndexes(ctx context.Context) error {
	if s.indexed.Load() {
		return nil
	}
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if s.indexed.Load() {
		return nil
	}
	return s.CreateIndexes(ctx)
}

// Collection returns the store's collection.
func (s *Store) Collection() *mongo.Collection { return s.coll }

// Indexes are the store's indexes: the first is required (it makes each
// ticket of a name unique, which mutual exclusion rests on), the others
// serve owner groups, listings and purges.
func Indexes() []Index {
	return []Index{
		{Name: "baton_name_ticket", Keys: bson.D{{Key: "n", Value: 1}, {Key: "t", Value: 1}}, Unique: true},
		{Name: "baton_owner_name", Keys: bson.D{{Key: "o", Value: 1}, {Key: "n", Value: 1}}},
		{Name: "baton_dead_renewed", Keys: bson.D{{Key: "x", Value: 1}, {Key: "r", Value: 1}}},
	}
}

// Index describes one index of the store's collection.
type Index struct {
	Name   string
	Keys   bson.D
	Unique bool
}

// CreateIndexes creates the required and recommended indexes; indexes
// that exist already (by name) are skipped. Open calls it, and a Store
// calls it before its first acquire.
func (s *Store) CreateIndexes(ctx context.Context) error {
	fail := func(err error) error {
		return fmt.Errorf("mongo: create indexes of %s.%s: %w", s.coll.Database().Name(), s.coll.Name(), err)
	}
	specs, err := s.coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fail(err)
	}
	have := map[string]bool{}
	for _, sp := range specs {
		have[sp.Name] = true
	}
	// One at a time: FerretDB 1.24 drops the connection when one
	// createIndexes command names several indexes of which some exist.
	for _, m := range Indexes() {
		if have[m.Name] {
			continue
		}
		o := options.Index().SetName(m.Name)
		if m.Unique {
			o.SetUnique(true)
		}
		if _, err := s.coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: m.Keys, Options: o}); err != nil {
			return fail(err)
		}
	}
	s.indexed.Store(true)
	return nil
}

// Open connects to the server of a mongodb:// or mongodb+srv:// URL (the
// driver's connection string: hosts, credentials, tls, authSource,
// replicaSet, w, timeouts, … all apply) and returns a store that owns the
// connection. The URL's path names the database; the option collection=
// names the collection. Options given in the URL apply where opts leaves
// the field zero; opts may be nil.
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
		err = s.CreateIndexes(ctx)
	}
	if err != nil {
		client.Disconnect(context.WithoutCancel(ctx))
		return nil, err
	}
	s.owns = true
	return s, nil
}
