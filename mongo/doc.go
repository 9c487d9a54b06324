// Package mongo is baton's MongoDB store, on the official Go driver
// (go.mongodb.org/mongo-driver/v2), for MongoDB 5.0 or later. Import it
// for its URL schemes:
//
//	import _ "github.com/baton-go/baton/mongo"
//
//	client, err := baton.Open(ctx, "mongodb://user:pw@db1,db2,db3/locks?replicaSet=rs0&tls=true", nil)
//
// or build a store over a driver client you own (your TLS, auth, pools)
// with [New] and pass it to baton.New.
//
// # URL
//
//	mongodb://[user:password@]host1[:port1][,host2…]/[database][?options]
//	mongodb+srv://…
//
// The URL is the driver's connection string: credentials, authSource,
// tls, replicaSet, timeouts, w, readPreference… all apply. The path names
// the database (default "baton"); the option collection= names the
// collection (default "baton_locks"), poll= the waiters' poll on a
// deployment without change streams (default 50ms). A store opened from a
// URL owns its connection; Close disconnects it.
//
// # Documents
//
// One document per lock name, its _id: the name's fencing counter, its
// holders and its FIFO queue, and a random version that every write
// changes. A name's document stays when the name is idle (about 100
// bytes), so that its tokens never repeat. One index besides _id's
// ([Indexes]) serves listings and purges; [Open] and a Store's first call
// create it.
//
// # Guarantees and limits
//
// Every decision is one write to the name's document, judged by the
// server's clock ($$NOW), never a client's:
//   - an exclusive acquire, and a release of a live hold, are decided on
//     the server by one pipeline update (findAndModify) that grants, queues
//     or releases as baton's rules say; the commonest cases (a name without
//     entries, a hold that is its name's only entry) by a smaller command
//     first;
//   - anything else (shared modes, limits, renewals, purges) reads the
//     document with the server's time, applies baton's rules, and writes it
//     back only if its version is unchanged.
//
// Tokens are strictly increasing per name for the life of the collection.
// A holder that stopped renewing is taken over as soon as its TTL has run
// out by the server's clock.
//
// Writes use majority write concern (Options.WriteConcern or the URL's w=
// change it), and listings majority read concern, from the primary: a
// grant acknowledged to a holder survives a replica-set failover, and a
// stepdown during a hold never yields two holders (tested on a
// three-member set). With w=1 a failover can lose a grant or repeat a
// token.
//
// The lock is handed over by the server: a write that lets a holder or
// queue entry go (a release, an expiry it notices) also grants the queued
// requests that baton's rules now let in, in FIFO order. Waiters are woken
// by a change stream, one per Store, open while someone waits (and 200ms
// after): it reports those writes with the name's holders, and a waiter
// found among them takes its grant without a command of its own (when its
// last attempt's server time proves the hold outlasts the lease baton
// counts; otherwise it asks once). So a hand-off costs the release's one
// write. The write names the Store of the new holder, and the server
// reports it to that Store's stream only; other waiters are not woken
// while no one can be granted. A
// standalone server has neither change streams nor majority reads: its
// waiters read the document every Options.Poll (the suite runs on one
// too), and a grant survives only as long as that server's disk.
//
// FerretDB is refused at Open (and at a New store's first call): its
// updates are not atomic, so a conditional write could lose to a
// concurrent one. See docs/stores/mongo.md.
//
// # Migrating from square/mongo-lock
//
//	mongo-lock                                  baton
//	lock.NewClient(col)                         batonmongo.New over your *mongo.Client, with Options{Database, Collection}; baton.New(store, nil)
//	c.CreateIndexes(ctx)                        store.CreateIndexes(ctx) (Open and the first call do it)
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
// released) judged by the server's clock, where mongo-lock compares
// expiry with the acquiring client's clock; mongo-lock's lockId is
// baton's Owner; baton hands out a fencing token per grant and waits in
// FIFO order; the documents are not mongo-lock's, so the two cannot share
// a collection.
package mongo
