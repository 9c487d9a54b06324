package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/sqlite"
)

// TestSessions runs drivertest's checks of a store's sessions.
func TestSessions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	drivertest.Sessions(t, drivertest.SessionsConfig{
		Open: func(t testing.TB) driver.Store { return sqlite.Faulty{Store: open(t, path, nil)} },
		Count: func(t testing.TB) (n int) {
			raw, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if err := raw.QueryRow(`SELECT count(*) FROM baton_locks_sessions`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	})
}

func mustTryLock(t *testing.T, ctx context.Context, c *baton.Client, name string) *baton.Lease {
	t.Helper()
	l, err := c.TryLock(ctx, name, nil)
	if err != nil {
		t.Fatalf("TryLock %s: %v", name, err)
	}
	return l
}

// TestSessionOfEarlierBoot checks that a session of an earlier boot keeps
// no hold alive: its holders died with that boot.
func TestSessionOfEarlierBoot(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	restore := sqlite.SetBoot("boot-a")
	a := open(t, path, nil)
	restore()
	drivertest.WaitSession(t, ctx, a, time.Minute)
	g, err := a.Acquire(ctx, &driver.Request{Name: "boot", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true})
	if err != nil || g.Session == nil {
		t.Fatalf("Acquire: %+v, %v; want a grant in a session", g, err)
	}
	restore = sqlite.SetBoot("boot-b")
	b := client(t, open(t, path, nil), nil)
	restore()
	l := mustTryLock(t, ctx, b, "boot")
	l.Release(ctx)
}

// TestSessionNoCreate checks that a file without the sessions table, used
// with NoCreate, works as before: every hold renewed on its own; and that
// the Store still honours the sessions of another Store that made the
// table later.
func TestSessionNoCreate(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	open(t, path, nil).Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.ExecContext(ctx, `DROP TABLE baton_locks_sessions`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	st := open(t, path, &sqlite.Options{NoCreate: true})
	for i := range 5 {
		g, err := st.Acquire(ctx, &driver.Request{Name: fmt.Sprint("nocreate/", i), Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if g.Session != nil {
			t.Error("a hold bound to a session though the file has no sessions table")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Another Store makes the table and binds a hold: past the hold's own
	// TTL, the first Store judges it by its session too.
	ttl := 200 * time.Millisecond
	b := open(t, path, nil)
	drivertest.WaitSession(t, ctx, b, ttl)
	if _, err := b.Acquire(ctx, &driver.Request{Name: "nocreate/b", Owner: "b", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)
	if _, err := st.Acquire(ctx, &driver.Request{Name: "nocreate/b", Owner: "o", Mode: driver.Exclusive, TTL: ttl}); !errors.Is(err, driver.ErrNotGranted) {
		t.Errorf("Acquire of a name a session keeps, by a Store opened before the sessions table existed: %v, want ErrNotGranted", err)
	}
}

// oldRecord is a row's state as versions from before sessions read it.
type oldRecord struct {
	Boot  string `json:"boot,omitempty"`
	Wall  int64  `json:"wall,omitempty"`
	Epoch uint64 `json:"e,omitempty"`
	lockstate.State
}

// TestSessionRecordsRefusedByEarlierVersions checks that a version from
// before sessions cannot read a record whose holder is bound to a session
// (it would take the holder for expired after its own TTL), and reads it
// again once that holder left; and that a Store with NoSessions binds
// nothing, yet honours the sessions of others.
func TestSessionRecordsRefusedByEarlierVersions(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	st := open(t, path, nil)
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	oldRead := func(name string) error {
		var state string
		if err := raw.QueryRowContext(ctx, `SELECT state FROM baton_locks WHERE name = ?`, name).Scan(&state); err != nil {
			t.Fatal(err)
		}
		var r oldRecord
		return json.Unmarshal([]byte(state), &r)
	}
	ttl := 200 * time.Millisecond
	drivertest.WaitSession(t, ctx, st, ttl)
	req := &driver.Request{Name: "old", Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true}
	if _, err := st.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	if err := oldRead("old"); err == nil {
		t.Error("an earlier version reads a record whose holder is bound to a session")
	}
	// Past its own TTL the hold lives in its session, for this version
	// and for a Store with NoSessions, which binds none of its own.
	time.Sleep(2 * ttl)
	ns := open(t, path, &sqlite.Options{NoSessions: true})
	if _, err := ns.Acquire(ctx, &driver.Request{Name: "old", Owner: "p", Mode: driver.Exclusive, TTL: ttl}); !errors.Is(err, driver.ErrNotGranted) {
		t.Errorf("a NoSessions Store's Acquire of a name a session keeps: %v, want ErrNotGranted", err)
	}
	for i := range 5 {
		g, err := ns.Acquire(ctx, &driver.Request{Name: fmt.Sprint("ns/", i), Owner: "o", Mode: driver.Exclusive, TTL: ttl, KeepAlive: true})
		if err != nil {
			t.Fatal(err)
		}
		if g.Session != nil {
			t.Error("a NoSessions Store bound a hold to a session")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := st.Release(ctx, []driver.Key{{Name: "old", Owner: "o"}}); err != nil {
		t.Fatal(err)
	}
	if err := oldRead("old"); err != nil {
		t.Errorf("an earlier version cannot read the record once its holder left: %v", err)
	}
}
