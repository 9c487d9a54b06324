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
// It was tested on FerretDB 1.24 with its SQLite handler (the MongoDB wire
// protocol over SQLite), started by the project's scripts; it has not yet
// been run against a real MongoDB server. The same tests run against any
// server given by BATON_TEST_MONGO. It relies only on what both provide:
// unique indexes, single-document inserts, updates and deletes filtered by
// _id and a version, and hello's localTime.
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
// is one document of its own, with a random _id:
//
//	{_id, n: name, t: ticket, o: owner, m: mode, l: limit, g: granted,
//	 x: dead, v: version, ttl, c: created, r: renewed, h: host, meta: [{k, v}]}
//
// The required index is unique on (n, t); two more serve owner groups and
// purges. New and Open create them when missing ([Store.CreateIndexes]).
// Names and owners are only ever values in queries, never field names or
// operators; metadata is stored as pairs for the same reason.
//
// # Tickets: mutual exclusion from unique inserts
//
// A newcomer reads the name's documents and inserts its own with ticket
// max+1, granted or queued as the grant rules (package lockstate) decide
// from that read. The unique index makes the insert fail when anyone
// inserted that ticket meanwhile; the newcomer then reads again. Tickets of
// a name are therefore contiguous, every one is inserted exactly once, and
// a document with ticket t saw, when it was decided, every document with
// a smaller ticket: a decision never misses one that comes before it. The
// ticket is the fencing token: tokens are strictly increasing per name,
// because the highest ticket of a name is never deleted (it stays as a
// tombstone for the life of the collection, with up to 16 below it: about
// 150 bytes per name ever locked, up to 2.5 KB for a name locked often),
// so the counter never goes back.
//
// Releases and takeovers do not delete documents but mark them dead
// (tombstones). Tombstones more than 16 tickets below a name's highest
// are deleted a second after they were seen dead (by an acquire of the
// name) or by Purge. A deleted ticket could in principle be inserted
// again by a newcomer whose read is older than that ticket. An insert
// whose reply came within 300ms of sending the read (on the newcomer's
// own monotonic clock) cannot have: the ticket it would reuse was
// created after that read and kept for a second after it died. A slower
// insert costs one more query, for the name's highest ticket: if that is
// within 16 of the insert's, nothing the insert could reuse was ever
// deleted and the insert stands; otherwise it is withdrawn and the
// newcomer starts over. So a server slower than 300ms per round trip
// still grants locks, at one query more each.
//
// A queued request is granted, later, by its owner: it reads again and,
// when the rules allow, sets its own document granted. Those behind count
// a queued entry ahead of them exactly as a holder, so this change does
// not alter their decisions.
//
// # Expiry: the holder's observation
//
// No decision compares two machines' clocks. A waiter takes over a
// document (marks it dead, filtered by _id and the version it saw) only
// after seeing it unchanged for its whole TTL, plus 2% and 5ms, on its own
// monotonic clock, counted from when the reply that showed that version
// arrived. The holder counts its lease from the moment it sent the write
// that made that version, less 1%: it stops before anyone can take over.
// A renewal writes a new version. TryLock against a dead holder therefore
// fails until the waiter's store has watched the document for a TTL; Lock
// waits that long. Status and Purge judge expiry by the server's clock
// (hello's localTime against the server-stamped renewal time,
// $currentDate).
//
// # Renewals on servers whose updates are not atomic
//
// On MongoDB, an update and a delete of one document are atomic: a
// renewal and a takeover filtered by the same version cannot both
// succeed. FerretDB 1.24 reads a document and writes it back in two steps,
// so a renewal could write a new version into a document that a takeover
// has just read and is about to mark dead. This store makes that harmless:
// a renewal, re-acquire or queue-to-grant change counts only when its reply
// arrives before the deadline of the version it replaces (which this store
// wrote and remembers). A takeover's read comes after a TTL of seeing that
// version, hence after that deadline, hence after the renewal's write: it
// sees the new version and changes nothing. A renewal that arrives later
// is reported as lost. What FerretDB cannot make safe: a renewal or
// re-acquire of a hold made through a store that did not write the hold's
// current version (RenewOwner, or Lock with a chosen Owner from another
// process) has no deadline to check; on FerretDB it can, in a window of
// microseconds, race with a takeover of a hold that had already expired.
// On MongoDB it cannot.
//
// # Waking waiters
//
// FerretDB has no change streams, so a waiting Lock polls: it reads the
// name's live documents every 10 to 50ms and tries again only when the
// grant rules would let it in, so only the head of the queue wakes. A
// hand-off costs the release, up to one poll interval and the acquire.
//
// # Round trips
//
// An uncontended acquire is a read and one ordered bulk write (the insert,
// then $currentDate on it); a renewal and a release one update each (two
// when this store did not write the hold: a lookup first); Status and
// Purge ask hello for the server's time first. A newcomer that loses a
// ticket race reads again.
//
// # Write concern and failover
//
// Writes use majority write concern by default (Options.WriteConcern or
// the URL's w= change it), and reads majority read concern from the
// primary, so that a decision never counts a write that a replica-set
// failover may roll back, and a grant acknowledged to a holder survives
// a failover. With w=1, a failover can lose a grant (two holders) or the
// highest ticket of a name (a token handed out twice). Failover has not
// been tested: FerretDB has no replica sets.
//
// # FerretDB performance
//
// FerretDB 1.24's SQLite handler scans the whole collection for every
// query that is not an _id lookup (about 50µs per document here): keep
// one collection for locks only; it stays small (live holds, queue
// entries, a second of tombstones and one document per name). On MongoDB
// the indexes serve every query.
//
// # Migrating from square/mongo-lock
//
//	mongo-lock                                  baton
//	lock.NewClient(col)                         batonmongo.New(ctx, client, &batonmongo.Options{Database, Collection}); baton.New(store, nil)
//	c.CreateIndexes(ctx)                        store.CreateIndexes(ctx) (New does it)
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
