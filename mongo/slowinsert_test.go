package mongo_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonmongo "github.com/baton-go/baton/mongo"
)

func cycle(t *testing.T, ctx context.Context, s *batonmongo.Store, n, owner string) uint64 {
	t.Helper()
	g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: owner, Mode: driver.Exclusive, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("%s: Acquire: %v", owner, err)
	}
	if _, err := s.Release(ctx, []driver.Key{{Name: n, Owner: owner}}); err != nil {
		t.Fatalf("%s: Release: %v", owner, err)
	}
	return g.Token
}

// An insert slower than the bound is kept when no ticket can have been
// deleted meanwhile: a slow server does not stop every acquire.
func TestSlowInsertKept(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t)
		n := "slow-insert-kept/" + collection
		t0 := cycle(t, ctx, s, n, "a")
		var once atomic.Bool
		defer batonmongo.SetStaleInsert(50*time.Millisecond, func() {
			if once.CompareAndSwap(false, true) {
				time.Sleep(100 * time.Millisecond)
			}
		})()
		if t1 := cycle(t, ctx, s, n, "a"); t1 != t0+1 {
			t.Errorf("token after a slow insert %d, want %d: the insert was withdrawn", t1, t0+1)
		}
	})
}

// An insert from a read older than the deletion of the ticket it takes is
// withdrawn: the acquire starts again and its token is above every
// earlier one.
func TestSlowInsertOfDeletedTicketWithdrawn(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		a, b := open(t), open(t)
		n := "slow-insert-reused/" + collection
		cycle(t, ctx, b, n, "b")
		var once atomic.Bool
		var first, last uint64
		defer batonmongo.SetStaleInsert(300*time.Millisecond, func() {
			if !once.CompareAndSwap(false, true) {
				return
			}
			// a has read the name and is about to insert the next ticket.
			// Meanwhile b takes enough tickets for that one to be deleted.
			first = cycle(t, ctx, b, n, "b")
			for range batonmongo.KeepTickets + 8 {
				last = cycle(t, ctx, b, n, "b")
			}
			time.Sleep(1100 * time.Millisecond)
			last = cycle(t, ctx, b, n, "b")
			last = cycle(t, ctx, b, n, "b")
			c, err := b.Collection().CountDocuments(ctx, bson.D{{Key: "n", Value: n}, {Key: "t", Value: int64(first)}})
			if err != nil || c != 0 {
				t.Errorf("ticket %d not deleted (%d, %v): the test needs it to be", first, c, err)
			}
		})()
		g, err := a.Acquire(ctx, &driver.Request{Name: n, Owner: "a", Mode: driver.Exclusive, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last {
			t.Errorf("token %d after b's %d (a reused ticket %d)", g.Token, last, first)
		}
	})
}
