package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestCrash kills the server (SIGKILL) during holds of a fast table, whose
// MEMORY tables the restart empties; see drivertest.Crash for what must
// hold. Besides, a lease longer than MaxGrace, kept durably, survives: its
// holder renews it after the restart and nobody else is granted its name.
// Its TTL outlasts the restart (MySQL 8 takes up to 5 s on a loaded
// machine): a lease whose server is gone for longer is lost, as it should
// be.
func TestCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		long := client(t, openWith(t, &mysql.Options{Table: tb, MaxGrace: time.Second}), nil)
		var ll *baton.Lease
		drivertest.Crash(t, drivertest.CrashConfig{
			Env:  serversEnv,
			Open: func(t testing.TB) driver.Store { return open(t, tb) },
			BeforeCrash: func(ctx context.Context, t *testing.T) {
				var err error
				if ll, err = long.Lock(ctx, "crash/long", &baton.LockOptions{TTL: 20 * time.Second}); err != nil {
					t.Fatal(err)
				}
			},
			AfterGrace: func(ctx context.Context, t *testing.T, _ time.Time) {
				b := client(t, open(t, tb), nil)
				o := &baton.LockOptions{TTL: 2 * time.Second}
				// The long lease came back: b cannot take its name, and its
				// holder renews it on the new incarnation.
				if _, err := b.TryLock(ctx, "crash/long", o); !errors.Is(err, baton.ErrLocked) {
					t.Errorf("TryLock of the long lease's name after the crash: %v", err)
				}
				if err := ll.Renew(ctx); err != nil {
					t.Fatalf("renewing the long lease after the crash: %v", err)
				}
				if _, err := b.TryLock(ctx, "crash/long", o); !errors.Is(err, baton.ErrLocked) {
					t.Errorf("TryLock of the long lease's name after its renewal: %v", err)
				}
				if err := ll.Release(ctx); err != nil {
					t.Errorf("releasing the long lease: %v", err)
				}
				l, err := b.TryLock(ctx, "crash/long", o)
				if err != nil {
					t.Fatalf("TryLock after the long lease's release: %v", err)
				}
				if l.Token() <= ll.Token() {
					t.Errorf("token %#x after the long lease is not above its %#x", l.Token(), ll.Token())
				}
				l.Release(ctx)
			},
		})
	})
}
