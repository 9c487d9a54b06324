package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// renewCounter counts the holds a client renews one by one.
type renewCounter struct {
	*postgres.Store
	holds atomic.Int64
}

func (r *renewCounter) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	for _, h := range hs {
		if strings.HasPrefix(h.Name, "s/") {
			r.holds.Add(1)
		}
	}
	return r.Store.Renew(ctx, hs)
}

// waitSession waits until st binds holds of ttl to a session.
func waitSession(t *testing.T, ctx context.Context, st driver.Store, ttl time.Duration) {
	t.Helper()
	req := &driver.Request{Name: "probe/" + baton.NewOwner(), Owner: baton.NewOwner(), Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
	for i := 0; ; i++ {
		g, err := st.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		// A hold extended keeps its binding: take it anew each time.
		if _, err := st.Release(ctx, []driver.Key{{Name: req.Name, Owner: req.Owner}}); err != nil {
			t.Fatal(err)
		}
		if g.Session != nil {
			return
		}
		if i == 100 {
			t.Fatal("no session after 100 grants")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustTryLock(t *testing.T, ctx context.Context, c *baton.Client, name string, o *baton.LockOptions) *baton.Lease {
	t.Helper()
	l, err := c.TryLock(ctx, name, o)
	if err != nil {
		t.Fatalf("TryLock %s: %v", name, err)
	}
	return l
}

// TestSessionKeepsHolds checks that the holds a client keeps alive live in
// the Store's session: over three TTLs the client renews none of them,
// and they stay held, for their holder and in the store, whether the name
// keeps its hold in its row (exclusive) or among its entries (shared, or
// once another client asked for it); Status shows them with their
// session's expiry, Purge and the reclaim of idle names leave them;
// released, they are free at once.
func TestSessionKeepsHolds(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		ttl := 500 * time.Millisecond
		st := open(t, tb)
		rc := &renewCounter{Store: st}
		a := client(t, rc, &baton.Options{TTL: ttl})
		other := open(t, tb)
		b := client(t, other, nil)
		waitSession(t, ctx, st, ttl)
		mustTryLock(t, ctx, a, "first", nil) // the client offers the next ones to the session
		// Names another client asks for all along, and names nobody asks
		// for until the end.
		var asked, quiet []*baton.Lease
		for i := range 10 {
			o := &baton.LockOptions{Shared: i%4 == 3}
			asked = append(asked, mustTryLock(t, ctx, a, fmt.Sprintf("s/asked/%d", i), o))
			quiet = append(quiet, mustTryLock(t, ctx, a, fmt.Sprintf("s/quiet/%d", i), o))
		}
		all := append(append([]*baton.Lease(nil), asked...), quiet...)
		for range 3 {
			time.Sleep(ttl)
			for i, l := range asked {
				if _, err := b.TryLock(ctx, l.Name(), nil); !errors.Is(err, baton.ErrLocked) {
					t.Errorf("another client's TryLock of %s: %v, want ErrLocked", l.Name(), err)
				}
				if i%5 == 0 {
					// A request that queues moves the name's hold among its
					// entries, and leaves one there.
					wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
					if _, err := b.Lock(wctx, l.Name(), nil); err == nil {
						t.Errorf("another client's Lock of %s granted", l.Name())
					}
					cancel()
				}
			}
		}
		status := func(when string) {
			t.Helper()
			hs, err := b.Status(ctx, &baton.Filter{Prefix: "s/"})
			if err != nil || len(hs) != 20 {
				t.Fatalf("Status %s: %d holders, %v; want 20", when, len(hs), err)
			}
			for _, h := range hs {
				if h.Left <= ttl/2 {
					t.Errorf("Status %s: %s listed with %v left; want the session's expiry", when, h.Name, h.Left)
				}
			}
		}
		status("")
		if _, err := b.Purge(ctx); err != nil {
			t.Fatal(err)
		}
		status("after Purge")
		if _, err := postgres.Reclaim(ctx, other, 0); err != nil {
			t.Fatal(err)
		}
		status("after Reclaim")
		if n := rc.holds.Load(); n != 0 {
			t.Errorf("the client renewed %d holds one by one; want none (the session keeps them)", n)
		}
		for _, l := range all {
			if err := l.Err(); err != nil {
				t.Errorf("lease %s: %v", l.Name(), err)
			}
			if d := time.Until(l.Deadline()); d < ttl/2 {
				t.Errorf("lease %s: %v left of its TTL %v", l.Name(), d, ttl)
			}
		}
		for _, l := range quiet {
			// Strict: the store must find the hold its session kept.
			if err := l.ReleaseStrict(ctx); err != nil {
				t.Errorf("Release %s: %v", l.Name(), err)
			}
			lb := mustTryLock(t, ctx, b, l.Name(), nil)
			lb.Release(ctx)
		}
		for _, l := range asked {
			if _, err := b.TryLock(ctx, l.Name(), nil); !errors.Is(err, baton.ErrLocked) {
				t.Errorf("after Purge and Reclaim, another client's TryLock of %s: %v, want ErrLocked", l.Name(), err)
			}
			if err := l.ReleaseStrict(ctx); err != nil {
				t.Errorf("Release %s: %v", l.Name(), err)
			}
			lb := mustTryLock(t, ctx, b, l.Name(), nil)
			lb.Release(ctx)
		}
	})
}

// TestSessionLost checks that a session the Store cannot renew ends its
// leases, that the store lets their names go only after their deadline,
// and that the session is never renewed again: the leases stay lost, and
// new ones live in a new session.
func TestSessionLost(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		ttl := 500 * time.Millisecond
		st := open(t, tb)
		a := client(t, st, &baton.Options{TTL: ttl})
		b := client(t, open(t, tb), nil)
		waitSession(t, ctx, st, ttl)
		mustTryLock(t, ctx, a, "lost/first", nil)
		la := mustTryLock(t, ctx, a, "lost/a", nil)
		lb := mustTryLock(t, ctx, a, "lost/b", &baton.LockOptions{Shared: true})
		postgres.Faulty{Store: st}.SetPartitioned(true)
		for _, l := range []*baton.Lease{la, lb} {
			select {
			case <-l.Done():
			case <-time.After(3 * ttl):
				t.Fatalf("%s: Done not closed though its session went unrenewed for its TTL", l.Name())
			}
			if !errors.Is(l.Err(), baton.ErrLeaseLost) {
				t.Errorf("%s: Err = %v, want ErrLeaseLost", l.Name(), l.Err())
			}
		}
		for _, l := range []*baton.Lease{la, lb} {
			deadline := l.Deadline()
			lock, err := b.Lock(ctx, l.Name(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().Before(deadline) {
				t.Errorf("%s taken over before the lost lease's deadline", l.Name())
			}
			lock.Release(ctx)
		}
		postgres.Faulty{Store: st}.SetPartitioned(false)
		time.Sleep(ttl)
		if la.Err() == nil || lb.Err() == nil {
			t.Error("a lost lease came back")
		}
		l2 := mustTryLock(t, ctx, a, "lost/c", nil)
		time.Sleep(2 * ttl)
		if err := l2.Err(); err != nil {
			t.Errorf("a lease in the new session: %v", err)
		}
		if _, err := b.TryLock(ctx, "lost/c", nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("another client's TryLock of a lease kept by the new session: %v", err)
		}
	})
}

// TestSessionNotRevived checks that a session that expired is never
// renewed again (its holds may have gone to others), and that a session is
// made only for TTLs the grace period after a crash covers.
func TestSessionNotRevived(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		st := open(t, freshTable(t))
		if ok, err := st.KeepSession(ctx, "s1", 100*time.Millisecond, true); !ok || err != nil {
			t.Fatalf("create: %v, %v", ok, err)
		}
		if ok, err := st.KeepSession(ctx, "s1", 100*time.Millisecond, false); !ok || err != nil {
			t.Fatalf("renew a live session: %v, %v", ok, err)
		}
		time.Sleep(200 * time.Millisecond)
		if ok, err := st.KeepSession(ctx, "s1", time.Minute, false); ok || err != nil {
			t.Errorf("renew an expired session: %v, %v; want false", ok, err)
		}
		if ok, err := st.KeepSession(ctx, "s2", time.Minute, false); ok || err != nil {
			t.Errorf("renew a session never made: %v, %v; want false", ok, err)
		}
		if ok, err := st.KeepSession(ctx, "s3", postgres.DefaultMaxGrace+time.Second, true); ok || err != nil {
			t.Errorf("create a session longer than the grace period: %v, %v; want false", ok, err)
		}
	})
}

// TestSessionEndsOnClose checks that Close deletes the Store's session:
// holds it could not release live only their own TTL.
func TestSessionEndsOnClose(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		a := open(t, tb)
		waitSession(t, ctx, a, time.Minute)
		g, err := a.Acquire(ctx, &driver.Request{Name: "close", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if g.Session == nil {
			t.Fatal("a KeepAlive hold is in no session")
		}
		count := func() (n int) {
			if err := pool(t).QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{tb + "_sessions"}.Sanitize()).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := count(); n != 1 {
			t.Fatalf("%d sessions while a hold is bound to one, want 1", n)
		}
		a.Close()
		select {
		case <-g.Session.Done():
		default:
			t.Error("Close did not end the session")
		}
		if d := g.Session.(driver.SessionDeadline).Deadline(); d.After(time.Now()) {
			t.Errorf("the session's deadline after Close is %v ahead, though its row is gone", time.Until(d))
		}
		if n := count(); n != 0 {
			t.Errorf("%d sessions after Close, want 0", n)
		}
	})
}

// TestSessionExtendedKeepsBinding checks that a hold extended (its owner
// asked again) keeps the session it was bound to, the one its lease
// knows: a grant says it is in the Store's session only if it is.
func TestSessionExtendedKeepsBinding(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		st := open(t, freshTable(t))
		ttl := time.Minute
		waitSession(t, ctx, st, ttl)
		plain := &driver.Request{Name: "ext/plain", Owner: "o", Mode: driver.Exclusive, TTL: ttl}
		if g, err := st.Acquire(ctx, plain); err != nil || g.Session != nil {
			t.Fatalf("Acquire without KeepAlive: %+v, %v; want a grant in no session", g, err)
		}
		again := *plain
		again.KeepAlive = true
		g, err := st.Acquire(ctx, &again)
		if err != nil || !g.Extended {
			t.Fatalf("Acquire again: %+v, %v; want it extended", g, err)
		}
		if g.Session != nil {
			t.Error("a hold taken in no session is in one once extended: its lease would not renew it")
		}
		bound := &driver.Request{Name: "ext/bound", Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
		for _, r := range []*driver.Request{bound, bound} {
			if g, err := st.Acquire(ctx, r); err != nil || g.Session == nil {
				t.Fatalf("Acquire with KeepAlive: %+v, %v; want a grant in the session", g, err)
			}
		}
	})
}

// TestSessionCrash crashes the server (an immediate stop) while a client
// holds leases that only its session keeps (past their own TTL): the
// crash forgets the session, the holder is told when renewing it, and no
// other client is granted a name before the holder's lease ended and the
// grace period passed; its token is larger.
func TestSessionCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 120*time.Second)
		tb := freshTable(t)
		ttl := 2 * time.Second
		st := open(t, tb)
		a := client(t, st, &baton.Options{TTL: ttl})
		waitSession(t, ctx, st, ttl)
		mustTryLock(t, ctx, a, "crash/first", nil)
		la := mustTryLock(t, ctx, a, "crash/held", nil)
		ls := mustTryLock(t, ctx, a, "crash/shared", &baton.LockOptions{Shared: true})
		time.Sleep(ttl + ttl/2) // past their own TTL: their session keeps them
		if la.Err() != nil || ls.Err() != nil {
			t.Fatalf("leases in a session lost before the crash: %v, %v", la.Err(), ls.Err())
		}
		drivertest.ServerCommand(t, serversEnv, "crash")
		crashed := time.Now()
		drivertest.ServerCommand(t, serversEnv, "up")
		b := client(t, open(t, tb), nil)
		for _, l := range []*baton.Lease{la, ls} {
			lb, err := b.Lock(ctx, l.Name(), nil)
			if err != nil {
				t.Fatal(err)
			}
			granted := time.Now()
			select {
			case <-l.Done():
			default:
				t.Errorf("%s granted to another while its holder still held it", l.Name())
			}
			if d := granted.Sub(crashed); d < ttl {
				t.Errorf("%s granted %v after the crash, within the grace period (%v)", l.Name(), d, ttl)
			}
			if lb.Token() <= l.Token() {
				t.Errorf("%s: token %#x after the crash, not above %#x", l.Name(), lb.Token(), l.Token())
			}
			lb.Release(ctx)
		}
	})
}

// TestEarlierScriptFails checks that the script of an earlier version of
// this package, which knows nothing of sessions, cannot put its functions
// back over this version's: its acquire, the first function it cannot
// replace, fails the whole script.
func TestEarlierScriptFails(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		open(t, tb).Close()
		acquire := pgx.Identifier{tb + "_acquire"}.Sanitize()
		_, err := pool(t).Exec(ctx, `CREATE OR REPLACE FUNCTION `+acquire+`(
			p_name text, p_owner text, p_mode smallint, p_limit integer, p_ttl bigint,
			p_queue boolean, p_qttl bigint, p_host text, p_meta jsonb, p_durable bigint,
			OUT o_status smallint, OUT o_token bigint, OUT o_created timestamptz,
			OUT o_renewed timestamptz, OUT o_expires timestamptz, OUT o_after bigint)
			LANGUAGE plpgsql AS $$ BEGIN o_status := 0; END $$`)
		if err == nil {
			t.Fatal("the earlier version's acquire replaced this version's")
		}
		// The earlier versions' call of acquire, as they make it, works on.
		var status int16
		var token int64
		err = pool(t).QueryRow(ctx, "SELECT o_status, o_token FROM "+acquire+"($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
			"old", "o", int16(1), int32(0), int64(time.Second), false, int64(0), "h", nil, int64(time.Minute)).Scan(&status, &token)
		if err != nil || status != 0 || token == 0 {
			t.Errorf("an earlier version's acquire: status %d, token %d, %v; want a grant", status, token, err)
		}
	})
}
