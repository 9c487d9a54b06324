package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// handOffReq is an exclusive request of owner for n, to queue.
func handOffReq(n, owner string) *driver.Request {
	return &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: 10 * time.Second, Queue: true, QueueTTL: 10 * time.Second}
}

// holdAndQueue has owner "a" take n on store a and owner "b" queue
// behind it on store b, and returns a's grant.
func holdAndQueue(t *testing.T, ctx context.Context, a, b driver.Store, n string) *driver.Grant {
	t.Helper()
	ga, err := a.Acquire(ctx, handOffReq(n, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, handOffReq(n, "b")); !errors.Is(err, driver.ErrNotGranted) {
		t.Fatalf("b's Acquire while a holds: %v, want ErrNotGranted", err)
	}
	return ga
}

// releaseA releases a's hold of n on s.
func releaseA(t *testing.T, ctx context.Context, s driver.Store, n string) {
	t.Helper()
	if held, err := s.Release(ctx, []driver.Key{{Name: n, Owner: "a"}}); err != nil || !held[0] {
		t.Fatalf("a's Release: %v, %v", held, err)
	}
}

// stillQueued checks that b still waits for n, not handed it.
func stillQueued(t *testing.T, ctx context.Context, s driver.Store, n string) {
	t.Helper()
	hs, err := s.List(ctx, &driver.Filter{Name: n, Queued: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Owner != "b" || !hs[0].Queued {
		t.Fatalf("after a's release: %+v, want b still queued", hs)
	}
}

// notHanded checks that b does not hold n.
func notHanded(t *testing.T, ctx context.Context, s driver.Store, n string) {
	t.Helper()
	hs, err := s.List(ctx, &driver.Filter{Name: n, Queued: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if !h.Queued {
			t.Fatalf("after a's release: %+v, want no hold", hs)
		}
	}
}

// handOff checks a hand-off on table tb between two Stores: b's request,
// queued behind a's hold, holds the name once a releases it, with a new
// token, before b asks again; and b's next ask (as a woken waiter's)
// returns that hold, lasting the TTL from then on (late: asked after the
// hand-off's extra time).
func handOff(t *testing.T, tb string, durable, late bool) {
	t.Helper()
	ctx := ctxFor(t, 30*time.Second)
	a := openWith(t, &mysql.Options{Table: tb, Durable: durable})
	b := openWith(t, &mysql.Options{Table: tb, Durable: durable})
	n := "handoff/" + t.Name()
	ga := holdAndQueue(t, ctx, a, b, n)
	releaseA(t, ctx, a, n)
	hs, err := a.List(ctx, &driver.Filter{Name: n, Queued: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 || hs[0].Owner != "b" || hs[0].Queued || hs[0].Token <= ga.Token {
		t.Fatalf("after a's release: %+v, want b holding with a token above %d", hs, ga.Token)
	}
	if late {
		// Past the hand-off's extra time: the hold no longer lasts the
		// TTL from now, and must be extended, not read.
		time.Sleep(100 * time.Millisecond)
	}
	sent := time.Now()
	gb, err := b.Acquire(ctx, handOffReq(n, "b"))
	if err != nil || gb.Token != hs[0].Token {
		t.Fatalf("b's Acquire after the hand-off: %+v, %v; want the hold with token %d", gb, err, hs[0].Token)
	}
	if gb.Expires.Before(sent.Add(10 * time.Second)) {
		t.Errorf("the hold handed over expires at %v, less than its TTL after b asked (%v)", gb.Expires, sent)
	}
	if held, err := b.Release(ctx, []driver.Key{{Name: n, Owner: "b"}}); err != nil || !held[0] {
		t.Fatalf("b's Release: %v, %v", held, err)
	}
}

// TestHandOff: a release hands the name to the exclusive request at the
// head of its queue (see docs/stores/mysql.md, "Hand-off").
func TestHandOff(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, durable := range []bool{false, true} {
			for _, late := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/late=%v", map[bool]string{false: "fast", true: "durable"}[durable], late), func(t *testing.T) {
					handOff(t, freshTable(t), durable, late)
				})
			}
		}
	})
}

// TestUpgradeAddsHoldTTL: a holds table made before hand-off (no hold_ttl
// column) gains it when a store of this version opens it, and hands off.
func TestUpgradeAddsHoldTTL(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		open(t, tb).Close()
		db := rawDB(t)
		for _, q := range []string{
			"ALTER TABLE " + tb + "_holds DROP COLUMN hold_ttl",
			"DROP PROCEDURE " + tb + "_take", // as a version before would lack
		} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		handOff(t, tb, false, false)
	})
}

// TestHandedHoldOfAnotherServer: a waiter does not take a hold handed
// over on an earlier incarnation (here, the marker of another server, as
// a promoted replica has): its ask goes the way of T_grant, which starts
// a new incarnation.
func TestHandedHoldOfAnotherServer(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		db := rawDB(t)
		n := "handoff/marker"
		holdAndQueue(t, ctx, s, s, n)
		releaseA(t, ctx, s, n)
		if _, err := db.ExecContext(ctx, "UPDATE "+tb+"_state SET server = UNHEX(SHA1('another server')) WHERE name = ''"); err != nil {
			t.Fatal(err)
		}
		if g, err := s.Acquire(ctx, handOffReq(n, "b")); err == nil {
			t.Fatalf("b's Acquire on the marker of another server: granted %+v, want not granted (a new incarnation's grace period)", g)
		}
	})
}

// TestHandOffWaitsForInLockedTx: a lease's release deletes its hold
// without the name's lock, then locks the name to hand it over; a
// transaction of InLockedTx that holds the name's row of T meanwhile (its
// request granted in between) keeps the name from being handed over, and
// the release is reported all the same.
func TestHandOffWaitsForInLockedTx(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		db := rawDB(t)
		n := "handoff/intx"
		holdAndQueue(t, ctx, s, s, n)
		// The name's row, locked as InLockedTx's transaction locks it.
		if _, err := db.ExecContext(ctx, "CALL "+tb+"_txrow(?)", n); err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var seq uint64
		if err := tx.QueryRowContext(ctx, "SELECT seq FROM "+tb+" WHERE name = ? FOR UPDATE", n).Scan(&seq); err != nil {
			t.Fatal(err)
		}
		releaseA(t, ctx, s, n) // reported released after the lock wait
		stillQueued(t, ctx, s, n)
	})
}

// TestHandOffConditions: a release hands nothing over where T_grant would
// grant nothing: during a grace period, without room in the name's
// counter, for a TTL the grace period does not cover, or on a marker of
// another server, whose incarnation has not started here (the queued
// request's owner is woken and asks). Each is set up by writing T_state's
// marker or counter the way an incarnation, an epoch nearly used up, a
// lower max_ttl or a failover would leave them.
func TestHandOffConditions(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		for _, c := range []struct {
			name       string
			set, unset func(db *sql.DB, tb, n string) string
			mayDrop    bool // b's entry may be gone (a new incarnation)
		}{
			{"grace", func(_ *sql.DB, tb, _ string) string {
				return "UPDATE " + tb + "_state SET grace = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR WHERE name = ''"
			}, func(_ *sql.DB, tb, _ string) string {
				return "UPDATE " + tb + "_state SET grace = UTC_TIMESTAMP(6) WHERE name = ''"
			}, false},
			{"room", func(db *sql.DB, tb, n string) string {
				var epoch int64
				if err := db.QueryRow("SELECT epoch FROM " + tb + "_state WHERE name = ''").Scan(&epoch); err != nil {
					t.Fatal(err)
				}
				return fmt.Sprintf("UPDATE %s_state SET seq = %d WHERE name = 0x%x", tb, (epoch+1)<<32-1, n)
			}, nil, false},
			{"max_ttl", func(_ *sql.DB, tb, _ string) string {
				return "UPDATE " + tb + "_state SET max_ttl = 1000000000 WHERE name = ''"
			}, nil, false},
			{"server", func(_ *sql.DB, tb, _ string) string {
				return "UPDATE " + tb + "_state SET server = UNHEX(SHA1('another server')) WHERE name = ''"
			}, nil, true},
		} {
			t.Run(c.name, func(t *testing.T) {
				ctx := ctxFor(t, 30*time.Second)
				tb := freshTable(t)
				s := open(t, tb)
				db := rawDB(t)
				n := "handoff/" + c.name
				holdAndQueue(t, ctx, s, s, n)
				q := c.set(db, tb, n)
				if r, err := db.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				} else if k, _ := r.RowsAffected(); k != 1 {
					t.Fatalf("%s: %d rows", q, k)
				}
				releaseA(t, ctx, s, n)
				if c.mayDrop {
					notHanded(t, ctx, s, n)
				} else {
					stillQueued(t, ctx, s, n)
				}
				if c.unset != nil {
					if _, err := db.ExecContext(ctx, c.unset(db, tb, n)); err != nil {
						t.Fatal(err)
					}
					if _, err := s.Acquire(ctx, handOffReq(n, "b")); err != nil {
						t.Fatalf("b's Acquire once the grace period is over: %v", err)
					}
				}
			})
		}
	})
}
