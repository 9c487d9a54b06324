package elastic_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
)

// TestReferenceESLock walks through graup/es-distributed-lock's API in
// baton's terms, each call of the reference next to its counterpart.
func TestReferenceESLock(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		c, err := baton.New(open(t, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		other, err := baton.New(open(t, nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		id := fmt.Sprintf("reference/%s/eslock", index)
		const ttl = 2 * time.Second

		// lock.NewLock(client, id).WithOwner("worker-1"); lock.Acquire(ctx, ttl)
		owner := "worker-1-" + baton.NewOwner()
		mine := &baton.LockOptions{Owner: owner, TTL: ttl, NoKeepAlive: true}
		l, err := c.TryLock(ctx, id, mine)
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		// lock.IsAcquired()
		if l.Err() != nil {
			t.Fatalf("IsAcquired false after Acquire: %v", l.Err())
		}
		// Another owner is rejected while the lock has not expired.
		if _, err := other.TryLock(ctx, id, &baton.LockOptions{TTL: ttl}); !errors.Is(err, baton.ErrLocked) {
			t.Fatalf("another owner's Acquire: %v, want ErrLocked", err)
		}
		// The same owner acquiring again (lock.Acquire once more) extends
		// the TTL and keeps the lock.
		time.Sleep(ttl / 2)
		l2, err := c.TryLock(ctx, id, mine)
		if err != nil {
			t.Fatalf("same owner's Acquire: %v", err)
		}
		if l2.Token() != l.Token() {
			t.Errorf("re-acquire changed the token %d → %d", l.Token(), l2.Token())
		}
		time.Sleep(ttl * 3 / 4) // past the first TTL, within the extended one
		if _, err := other.TryLock(ctx, id, &baton.LockOptions{TTL: ttl}); !errors.Is(err, baton.ErrLocked) {
			t.Fatalf("Acquire after the first TTL but within the extension: %v, want ErrLocked", err)
		}
		// lock.MustRelease(): the release happened, then fails as a noop.
		if err := l2.ReleaseStrict(ctx); err != nil {
			t.Fatalf("MustRelease: %v", err)
		}
		if err := l2.ReleaseStrict(ctx); !errors.Is(err, baton.ErrNotHeld) {
			t.Errorf("second MustRelease: %v, want ErrNotHeld", err)
		}
		// lock.IsReleased()
		if l2.Err() == nil {
			t.Error("IsReleased false after MustRelease")
		}

		// An expired lock is taken over by another owner, and the old
		// owner's Release (lock.Release) then changes nothing.
		old, err := c.TryLock(ctx, id, &baton.LockOptions{TTL: ttl, NoKeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		var taken *baton.Lease
		drivertest.Eventually(t, 3*ttl, "takeover of the expired lock", func() bool {
			taken, err = other.TryLock(ctx, id, &baton.LockOptions{TTL: time.Minute})
			return err == nil
		})
		if taken.Token() <= old.Token() {
			t.Errorf("takeover token %d, not above %d", taken.Token(), old.Token())
		}
		if err := old.Release(ctx); err != nil {
			t.Errorf("Release of the expired lock: %v", err)
		}
		if _, err := c.TryLock(ctx, id, nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("the expired owner's Release freed the new owner's lock: %v", err)
		}

		// lock.KeepAlive(ctx, beforeExpiry): baton renews by default.
		if err := taken.Release(ctx); err != nil {
			t.Fatal(err)
		}
		kept, err := c.TryLock(ctx, id, &baton.LockOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * ttl)
		if err := kept.Err(); err != nil {
			t.Errorf("kept-alive lock ended: %v", err)
		}
		if _, err := other.TryLock(ctx, id, nil); !errors.Is(err, baton.ErrLocked) {
			t.Errorf("kept-alive lock taken: %v", err)
		}
		kept.Release(ctx)
	})
}

// TestReferenceKestra walks through Kestra's Elasticsearch lock: a lock
// is a document found by id, never by a search; creating it when one
// exists fails; the runnable runs under the lock (doInLock) with a
// timeout; the unlock deletes only the owner's lock; and locks of an
// instance found dead are cleaned up.
func TestReferenceKestra(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, time.Minute)
		instance := func(id string) *baton.Client {
			c, err := baton.New(open(t, nil), &baton.Options{Host: id})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		a, b := instance("instance-a"), instance("instance-b")
		id := fmt.Sprintf("reference/%s/kestra", index)

		// doInLock(id, timeout, runnable): the second instance waits its
		// turn, then runs.
		ran := make(chan string, 2)
		inside := make(chan struct{})
		errs := make(chan error, 2)
		go func() {
			errs <- a.Do(ctx, id, nil, func(ctx context.Context, l *baton.Lease) error {
				close(inside)
				time.Sleep(300 * time.Millisecond)
				ran <- "a"
				return nil
			})
		}()
		<-inside
		go func() {
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second) // the timeout of doInLock
			defer cancel()
			errs <- b.Do(tctx, id, nil, func(ctx context.Context, l *baton.Lease) error {
				ran <- "b"
				return nil
			})
		}()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("doInLock: %v", err)
			}
		}
		if first, second := <-ran, <-ran; first != "a" || second != "b" {
			t.Errorf("ran %s then %s; want a, then b after a's unlock", first, second)
		}

		// A lock held past the timeout: doInLock gives up with the
		// context's error and runs nothing.
		if _, err := a.Lock(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := b.Do(tctx, id, nil, func(context.Context, *baton.Lease) error { t.Error("ran while locked"); return nil })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("doInLock past its timeout: %v, want DeadlineExceeded", err)
		}

		// Dead-instance cleanup: instance a stops renewing (it died); an
		// operator releases its locks by owner, found by host in Status.
		hs, err := b.Status(ctx, &baton.Filter{Name: id})
		if err != nil || len(hs) != 1 || hs[0].Host != "instance-a" {
			t.Fatalf("Status = %+v, %v; want instance-a's lock", hs, err)
		}
		if _, err := b.ReleaseOwner(ctx, hs[0].Owner); err != nil {
			t.Fatalf("releasing the dead instance's locks: %v", err)
		}
		if _, err := b.TryLock(ctx, id, nil); err != nil {
			t.Errorf("TryLock after the cleanup: %v", err)
		}
	})
}
