package mysql_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestSysdateIsNow runs on a server started with --sysdate-is-now, where
// SYSDATE is the time its statement started, as NOW. A session's renewal
// (T_session) must read the time as it runs, after waiting for the table:
// so a fast table keeps no sessions there, and each lease renews itself.
// The conformance suite passes as on any server.
func TestSysdateIsNow(t *testing.T) {
	drivertest.EachServer(t, sysdateEnv, func(t *testing.T, srv drivertest.Server) {
		tb := freshTable(t)
		openHere := func(t testing.TB) *mysql.Store { return openAt(t, srv.URL, &mysql.Options{Table: tb}) }
		t.Run("NoSessions", func(t *testing.T) {
			s := openHere(t)
			if mysql.KeepsSessions(s) {
				t.Fatal("a fast table on a server with --sysdate-is-now keeps sessions")
			}
			// A lease kept alive renews on its own: it outlives its TTL.
			c := client(t, s, nil)
			ctx := ctxFor(t, 30*time.Second)
			l, err := c.Lock(ctx, "sysdate/kept", &baton.LockOptions{TTL: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2500 * time.Millisecond)
			select {
			case <-l.Done():
				t.Fatalf("lease lost: %v", l.Err())
			default:
			}
			other := client(t, openHere(t), nil)
			if _, err := other.TryLock(ctx, "sysdate/kept", nil); !errors.Is(err, baton.ErrLocked) {
				t.Fatalf("TryLock of a kept lease's name: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return openHere(t) },
		})
	})
}
