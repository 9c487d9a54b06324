// Package mongo is baton's MongoDB store, on the official Go driver
// (go.mongodb.org/mongo-driver/v2). Import it for its URL schemes:
//
//	import _ "github.com/baton-go/baton/mongo"
//
//	client, err := baton.Open(ctx, "mongodb://user:pw@db1,db2,db3/locks?replicaSet=rs0&tls=true", nil)
//
// or build a store over a driver client you own (your TLS, auth, pools)
// with [New] and pass it to baton.New.
//
// It was tested on FerretDB 1.24 (the MongoDB wire protocol over SQLite),
// not yet against a real MongoDB server, and relies only on what both
// provide: unique indexes, single-document writes filtered by _id and a
// version, and hello's localTime. See docs/stores/mongo.md.
//
// # URL
//
//	mongodb://[user:password@]host1[:port1][,host2…]/[database][?options]
//	mongodb+srv://…
//
// The URL is the driver's connection string: credentials, authSource,
// tls, replicaSet, timeouts, w, readPreference… all apply. The path names
// the database (default "baton"); the option collection= names the
// collection (default "baton_locks"). A store opened from a URL owns its
// connection; Close disconnects it.
//
// # Documents
//
// Every request of an owner for a name (a hold, or a place in the queue)
// is one document of its own. The required index is unique on (name,
// ticket); two more serve owner groups and purges ([Indexes]). They are
// created if missing by [Open] and before a Store's first acquire
// ([Store.CreateIndexes]). Released documents become tombstones, deleted
// after a second unless within 16 tickets of the name's highest, which
// stays for good. On FerretDB every query other than by _id scans the
// collection: keep one collection for locks only.
//
// # Guarantees and limits
//
// A newcomer inserts its document with the name's next ticket; the unique
// index makes that insert fail if anyone took the ticket meanwhile, so
// every decision sees every request before it. The ticket is the fencing
// token: strictly increasing per name. See docs/stores/mongo.md#tickets-mutual-exclusion-from-unique-inserts.
//
// No decision compares two machines' clocks: a waiter takes over a hold
// only after seeing it unchanged for its TTL, plus 2% and 5ms, on its own
// monotonic clock, so TryLock against a dead holder fails, and Lock waits,
// until then. Status and Purge judge expiry by the server's clock. See
// docs/stores/mongo.md#expiry-the-holders-observation.
//
// On FerretDB, whose updates are not atomic, a renewal or re-acquire of a
// hold through a store that did not write its current version
// (RenewOwner, or a chosen Owner used from another process) can race with
// a takeover of a hold that had already expired; on MongoDB it cannot. See
// docs/stores/mongo.md#renewals-on-servers-whose-updates-are-not-atomic.
//
// Writes use majority write concern (Options.WriteConcern or the URL's w=
// change it) and reads majority read concern from the primary, so a grant
// survives a replica-set failover; with w=1 a failover can lose a grant or
// repeat a token. Failover has not been tested.
//
// Waiters poll the name's documents every 10 to 50ms; only the head of the
// queue tries again.
//
// # Migrating from square/mongo-lock
//
//	mongo-lock                                  baton
//	lock.NewClient(col)                         batonmongo.New over your *mongo.Client, with Options{Database, Collection}; baton.New(store, nil)
//	c.CreateIndexes(ctx)                        store.CreateIndexes(ctx) (Open and the first acquire do it)
//	c.XLock(ctx, res, lockId, LockDetails{TTL}) client.TryLock(ctx, res, &baton.LockOptions{Owner: lockId, TTL: ttl}) (or Lock to wait)
//	c.SLock(ctx, res, lockId, ld, -1)           client.TryLock(ctx, res, &baton.LockOptions{Owner: lockId, Shared: true})
//	c.SLock(ctx, res, lockId, ld, n)            client.TryLock(ctx, res, &baton.LockOptions{Owner: lockId, Limit: n})
//	c.Unlock(ctx, lockId)                       client.ReleaseOwner(ctx, lockId) (returns the released holds)
//	c.Renew(ctx, lockId, ttl)                   client.RenewOwner(ctx, lockId, ttl) (returns the renewed holds)
//	c.Status(ctx, Filter{…})                    client.Status(ctx, &baton.Filter{…}):
//	  CreatedBefore, CreatedAfter                 CreatedBefore, CreatedAfter
//	  TTLlt, TTLgte (seconds)                     LeftBelow, LeftAtLeast (durations)
//	  Resource, LockId, Owner                     Name, Owner (the lock id), Meta["owner"] by your own convention
//	lock.NewPurger(c).Purge(ctx)                client.Purge(ctx)
//	LockDetails{Owner, Host}                    LockOptions.Meta, Options.Host
//	ErrAlreadyLocked                            baton.ErrLocked
//
// Differences: every lock has a TTL (baton keeps it alive until
// released); mongo-lock's lockId is baton's Owner; baton hands out a
// fencing token per grant and waits in FIFO order; the documents are not
// mongo-lock's, so the two cannot share a collection.
package mongo
