// Package driver is the contract between baton's portable lock API and the
// stores behind it. Users of baton do not need it; authors of a new store do.
//
// A store implements [Store]: one atomic decision per call, made with the
// store's own clock. Everything else (waiting, keepalive, deadlines judged on
// the holder's monotonic clock, elections, run-under-lock, groups, input
// validation) is written once in package baton on top of it.
//
// # What a store must provide
//
//   - Acquire: in one atomic step, drop expired holders and queue entries of
//     the name, then grant the request if the grant rules allow it (see
//     package lockstate, which implements them for stores that evaluate
//     them in Go), handing out a fencing token that is larger than every
//     token handed out for that name before, for the life of the store.
//     If the request is not granted and Request.Queue is set, the request
//     joins (or refreshes its place in) the name's FIFO queue.
//   - Renew, Release: act only on the hold of the given owner, and only while
//     it is still held: a renewal or release that comes after the hold
//     expired, or after another owner was granted the lock, changes nothing.
//   - List, Purge: read and clean up.
//
// Expiry is judged by the store's clock (SQL now(), Redis TIME, commit
// timestamps, the machine's monotonic clock for SQLite), never by comparing
// clocks of different client machines. Stores whose holds live as long as a
// store session (ZooKeeper's ephemeral nodes, etcd's leases) report that in
// Grant.Session and keep that session alive themselves. So may a store
// whose holds have a TTL: it binds the holds that the client would renew
// one by one (Request.KeepAlive) to a session of its own, renewed once for
// all of them (package sessions keeps such sessions; package records uses
// it for stores that implement records.Sessions).
//
// A store that can wake waiters (LISTEN/NOTIFY, pub/sub, watches) also
// implements [Waiter]; baton otherwise polls with jittered exponential
// backoff.
//
// # The eleven stores
//
// How each store meets the contract:
//
//	store          atomic decision                      clock                   token                      wakes waiters
//	mem            records: a map under a mutex         process monotonic       per-name counter           channel per name
//	SQLite         records: BEGIN IMMEDIATE txn         machine monotonic+boot  boot epoch + counter       in-process + inotify on the WAL
//	PostgreSQL     one server-side function call        clock_timestamp()       server epoch + counter     grant sent by NOTIFY
//	MySQL/MariaDB  one stored-procedure call            NOW(6)                  per-name counter (row)     GET_LOCK queue
//	Redis          one Lua script (hash + sorted set)   Redis TIME              max(last+1, TIME in µs)    grant pushed to a per-waiter list, BLPOP
//	etcd           txn on lease-bound keys              etcd leases             key's create revision      watch on the predecessor
//	ZooKeeper      ephemeral sequential nodes           session timeout         node's creation zxid       watch on the predecessor
//	MongoDB        records: version CAS; common cases   server's $$NOW          per-name counter in doc    change stream
//	               in one pipeline findAndModify
//	Elasticsearch  records: if_seq_no/primary_term CAS  server's ctx._now       per-name counter in doc    polling the doc
//	Spanner        records: read-write txn, row/name    commit timestamps       commit timestamp (µs)      polling
//	NATS           records: key-value revision CAS      server's message stamps per-name counter in value  key watcher, head of queue only
//
// "records" marks the stores built on package records, which applies the
// grant rules of package lockstate once over a store that can read and
// atomically rewrite one record per name.
//
// A store also finds here the small pieces every store needs: [Margin],
// [Jitter], [Sleep], [Retry], and [ErrClosed], which its own closed-store
// error wraps. docs/adding-a-store.md lists what to write for a new store
// and every place outside it to touch.
package driver

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Mode is the kind of a hold.
type Mode uint8

const (
	// Exclusive holds exclude every other hold on the name.
	Exclusive Mode = 1
	// Shared holds coexist with other shared holds, up to the request's
	// Limit when it is above zero, and never with an exclusive hold.
	Shared Mode = 2
)

func (m Mode) String() string {
	switch m {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Request asks for a hold of Name by Owner. baton validates every field
// before a store sees it.
type Request struct {
	Name  string
	Owner string // unguessable unless the user chose it; identifies the hold
	Mode  Mode
	// Limit, for Shared, is the most holders the requester accepts at once
	// (a semaphore of Limit); 0 means no limit.
	Limit int
	TTL   time.Duration
	// Queue makes a request that is not granted join the name's FIFO queue,
	// or refresh its place in it, for QueueTTL.
	Queue    bool
	QueueTTL time.Duration
	Host     string
	Meta     map[string]string
	// KeepAlive says that the client renews the hold by TTL for as long
	// as it holds it, and counts its lease by TTL alone (no lock-delay,
	// no minimum hold). baton sets it only while the client holds other
	// leases.
	// A store that keeps sessions of its own may then bind the hold to one
	// and keep it alive with the session, one renewal for all the holds
	// bound to it, instead of the client renewing each (Grant.Session).
	KeepAlive bool
}

// Key names one hold (or queue entry).
type Key struct {
	Name  string
	Owner string
}

// Hold is a key with the TTL to renew it for.
type Hold struct {
	Name  string
	Owner string
	TTL   time.Duration
}

// Grant describes a hold as granted or renewed.
type Grant struct {
	Token   uint64    // fencing token; unchanged by renewals and re-acquires
	Created time.Time // when the owner was first granted this hold (store clock)
	Renewed time.Time // store clock
	// Expires is when the hold ends by the store's clock. It is zero when
	// the hold lives as long as Session; when Session is set as well, the
	// hold lives until the later of the two, and Store.Renew extends it.
	Expires time.Time
	// Extended is set when the owner already held the name and the request
	// only extended it.
	Extended bool
	// Session, when not nil, is the store session the hold lives in: the hold
	// may be lost as soon as Session.Done is closed, and baton does not renew
	// it (the store keeps its session alive). A store that keeps sessions
	// binds only holds whose Request.KeepAlive is set.
	Session Session
}

// Session is a store session that holds live in (see Grant.Session).
type Session interface {
	Done() <-chan struct{}
	Err() error
}

// SessionDeadline is implemented by sessions that know until when they are
// certainly alive, judged on the local monotonic clock (the last confirmed
// keepalive's send time plus the session timeout, less a margin). baton
// reports it as the lease's Deadline and judges Lease.Err by it, so that a
// holder checking Err is exact even when Done has not fired yet.
type SessionDeadline interface {
	Deadline() time.Time
}

// Holder describes a hold or queue entry, for listings.
type Holder struct {
	Name    string
	Owner   string
	Mode    Mode
	Limit   int
	Token   uint64 // zero for queue entries
	Queued  bool   // a waiter, not a holder
	Host    string
	Meta    map[string]string
	TTL     time.Duration
	Created time.Time
	Renewed time.Time
	Expires time.Time // zero when the hold lives as long as a store session
	// Left is the time the hold had left by the store's clock when listed;
	// zero or below means expired.
	Left time.Duration
}

// Filter selects holders. Stores must honour Name, Prefix and Owner; baton
// applies the remaining fields itself, so stores may ignore them.
type Filter struct {
	Name          string
	Prefix        string
	Owner         string
	CreatedBefore time.Time
	CreatedAfter  time.Time
	LeftBelow     time.Duration // only holds with less than this left (0: any)
	LeftAtLeast   time.Duration // only holds with at least this left (0: any)
	Queued        bool          // include queue entries
	Expired       bool          // include expired holds not yet purged
}

// Store is implemented by every backend.
type Store interface {
	// Acquire grants req or returns an error satisfying
	// errors.Is(err, ErrNotGranted). An owner that already holds the name in
	// the same mode has its hold extended (Grant.Extended); in another mode,
	// ErrModeConflict.
	Acquire(ctx context.Context, req *Request) (*Grant, error)
	// Renew extends each hold that its owner still holds; the result has one
	// entry per hold, nil where the hold is no longer held.
	Renew(ctx context.Context, holds []Hold) ([]*Grant, error)
	// Release removes each hold or queue entry; the result tells, per key,
	// whether a hold (not merely a queue entry) was released.
	Release(ctx context.Context, keys []Key) ([]bool, error)
	// List returns holders matching f.
	List(ctx context.Context, f *Filter) ([]Holder, error)
	// Purge deletes expired holds and queue entries and returns them.
	// Fencing counters are never purged.
	Purge(ctx context.Context) ([]Holder, error)
	Close() error
}

// QuietReleaser is implemented by stores whose Release costs less when
// nobody asks which keys were held. Client.Close, which does not ask,
// releases through it.
type QuietReleaser interface {
	// ReleaseQuiet does what Release does, without the report.
	ReleaseQuiet(ctx context.Context, keys []Key) error
}

// SessionReleaser is implemented by stores that keep sessions of their own
// (Grant.Session) and release every hold bound to one for less than a
// Release of their keys. Client.Close, which releases every lease and then
// closes the store, uses it for the leases in a session.
type SessionReleaser interface {
	// ReleaseSession does what ReleaseQuiet does for the keys of every
	// hold bound to x, a session of this store. It may leave waiters of
	// other clients to be woken when the store closes.
	ReleaseSession(ctx context.Context, x Session) error
}

// Waiter is implemented by stores that can wake a waiting acquirer.
type Waiter interface {
	// Watch starts observing req.Name on behalf of req. It is called at most
	// once per blocking acquire, after its first refused attempt; the next
	// attempt follows at once, unless the Watch is a Replayer that covers
	// the refused attempt.
	Watch(ctx context.Context, req *Request) (Watch, error)
}

// Watch wakes one waiting acquirer.
type Watch interface {
	// Wait returns when an attempt of the request may now succeed, or when
	// ctx ends. It must not miss a change that happened after the previous
	// Wait returned (or after Watch returned, for the first call): a wake-up
	// that arrives between an attempt and the following Wait makes Wait
	// return at once. Spurious returns are allowed.
	Wait(ctx context.Context) error
	Close() error
}

// HolderWatcher is implemented by stores that can wake a follower of a
// name whenever its holders may have changed, in any process: a grant, a
// release, a hold dropped as expired or taken over. baton otherwise reads
// the holders at intervals (Client.WatchHolders).
type HolderWatcher interface {
	// WatchHolders starts following name. Its Watch's Wait returns when
	// the holders of name may have changed since the previous Wait
	// returned (or since WatchHolders returned); spurious returns are
	// allowed, and a hold that merely expires need not be reported. A
	// store that cannot follow name returns an error wrapping
	// errors.ErrUnsupported.
	WatchHolders(ctx context.Context, name string) (Watch, error)
}

// Replayer is implemented by a Watch that also sees changes made before it
// began, back to a moment of this process's clock: a listener that was
// already connected then, a mailbox that keeps what was posted to it, a
// doorbell whose state outlives the ring. If Replay(since) reports true,
// Wait returns at once for any change made after since (the send time of
// the refused attempt), and baton skips the attempt it otherwise makes
// right after Watch: one store call fewer per contended acquire.
type Replayer interface {
	Replay(since time.Time) bool
}

// ErrNotGranted reports that a request was not granted because of other
// holders or of waiters ahead of it.
var ErrNotGranted = errors.New("not granted")

// ErrModeConflict reports that the owner already holds the name in another
// mode or with another limit.
var ErrModeConflict = errors.New("owner already holds this name in another mode")

// ErrLimitConflict reports that a shared request's limit is not the limit
// the name's shared holders took it with (a semaphore of 3 joined by a
// request for one of 2, or by a plain shared lock): granting it would
// exceed someone's limit, so it is refused rather than queued.
var ErrLimitConflict = errors.New("the holders of this name took it with another limit")

// Busy is the error a store returns when a request is not granted. After,
// when above zero, is how long until the earliest blocking hold expires by
// the store's clock: a polling waiter need not retry sooner.
type Busy struct{ After time.Duration }

func (b *Busy) Error() string { return ErrNotGranted.Error() }

// Is makes errors.Is(b, ErrNotGranted) true.
func (b *Busy) Is(target error) bool { return target == ErrNotGranted }

// Retry calls f until it succeeds, fails with an error that retryable
// rejects, has failed attempts times, or ctx ends, sleeping base, 2×base,
// 4×base… in between; it returns f's last error. Stores use it for calls
// that are safe to repeat and failed for a passing reason: a pooled
// connection that a server restart broke, a deadlock.
func Retry(ctx context.Context, attempts int, base time.Duration, retryable func(error) bool, f func() error) error {
	var err error
	for attempt := 1; ; attempt++ {
		if err = f(); err == nil || attempt >= attempts || !retryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(base << (attempt - 1))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// AcquireWaiting acquires req through s, waiting on w between refused
// attempts (at most maxPoll, or until the blocking hold expires), until it
// is granted, s fails, or ctx ends. It is for a store's own blocking entry
// points (the SQL stores' transactional modes); baton's Client has its own
// loop, with retries and fairness bookkeeping.
func AcquireWaiting(ctx context.Context, s Store, w Watch, req *Request, maxPoll time.Duration) (*Grant, error) {
	for {
		g, err := s.Acquire(ctx, req)
		if err == nil {
			return g, nil
		}
		var busy *Busy
		if !errors.As(err, &busy) {
			return nil, err
		}
		d := maxPoll
		if busy.After > 0 && busy.After < d {
			d = busy.After
		}
		wctx, cancel := context.WithTimeout(ctx, d)
		_ = w.Wait(wctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}
