package mysql_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestConformanceDurable runs the conformance suite on a durable table.
func TestConformanceDurable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := table + "_d"
		dropMu.Lock()
		dropTables = append(dropTables, tb)
		dropMu.Unlock()
		drivertest.Run(t, drivertest.Config{
			Open: func(t testing.TB) driver.Store { return openWith(t, &mysql.Options{Table: tb, Durable: true}) },
		})
	})
}

// TestModes: a table keeps the mode it was created with, and a table made
// by schema 1 (durable, without the flags column) is upgraded in place.
func TestModes(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		db := rawDB(t)
		engine := func(tb string) string {
			var e string
			if err := db.QueryRowContext(ctx, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
				tb+"_holds").Scan(&e); err != nil {
				t.Fatal(err)
			}
			return e
		}
		fast := freshTable(t)
		open(t, fast).Close()
		if e := engine(fast); e != "MEMORY" {
			t.Errorf("a new table's holds are in %s, want MEMORY", e)
		}
		if s, err := mysql.Open(ctx, dsn(t), &mysql.Options{Table: fast, Durable: true}); err == nil || !strings.Contains(err.Error(), "Durable") {
			if err == nil {
				s.Close()
			}
			t.Errorf("Open with Durable of a fast table: %v", err)
		}

		durable := freshTable(t)
		openWith(t, &mysql.Options{Table: durable, Durable: true}).Close()
		// As schema 1 left it.
		for _, q := range []string{"ALTER TABLE " + durable + "_holds DROP COLUMN flags", "DROP PROCEDURE " + durable + "_acquire"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		s := open(t, durable) // without Durable: the table's mode stands
		if e := engine(durable); e != "InnoDB" {
			t.Errorf("a durable table's holds went to %s", e)
		}
		g, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute, Meta: map[string]string{"k": "v"}})
		if err != nil || g.Token != 1 {
			t.Fatalf("Acquire on the upgraded table = %+v, %v", g, err)
		}
	})
}

// TestLongMetaAndHost: metadata too long for a MEMORY row is kept in
// T_meta, and listed as it was given; a long host is cut.
func TestLongMetaAndHost(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		db := rawDB(t)
		metaRows := func() int {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tb+"_meta").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		long := map[string]string{"k": strings.Repeat("é", 200)}
		host := strings.Repeat("h", 250) + "ééé"
		if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "a", Mode: driver.Exclusive, TTL: time.Minute, Meta: long, Host: host}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "b", Mode: driver.Exclusive, TTL: time.Minute, Queue: true, QueueTTL: time.Minute, Meta: long}); err == nil {
			t.Fatal("b granted while a holds")
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: "m", Owner: "c", Mode: driver.Exclusive, TTL: time.Minute, Meta: map[string]string{"k": "short"}}); err != nil {
			t.Fatal(err)
		}
		if n := metaRows(); n != 2 {
			t.Errorf("%d rows in %s_meta, want 2 (a's hold, b's queue entry)", n, tb)
		}
		hs, err := s.List(ctx, &driver.Filter{})
		if err != nil || len(hs) != 3 {
			t.Fatalf("List = %+v, %v", hs, err)
		}
		for _, h := range hs {
			want := long
			if h.Owner == "c" {
				want = map[string]string{"k": "short"}
			}
			if h.Meta["k"] != want["k"] {
				t.Errorf("%s's metadata is %q, want %q", h.Owner, h.Meta["k"], want["k"])
			}
			if h.Owner == "a" && h.Host != host[:254] {
				t.Errorf("a's host is %q (%d bytes), want the first 254 bytes", h.Host, len(h.Host))
			}
		}
		if _, err := s.Release(ctx, []driver.Key{{Name: "n", Owner: "a"}, {Name: "n", Owner: "b"}}); err != nil {
			t.Fatal(err)
		}
		if n := metaRows(); n != 0 {
			t.Errorf("%d rows in %s_meta after the release, want 0", n, tb)
		}
	})
}

// TestEpochFull: a name whose counter would pass into the next epoch's
// range starts a new epoch, durably, first: its token goes on growing,
// and a restart's epoch stays above it.
func TestEpochFull(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 60*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		req := &driver.Request{Name: "full", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute}
		g, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(ctx, []driver.Key{{Name: "full", Owner: "o"}}); err != nil {
			t.Fatal(err)
		}
		epoch := g.Token >> 32
		db := rawDB(t)
		last := (epoch+1)<<32 - 1
		if _, err := db.ExecContext(ctx, "UPDATE "+tb+"_state SET seq = ? WHERE name = 'full'", last); err != nil {
			t.Fatal(err)
		}
		g, err = s.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if g.Token != last+1 {
			t.Errorf("token %#x after %#x, want the next", g.Token, last)
		}
		var durable uint64
		if err := db.QueryRowContext(ctx, "SELECT epoch FROM "+tb+"_epochs").Scan(&durable); err != nil {
			t.Fatal(err)
		}
		if durable <= epoch {
			t.Errorf("durable epoch %d after the counter of epoch %d filled up, want more", durable, epoch)
		}
	})
}

// TestRaiseOnNewTable: a Renew that is a fast table's first call raises
// the longest TTL before anything starts an incarnation; the incarnation's
// grace period covers what was granted before the raise (nothing), so
// the next acquire is granted at once.
func TestRaiseOnNewTable(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		s := open(t, freshTable(t))
		if _, err := s.Renew(ctx, []driver.Hold{{Name: "n", Owner: "a", TTL: 30 * time.Second}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "b", Mode: driver.Exclusive, TTL: 30 * time.Second}); err != nil {
			t.Fatalf("acquire after the first renew: %v", err)
		}
	})
}

// TestGrantRaisesFirst: a lease longer than every lease granted without a
// flush is granted only once the grace period was raised to cover it,
// durably, so that a restart's grace period outlasts it.
func TestGrantRaisesFirst(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		db := rawDB(t)
		for i, ttl := range []time.Duration{time.Second, 20 * time.Second} {
			name := fmt.Sprint("n", i)
			if _, err := s.Acquire(ctx, &driver.Request{Name: name, Owner: "o", Mode: driver.Exclusive, TTL: ttl}); err != nil {
				t.Fatal(err)
			}
			var durable int64
			if err := db.QueryRowContext(ctx, "SELECT max_ttl FROM "+tb+"_epochs").Scan(&durable); err != nil {
				t.Fatal(err)
			}
			if durable < int64(ttl) {
				t.Errorf("a lease of %v granted while the grace period covers %v", ttl, time.Duration(durable))
			}
		}
	})
}

// TestMarkerOfAnotherServer: a marker written on another server (a
// replica promoted to primary keeps the MEMORY rows its primary wrote)
// starts a new incarnation: nothing is granted within its grace period,
// and the next token is in a new epoch.
func TestMarkerOfAnotherServer(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		tb := freshTable(t)
		s := open(t, tb)
		db := rawDB(t)
		req := func(name string) *driver.Request {
			return &driver.Request{Name: name, Owner: "o", Mode: driver.Exclusive, TTL: time.Second}
		}
		g, err := s.Acquire(ctx, req("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, "UPDATE "+tb+"_state SET server = UNHEX(SHA1('another server')) WHERE name = ''"); err != nil {
			t.Fatal(err)
		}
		_, err = s.Acquire(ctx, req("b"))
		var busy *driver.Busy
		if !errors.As(err, &busy) {
			t.Fatalf("acquire on a marker of another server: %v, want not granted (a new incarnation's grace period)", err)
		}
		for {
			g2, err := s.Acquire(ctx, req("b"))
			if errors.As(err, &busy) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if g2.Token>>32 <= g.Token>>32 {
				t.Errorf("token %#x after %#x, want a new epoch", g2.Token, g.Token)
			}
			break
		}
	})
}
