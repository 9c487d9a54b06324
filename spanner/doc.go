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
// It holds one small row per lock name ever used, never deleted, so that
// tokens keep growing, and the row "", the store's clock. The store runs no SQL: names travel only as keys and mutation
// values. Creating the table needs the spanner.databases.updateDdl
// permission. See docs/stores/spanner.md#the-table.
//
// # Guarantees and limits
//
// Acquire, Renew and Release are each one read-write transaction (a read,
// a decision by the grant rules of package lockstate, a commit); Spanner's
// locks serialize them. See docs/stores/spanner.md#how-a-call-is-decided.
//
// The store's time is Spanner's commit timestamps (TrueTime), never a
// client's wall clock: a hold committed at t expires at t + TTL. The store
// judges expiry with a lower bound of that time, extrapolated on the local
// monotonic clock, which is safe while that clock runs no more than 1%
// fast, the rate baton's lease deadlines assume. Why:
// docs/stores/spanner.md#clock.
//
// A grant's fencing token is its commit timestamp in microseconds
// (time.UnixMicro(int64(token)) gives it back), or one more than the
// name's previous token if that is not smaller: tokens of a name only
// grow. See docs/stores/spanner.md#fencing-tokens.
//
// Spanner cannot notify, so a waiting Lock polls the name's row, backing
// off to Options.Poll; only waiters the grant rules would let in try
// again. See docs/stores/spanner.md#waiting.
//
// Tests run on Google's Cloud Spanner emulator, and on a real database
// when BATON_TEST_SPANNER names one; the emulator cannot exercise
// Spanner's concurrency, TrueTime or limits. The in-process fake
// spannertest is not supported. See
// docs/stores/spanner.md#what-the-tests-prove-and-what-they-cannot.
//
// baton's Election keeps spindle's essentials on this store (a named lease
// in a Spanner table, takeover by Spanner's time, commit-timestamp
// tokens); docs/stores/spanner.md#migrating-from-spindle maps spindle's
// calls to baton's. spindle's table is not reused: switch all electors of
// a name at once.
package spanner
