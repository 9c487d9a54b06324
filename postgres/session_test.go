package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// TestSessions runs drivertest's checks of a store's sessions.
func TestSessions(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		drivertest.Sessions(t, drivertest.SessionsConfig{
			Open: func(t testing.TB) driver.Store { return postgres.Faulty{Store: open(t, tb)} },
			Count: func(t testing.TB) (n int) {
				if err := pool(t).QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{tb + "_sessions"}.Sanitize()).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			},
			Slow: 1.5,
		})
	})
}

// TestSessionReclaim checks that the reclaim of idle names leaves the
// names whose holds only their session keeps, in their row or among their
// entries.
func TestSessionReclaim(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		ttl := 500 * time.Millisecond
		st := open(t, tb)
		a := client(t, st, &baton.Options{TTL: ttl})
		drivertest.WaitSession(t, ctx, st, ttl)
		mustTryLock(t, ctx, a, "first", nil)
		ls := []*baton.Lease{mustTryLock(t, ctx, a, "r/x", nil), mustTryLock(t, ctx, a, "r/s", &baton.LockOptions{Shared: true})}
		time.Sleep(2 * ttl) // past their own TTL
		if _, err := postgres.Reclaim(ctx, open(t, tb), 0); err != nil {
			t.Fatal(err)
		}
		b := client(t, open(t, tb), nil)
		for _, l := range ls {
			if _, err := b.TryLock(ctx, l.Name(), nil); !errors.Is(err, baton.ErrLocked) {
				t.Errorf("after a reclaim, another client's TryLock of %s: %v, want ErrLocked", l.Name(), err)
			}
			if err := l.ReleaseStrict(ctx); err != nil {
				t.Errorf("Release %s after a reclaim: %v", l.Name(), err)
			}
		}
	})
}

func mustTryLock(t *testing.T, ctx context.Context, c *baton.Client, name string, o *baton.LockOptions) *baton.Lease {
	t.Helper()
	l, err := c.TryLock(ctx, name, o)
	if err != nil {
		t.Fatalf("TryLock %s: %v", name, err)
	}
	return l
}

// TestSessionNotRevived: see drivertest.SessionNotRevived.
func TestSessionNotRevived(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		drivertest.SessionNotRevived(t, open(t, freshTable(t)), postgres.DefaultMaxGrace)
	})
}

// TestSessionCrash crashes the server (an immediate stop) while only
// their session keeps two holds (see drivertest.SessionCrash).
func TestSessionCrash(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := freshTable(t)
		drivertest.SessionCrash(t, drivertest.SessionCrashConfig{
			Env:  serversEnv,
			Open: func(t testing.TB) driver.Store { return open(t, tb) },
		})
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

// TestSessionRenewalWaitsForJudgment checks that a renewal of a session
// that a judgment reads (FOR SHARE, under a name's lock) waits for that
// judgment to commit and then renews only a session still live: one that
// expired meanwhile may have lost its holds to the judgment, and must not
// come back.
func TestSessionRenewalWaitsForJudgment(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		st := open(t, tb)
		ttl := 300 * time.Millisecond
		if ok, err := st.KeepSession(ctx, "judged", ttl, true); !ok || err != nil {
			t.Fatalf("create: %v, %v", ok, err)
		}
		tx, err := pool(t).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		// A judgment in progress, while the session is live.
		if _, err := tx.Exec(ctx, "SELECT "+pgx.Identifier{tb + "_alive"}.Sanitize()+"('judged')"); err != nil {
			t.Fatal(err)
		}
		renewed := make(chan bool, 1)
		go func() {
			ok, err := st.KeepSession(ctx, "judged", ttl, false)
			if err != nil {
				t.Error(err)
			}
			renewed <- ok
		}()
		time.Sleep(2 * ttl) // the renewal waits; the session expires
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if <-renewed {
			t.Error("a renewal that waited for a judgment renewed a session that had expired meanwhile")
		}
	})
}
