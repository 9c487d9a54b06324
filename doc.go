// Package baton gives Go programs distributed locks and leases with one API
// over many stores: exclusive and shared locks, semaphores of N, leader
// elections, and run-a-function-under-a-lock, each grant carrying a fencing
// token.
//
//	client, err := baton.Open(ctx, "sqlite:///var/lib/app/locks.db", nil)
//	lease, err := client.Lock(ctx, "nightly-report", nil)
//	defer lease.Release(ctx)
//	// ... work, passing lease.Token() to every system the work writes to,
//	// and stopping when <-lease.Done() fires.
//
// # Guarantees
//
// A lease is valid until its Deadline, judged on the holder's own monotonic
// clock from the moment the request that granted or renewed it was sent.
// Because the store starts counting the TTL no earlier than that moment, by
// its own clock, and only grants the lock to another owner once the TTL has
// run out, a holder that stops when Done fires (or checks Err before acting)
// never overlaps a later holder, as long as the two clocks run at the same
// rate within 1% (the deadline keeps that margin). A process paused longer
// than its TTL (a long GC pause, SIGSTOP, a VM migration) can still act on a
// lease that ended while it was paused: that is what fencing tokens are for.
// Every grant of a name carries a token larger than every earlier grant of
// that name; a resource that remembers the largest token it has seen and
// refuses smaller ones is safe even then. Package fence does that at the
// resource: in a SQL transaction, in Redis, over HTTP or in process.
//
// Two options bound when others may have the lock, by the store's clock:
// LockOptions.MinHold keeps a name held for a minimum time even if it is
// released sooner (a cron job run on many machines runs once per period),
// and LockOptions.LockDelay keeps it from everyone for a while after its
// lease was lost rather than released (for resources that cannot check
// tokens).
//
// Leases are kept alive by one timer per Client: when it fires, one
// goroutine renews together every lease that is due, in one call to the
// store per thousand leases, and exits (nothing runs between renewals), so
// keepalive cost grows with the number of round trips, not of leases, where
// the store takes one request for many; renew times are aligned so that
// leases taken at different times are renewed in the same rounds. Leases
// whose deadlines fall together (those one call renewed) share the timer
// that ends them. Stores whose holds live in a store session (ZooKeeper,
// etcd) keep that session alive themselves.
//
// Blocking acquisitions queue in the store in FIFO order: a request is
// granted only when no request ahead of it in the queue could be, and a
// queued exclusive request keeps later shared ones out, so writers are not
// starved. Waiters are woken by the store where it can notify (see
// driver.Waiter); elsewhere they poll with jittered exponential backoff,
// never more often than needed and never less often than Options.MaxPoll.
//
// Client.WatchHolders follows who holds a name without taking it (and
// Election.Observe, the leader): woken by the store where it can tell of
// every grant and release (driver.HolderWatcher), polled elsewhere, and
// read again when the earliest hold's TTL runs out.
//
// Client.Ask asks the holders of a name to let it go, with a reason:
// leases that follow asks (Lease.Asked; Do with LockOptions.Revocable;
// Election.Run, whose Election.HandOver names the next leader) are told
// and decide; nothing is forced. An ask is a short shared hold on a
// companion name no user can take, naming the largest token it concerns,
// which the holder follows with WatchHolders: it works on every store, and
// costs nothing to holders that do not follow asks.
//
// # Design
//
// The portable type is Client; stores implement the small interface in
// package driver (Acquire, Renew, Release, List, Purge), each call one
// atomic decision taken with the store's clock. Stores that can update one
// record atomically (a transaction, a compare-and-swap, a mutex) evaluate
// the grant rules with package lockstate; stores that decide on the server
// (SQL functions, Lua scripts) implement the same rules there; stores with
// their own queue recipe (ZooKeeper's sequential nodes, etcd's revisions)
// implement the rules natively. Package drivertest is the conformance suite
// every store passes. Stores are chosen by URL through Register and Open, as
// database/sql does: mem:// is built in; sqlite:// is in
// github.com/baton-go/baton/sqlite, each other store in a module of its own,
// so that importing one store does not download the others.
package baton
