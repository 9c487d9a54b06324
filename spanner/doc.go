// Package spanner is baton's Cloud Spanner store: locks, semaphores and
// leader elections shared by every process that reaches one Spanner
// database, on the official client (cloud.google.com/go/spanner). Import
// it for its URL scheme:
//
//	import _ "github.com/baton-go/baton/spanner"
//
//	client, err := baton.Open(ctx, "spanner://projects/P/instances/I/databases/D?table=baton_locks", nil)
//
// or build a store over a *spanner.Client of your own (its credentials,
// endpoint and session options are yours) with [New] and pass it to
// baton.New. SPANNER_EMULATOR_HOST is honoured, as by every Spanner client.
//
// # URL
//
//	spanner://projects/P/instances/I/databases/D[?option=value&…]
//
//	table=NAME     Options.Table (default baton_locks)
//	create=true    Options.Create: create the table if it is missing
//	poll=25ms      Options.Poll: the longest pause of a waiting Lock
//
// Credentials come from the environment (Application Default Credentials),
// as for any Google Cloud client; use [Open] or [New] to pass options.
//
// # Table
//
// One table, whose statement [DDL] returns (run it with your schema tooling,
// or let [Open] run it with Options.Create, or call [CreateTable]):
//
//	CREATE TABLE baton_locks (
//	  name  STRING(MAX) NOT NULL,
//	  state BYTES(MAX),
//	  stamp TIMESTAMP OPTIONS (allow_commit_timestamp = true),
//	) PRIMARY KEY (name)
//
// One row per lock name ever used: its holders, FIFO queue, fencing and
// queue counters, as JSON, evaluated in Go with the grant rules of package
// lockstate, and stamped with the commit timestamp of the write that made
// it. The row named "" is the store's clock (see Clock). Rows are never
// deleted, so that tokens keep growing: each name costs about 200 bytes for
// the life of the table. The table name is checked (a letter, then letters,
// digits, underscores) and names and values only ever travel as keys and
// mutation values, never inside SQL: the store runs no SQL.
//
// # How a call is decided
//
// Acquire, Renew and Release are each one read-write transaction: a read
// of the rows of the names involved, a decision in Go, and a commit of one
// InsertOrUpdate mutation per changed name, whose stamp is the commit
// timestamp. Spanner's locks serialize the transactions: one that read a
// row (or an absent key) that another then wrote aborts, and the client
// runs it again from the read. A batch of renewals or releases is one
// transaction; a refused acquire that changes nothing commits nothing.
//
// The emulator runs one read-write transaction at a time and may answer
// the others with FailedPrecondition ("Invalid transaction ID", "Cannot read
// or query using a transaction after it has been committed") or NotFound
// ("Transaction not found") where real Spanner aborts. The store runs such
// a transaction again from the read, after a short random pause, up to 100
// times: on real Spanner these errors mean the transaction is gone with
// nothing committed, so doing so is safe there too. No other error is
// retried by the store; baton retries failed calls as for every store.
//
// Mutations, not DML: the decision is made in Go on what was read, and a
// mutation carries its result and the commit timestamp
// (PENDING_COMMIT_TIMESTAMP) without a statement to parse; DML would add
// nothing but a round trip per statement.
//
// Round trips: an acquire, a renewal batch or a release batch is a read
// (which begins the transaction) and a commit: two. List is one strong
// read. A store's first call, and any call after ten idle seconds, first
// commits one write to the clock row (two more).
//
// # Clock, expiry and tokens
//
// The store's time is Spanner's commit timestamps (TrueTime): never SQL
// time functions, never a client's wall clock. A hold granted or renewed by
// a write committed at t expires at t + TTL; since t is later than the
// moment the request was sent, the holder's own deadline (send time + TTL
// on its monotonic clock) comes first. Expiry is judged with a lower bound
// of the store's time: the latest commit timestamp this store has seen
// (each of its commits returns one, and Spanner's commit wait makes it past
// when it is returned), or the stamp of a row just read, whichever is later,
// advanced by 99% of the time elapsed since on the local monotonic clock.
// That bound is safe as long as the local clock runs no more than 1% fast,
// the same rate assumption baton's lease deadlines make; after ten seconds
// without a commit the store refreshes it with a write to the clock row.
//
// A grant's fencing token is its commit timestamp in microseconds since the
// Unix epoch (time.UnixMicro(int64(token)) gives it back), or one more than
// the name's previous token if that is not smaller (two commits in one
// microsecond, which real Spanner does not produce for one row). Tokens of
// a name therefore only grow, across holders, purges and reopened stores.
// Because the commit timestamp is known only after the commit, the row
// records which entries the write touched, and readers take their times
// (and new tokens) from the row's stamp.
//
// # Waiting
//
// The store is built on package records (baton's record-store layer), which
// wakes the waiters of this process at once. Spanner cannot notify the
// others, so a waiting Lock polls: it reads the name's current row (one
// strong read) every few milliseconds, backing off to Options.Poll, and
// tries again as soon as the grant rules applied to what it read would
// grant its request (so only the waiters that can win try, in FIFO order),
// or when baton's MaxPoll runs out. A hand-off costs the releasing commit
// plus at most one poll. Each waiter costs up to 1/Poll reads a second:
// for large fleets of electors that can wait, set Poll to a good part of
// the TTL (spindle reads once per lease).
//
// # Leader election, and spindle
//
// baton's Election is spindle's leader loop on any store; on this one it
// keeps spindle's essentials: a named lease in a Spanner table, heartbeats,
// takeover once the lease has expired by Spanner's time, and fencing tokens
// that are TrueTime commit timestamps, strictly increasing per name.
//
//	spindle                                    baton
//	spindle.New(db, "locktable", "mylock",     s, _ := spanner.New(db, &spanner.Options{Table: "baton_locks"})
//	    spindle.WithDuration(5000))            c, _ := baton.New(s, &baton.Options{TTL: 5 * time.Second})
//	                                           e, _ := c.Election("mylock", nil)
//	lock.Run(quit, done)                       go func() { done <- e.Run(quit, func(ctx context.Context, l *baton.Lease) error {
//	                                               <-ctx.Done() // lead until ctx ends; leadership lost ends it too
//	                                               return nil
//	                                           }) }()
//	locked, token := lock.HasLock()            locked, token := e.IsLeader()
//	token (a commit TIMESTAMP)                 token (its microseconds); time.UnixMicro(int64(token))
//	heartbeats (every lease/…)                 keepalive, every TTL/3, automatic
//	takeover after the lease expires           the same, judged by commit timestamps
//	(not in spindle)                           e.Leader(ctx), e.Observe(ctx, poll): who leads, and its Value
//	(not in spindle)                           e.Proclaim(ctx, value), e.Resign(ctx), e.Campaign(ctx)
//	(not in spindle)                           c.Lock / c.TryLock / c.Do: exclusive, shared, semaphore locks;
//	                                           owner groups (c.RenewOwner, c.ReleaseOwner), c.Status, c.Purge
//
// spindle's table is not reused: create baton's (see Table) beside it; the
// two never see each other's leases, so switch all electors of a name at
// once.
//
// # What the tests prove, and what they cannot
//
// The tests run against Google's Cloud Spanner emulator (1.5, started by
// scripts/servers), and against a real database when BATON_TEST_SPANNER
// names one (projects/P/instances/I/databases/D, with credentials). They
// prove the conformance suite (mutual exclusion and strictly increasing
// tokens under contention, expiry, takeover, FIFO, shared and semaphore
// locks, elections), racing acquirers with one winner, three electors with
// one leader at a time, and faultcheck's kills, pauses, partitions and
// clock jumps of the clients. They cannot prove:
//
//   - Spanner's concurrency: the emulator runs one read-write transaction
//     at a time, so lock waits across servers and their latencies never
//     happen.
//   - TrueTime: the emulator's commit timestamps come from one process's
//     clock; commit wait, clock uncertainty and commit timestamps of
//     concurrent writers on different servers are not exercised.
//   - Spanner's limits (mutations per commit, key size: names are at most
//     255 bytes), IAM, and any latency: the emulator's figures say nothing
//     of real Spanner's.
//
// The in-process fake of the client module (spannertest) is no longer
// supported: it detects no conflicts between transactions, which this
// store relies on.
package spanner
