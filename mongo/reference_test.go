package mongo_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
)

// TestReferenceUsage walks through square/mongo-lock's own usage example
// in baton's terms: an exclusive lock on resource1 and a shared lock on
// resource2 under one lock id, then both released by that lock id.
func TestReferenceUsage(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		c, err := baton.New(open(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		other, err := baton.New(open(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		base := "reference/" + collection + "/"
		lockID := "abcd1234"

		// c.XLock(ctx, "resource1", lockId, lock.LockDetails{})
		x, err := c.TryLock(ctx, base+"resource1", &baton.LockOptions{Owner: lockID})
		if err != nil {
			t.Fatalf("XLock: %v", err)
		}
		// c.SLock(ctx, "resource2", lockId, lock.LockDetails{}, -1)
		s, err := c.TryLock(ctx, base+"resource2", &baton.LockOptions{Owner: lockID, Shared: true})
		if err != nil {
			t.Fatalf("SLock: %v", err)
		}
		// The reference's rules: one exclusive lock per resource, shared locks
		// coexist, never both.
		if _, err := other.TryLock(ctx, base+"resource1", &baton.LockOptions{Shared: true}); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("shared lock on an exclusively locked resource: %v, want ErrLocked", err)
		}
		s2, err := other.TryLock(ctx, base+"resource2", &baton.LockOptions{Shared: true})
		if err != nil {
			t.Fatalf("second shared lock: %v", err)
		}
		if _, err := other.TryLock(ctx, base+"resource2", nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("exclusive lock on a shared-locked resource: %v, want ErrLocked", err)
		}
		// c.Status(ctx, lock.Filter{LockId: lockId})
		st, err := other.Status(ctx, &baton.Filter{Prefix: base, Owner: lockID})
		if err != nil || len(st) != 2 {
			t.Fatalf("Status by lock id = %+v, %v; want 2 locks", st, err)
		}
		// c.Renew(ctx, lockId, 30)
		renewed, err := other.RenewOwner(ctx, lockID, 30*time.Second)
		if err != nil || len(renewed) != 2 {
			t.Fatalf("Renew by lock id = %+v, %v; want 2 locks", renewed, err)
		}
		// c.Unlock(ctx, lockId)
		released, err := c.ReleaseOwner(ctx, lockID)
		if err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		var names []string
		for _, h := range released {
			names = append(names, h.Name)
		}
		slices.Sort(names)
		if want := []string{base + "resource1", base + "resource2"}; !slices.Equal(names, want) {
			t.Errorf("Unlock released %q, want %q", names, want)
		}
		if x.Err() == nil || s.Err() == nil {
			t.Errorf("leases still held after Unlock: %v, %v", x.Err(), s.Err())
		}
		// resource1 is free; resource2 still has the other shared holder.
		l, err := other.TryLock(ctx, base+"resource1", nil)
		if err != nil {
			t.Fatalf("resource1 after Unlock: %v", err)
		}
		if l.Token() <= x.Token() {
			t.Errorf("token %d after Unlock not above %d", l.Token(), x.Token())
		}
		l.Release(ctx)
		s2.Release(ctx)
		// The purger: nothing has expired.
		if purged, err := c.Purge(ctx); err != nil {
			t.Errorf("Purge: %v", err)
		} else {
			for _, h := range purged {
				if len(h.Name) > len(base) && h.Name[:len(base)] == base {
					t.Errorf("Purge took a live lock: %+v", h)
				}
			}
		}
	})
}
