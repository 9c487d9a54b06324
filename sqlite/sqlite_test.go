package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/sqlite"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func open(t testing.TB, path string, o *sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func client(t testing.TB, s driver.Store, o *baton.Options) *baton.Client {
	t.Helper()
	c, err := baton.New(s, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.db")
	drivertest.Run(t, drivertest.Config{
		Open: func(t testing.TB) driver.Store { return sqlite.Faulty{Store: open(t, path, nil)} },
	})
}

func TestBasic(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "sub", "dir", "locks.db")
	a := client(t, open(t, path, nil), nil)
	b := client(t, open(t, path, nil), nil)
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("created directory: %v, %v; want it private", fi.Mode(), err)
	}

	before := time.Now()
	la, err := a.TryLock(ctx, "job", &baton.LockOptions{Meta: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatal(err)
	}
	if la.Token() == 0 {
		t.Error("token 0")
	}
	if _, err := b.TryLock(ctx, "job", nil); !errors.Is(err, baton.ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	}
	st, err := b.Status(ctx, &baton.Filter{Name: "job"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != 1 || st[0].Owner != la.Owner() || st[0].Token != la.Token() || st[0].Meta["k"] != "v" {
		t.Fatalf("Status = %+v", st)
	}
	// Times are shown on the wall clock, the time left on the monotonic one.
	if d := st[0].Created.Sub(before); d < -time.Minute || d > time.Minute {
		t.Errorf("Created %v is %v away from the wall clock", st[0].Created, d)
	}
	if d := st[0].Expires.Sub(st[0].Renewed); d != 15*time.Second {
		t.Errorf("Expires-Renewed = %v, want the TTL 15s", d)
	}
	if st[0].Left <= 0 || st[0].Left > 15*time.Second {
		t.Errorf("Left = %v", st[0].Left)
	}
	if info := la.Info(); !info.Created.Equal(st[0].Created) {
		t.Errorf("lease Created %v, listed %v", info.Created, st[0].Created)
	}
	if err := la.Renew(ctx); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := la.Renew(ctx); !errors.Is(err, baton.ErrNotHeld) {
		t.Errorf("Renew after release: %v, want ErrNotHeld", err)
	}
	lb, err := b.TryLock(ctx, "job", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lb.Token() <= la.Token() {
		t.Errorf("token %d after %d", lb.Token(), la.Token())
	}

	// A blocking Lock waits for the release, woken by the store.
	ch := make(chan *baton.Lease, 1)
	go func() {
		l, err := a.Lock(ctx, "job", nil)
		if err != nil {
			t.Error(err)
		}
		ch <- l
	}()
	select {
	case <-ch:
		t.Fatal("Lock returned while the lock was held")
	case <-time.After(100 * time.Millisecond):
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-ch; l != nil && l.Token() <= lb.Token() {
		t.Errorf("token %d after %d", l.Token(), lb.Token())
	}

	// Owner groups.
	owner := baton.NewOwner()
	for _, n := range []string{"g1", "g2"} {
		if _, err := a.TryLock(ctx, n, &baton.LockOptions{Owner: owner}); err != nil {
			t.Fatal(err)
		}
	}
	renewed, err := b.RenewOwner(ctx, owner, time.Minute)
	if err != nil || len(renewed) != 2 {
		t.Fatalf("RenewOwner = %v, %v", renewed, err)
	}
	released, err := b.ReleaseOwner(ctx, owner)
	if err != nil || len(released) != 2 {
		t.Fatalf("ReleaseOwner = %v, %v", released, err)
	}
}

func TestExpiryAndPurge(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	sa := open(t, path, nil)
	b := client(t, open(t, path, nil), nil)
	// The first hold is the driver's, not a Lease: a Lease releases its
	// hold at its own deadline, a margin before the store's, and this is
	// about the store's.
	ttl := 300 * time.Millisecond
	sent := time.Now() // the store's grant, and its TTL, start no earlier
	ga, err := sa.Acquire(ctx, &driver.Request{Name: "exp", Owner: "a", Mode: driver.Exclusive, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	var lb *baton.Lease
	for lb == nil {
		l, err := b.TryLock(ctx, "exp", nil)
		switch {
		case err == nil:
			lb = l
		case !errors.Is(err, baton.ErrLocked):
			t.Fatal(err)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	if d := time.Since(sent); d < ttl {
		t.Fatalf("granted to another owner %v after the first grant, before the TTL %v", d, ttl)
	}
	if lb.Token() <= ga.Token {
		t.Errorf("token %d after %d", lb.Token(), ga.Token)
	}
	if gs, err := sa.Renew(ctx, []driver.Hold{{Name: "exp", Owner: "a", TTL: ttl}}); err != nil || gs[0] != nil {
		t.Errorf("late Renew = %v, %v; want no grant", gs, err)
	}

	// An expired hold that its holder did not release (it died) is
	// listed with Expired, and purged.
	s := open(t, path, nil)
	if _, err := s.Acquire(ctx, &driver.Request{Name: "purge-me", Owner: "dead", Mode: driver.Exclusive, TTL: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	st, err := b.Status(ctx, &baton.Filter{Name: "purge-me", Expired: true})
	if err != nil || len(st) != 1 || st[0].Left > 0 {
		t.Fatalf("Status(Expired) = %+v, %v", st, err)
	}
	purged, err := b.Purge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range purged {
		if h.Name == "purge-me" {
			found = true
			if d := time.Since(h.Expires); d < 0 || d > time.Minute {
				t.Errorf("purged hold expired at %v, %v ago", h.Expires, d)
			}
		}
	}
	if !found {
		t.Errorf("Purge = %+v, want purge-me", purged)
	}
	if st, _ := b.Status(ctx, &baton.Filter{Name: "purge-me", Expired: true}); len(st) != 0 {
		t.Errorf("after Purge, Status = %+v", st)
	}
}

func TestTokensIncreaseAcrossStoresAndReopen(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	var last uint64
	for i := range 6 {
		s, err := sqlite.Open(ctx, path, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := baton.New(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Alternate two Stores open at once with a full reopen.
		var other *baton.Client
		if i%2 == 0 {
			other = client(t, open(t, path, nil), nil)
		}
		for _, cl := range []*baton.Client{c, other} {
			if cl == nil {
				continue
			}
			l, err := cl.TryLock(ctx, "tok", nil)
			if err != nil {
				t.Fatal(err)
			}
			if l.Token() <= last {
				t.Errorf("token %d not above %d", l.Token(), last)
			}
			last = l.Token()
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if other != nil {
			other.Close()
		}
	}
	if last != 9 {
		t.Errorf("last token %d, want 9", last)
	}
	// Purge keeps the counter.
	s := open(t, path, nil)
	if _, err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := s.Acquire(ctx, &driver.Request{Name: "tok", Owner: "o", Mode: driver.Exclusive, TTL: time.Second})
	if err != nil || g.Token != last+1 {
		t.Fatalf("Acquire = %+v, %v; want token %#x", g, err, last+1)
	}
}

func TestBootChange(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	restore := sqlite.SetBoot("boot-before")
	old := open(t, path, nil)
	restore()
	hour := time.Hour
	g1, err := old.Acquire(ctx, &driver.Request{Name: "x", Owner: "dead", Mode: driver.Exclusive, TTL: hour})
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.Acquire(ctx, &driver.Request{Name: "x", Owner: "waiter", Mode: driver.Exclusive, TTL: hour, Queue: true, QueueTTL: hour})
	if !errors.Is(err, driver.ErrNotGranted) {
		t.Fatalf("queued Acquire: %v", err)
	}
	if _, err := old.Acquire(ctx, &driver.Request{Name: "y", Owner: "dead", Mode: driver.Shared, TTL: hour}); err != nil {
		t.Fatal(err)
	}

	defer sqlite.SetBoot("boot-after")()
	s := open(t, path, nil)
	// The entries of the old boot are dead: expired, until purged.
	hs, err := s.List(ctx, &driver.Filter{Queued: true, Expired: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		if h.Left > 0 {
			t.Errorf("List after reboot: %+v is alive, want every entry of the old boot expired", h)
		}
	}
	// The holder and the waiter died with the boot; the counter survives.
	g, err := s.Acquire(ctx, &driver.Request{Name: "x", Owner: "new", Mode: driver.Exclusive, TTL: hour})
	if err != nil {
		t.Fatalf("Acquire after reboot: %v", err)
	}
	if g.Token <= g1.Token {
		t.Errorf("token %#x after reboot, not above %#x", g.Token, g1.Token)
	}
	if gs, err := old.Renew(ctx, []driver.Hold{{Name: "x", Owner: "dead", TTL: hour}}); err != nil || gs[0] != nil {
		t.Errorf("Renew of a hold of the old boot = %v, %v", gs, err)
	}
	// Purge reports the holders of the old boot.
	purged, err := s.Purge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(purged) != 1 || purged[0].Name != "y" || purged[0].Owner != "dead" || purged[0].Left > 0 {
		t.Errorf("Purge = %+v, want y's dead holder", purged)
	}
	if d := time.Since(purged[0].Created); d < 0 || d > time.Minute {
		t.Errorf("purged holder created %v (%v ago)", purged[0].Created, d)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.db")
	for _, table := range []string{"bad-name", "1abc", "a b", `x"y`, strings.Repeat("t", 64), "drop table;"} {
		_, err := sqlite.Open(ctx, path, &sqlite.Options{Table: table})
		if err == nil || !strings.Contains(err.Error(), "invalid table name") {
			t.Errorf("table %q: err = %v", table, err)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("a refused Open created the file")
	}
	if _, err := sqlite.Open(ctx, path, &sqlite.Options{BusyTimeout: -time.Second}); err == nil {
		t.Error("negative BusyTimeout accepted")
	}
	for _, p := range []string{"", ":memory:"} {
		if _, err := sqlite.Open(ctx, p, nil); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	// NoCreate: the file must exist, and the table too.
	_, err := sqlite.Open(ctx, path, &sqlite.Options{NoCreate: true})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("NoCreate on a missing file: %v", err)
	}
	if _, err := os.Stat(path); err == nil {
		t.Error("NoCreate created the file")
	}
	s := open(t, path, &sqlite.Options{Table: "other_table"})
	s.Close()
	_, err = sqlite.Open(ctx, path, &sqlite.Options{NoCreate: true})
	if err == nil || !strings.Contains(err.Error(), `table "baton_locks" is missing`) || !strings.Contains(err.Error(), "CREATE TABLE") {
		t.Errorf("NoCreate without the table: %v", err)
	}
	s = open(t, path, &sqlite.Options{NoCreate: true, Table: "other_table"})
	if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "o", Mode: driver.Exclusive, TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.List(ctx, &driver.Filter{}); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("List after Close: %v", err)
	}
	if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "o", Mode: driver.Exclusive, TTL: time.Second}); !errors.Is(err, sqlite.ErrClosed) {
		t.Errorf("Acquire after Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		url, path string
		o         sqlite.Options
		err       string
	}{
		{url: "sqlite:///var/lib/app/locks.db", path: "/var/lib/app/locks.db"},
		{url: "sqlite://localhost/var/locks.db", path: "/var/locks.db"},
		{url: "sqlite:locks.db", path: "locks.db"},
		{url: "sqlite:dir/with%20space.db", path: "dir/with space.db"},
		{url: "sqlite:///a%3Fb.db", path: "/a?b.db"},
		{url: "sqlite:///x.db?table=t_1&busy_timeout=30s&nocreate=true&reclaim=10m&nosessions=1", path: "/x.db",
			o: sqlite.Options{Table: "t_1", BusyTimeout: 30 * time.Second, NoCreate: true, Reclaim: 10 * time.Minute, NoSessions: true}},
		{url: "sqlite:///x.db?nosessions=maybe", err: "nosessions"},
		{url: "sqlite:///x.db?reclaim=-1s", err: "reclaim"},
		{url: "sqlite://locks.db", err: `host part "locks.db"`},
		{url: "sqlite://", err: "no database path"},
		{url: "sqlite:///x.db?tabel=x", err: `unknown URL parameter "tabel"`},
		{url: "sqlite:///x.db?busy_timeout=3", err: "busy_timeout"},
		{url: "sqlite:///x.db?nocreate=maybe", err: "nocreate"},
		{url: "sqlite://u:p@/x.db", err: "password"},
	} {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		path, o, err := sqlite.ParseURL(u)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.url, err, tc.err)
			}
			continue
		}
		if err != nil || path != tc.path || *o != tc.o {
			t.Errorf("%s: %q, %+v, %v; want %q, %+v", tc.url, path, o, err, tc.path, tc.o)
		}
	}

	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	c, err := baton.Open(ctx, "sqlite://"+filepath.ToSlash(dir)+"/u/locks.db?table=url_locks", nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, "n", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	c.Close()
	db, err := sql.Open("sqlite", filepath.Join(dir, "u", "locks.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var state string
	if err := db.QueryRow(`SELECT state FROM url_locks WHERE name = 'n'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != `{"seq":1,"ticket":0}` {
		t.Errorf("idle state %s, want it compact", state)
	}
	if _, err := baton.Open(ctx, "sqlite:///"+filepath.ToSlash(dir)+"/x.db?table=no-good", nil); err == nil || !strings.Contains(err.Error(), "invalid table name") {
		t.Errorf("bad table in URL: %v", err)
	}
}

func TestConcurrentOpen(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "new", "locks.db")
	var wg sync.WaitGroup
	stores := make([]*sqlite.Store, 8)
	errs := make([]error, 8)
	start := make(chan struct{})
	for i := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			stores[i], errs[i] = sqlite.Open(ctx, path, nil)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		defer stores[i].Close()
	}
	var last uint64
	for i, s := range stores {
		g, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: fmt.Sprint("o", i), Mode: driver.Shared, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last {
			t.Errorf("token %d after %d", g.Token, last)
		}
		last = g.Token
	}
}

// TestWatch checks that a Watch wakes on a commit of another Store of the
// process, and on a commit that only the file system reports (a plain
// database/sql connection, as another process would make), and that no
// goroutine outlives the Watches and Stores.
func TestWatch(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	a, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	req := &driver.Request{Name: "w", Owner: "waiter", Mode: driver.Exclusive, TTL: time.Second}
	w, err := a.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !sqlite.Watching(a.Path()) {
		t.Error("no file-system watcher while a Watch is open")
	}
	// A change made before Wait is not missed.
	if _, err := b.Acquire(ctx, &driver.Request{Name: "w", Owner: "holder", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := w.Wait(ctx); err != nil {
		t.Fatalf("Wait after another Store's commit: %v", err)
	}

	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	// wokenBy drains the wake-ups so far, then checks that a Wait blocked
	// in w is woken by what change does.
	wokenBy := func(what string, change func()) {
		t.Helper()
		for {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			err := w.Wait(wctx)
			cancel()
			if err != nil {
				break
			}
		}
		done := make(chan error, 1)
		go func() { done <- w.Wait(ctx) }()
		time.Sleep(50 * time.Millisecond)
		change()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait after %s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Wait not woken by %s", what)
		}
	}
	ring := func() {
		if err := os.WriteFile(path+"-wake", []byte{1}, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Another process commits, then rings the doorbell, as baton does.
	wokenBy("a commit of another connection", func() {
		if _, err := raw.Exec(`UPDATE baton_locks SET state = '{"seq":1,"ticket":0}' WHERE name = 'w'`); err != nil {
			t.Fatal(err)
		}
		ring()
	})
	raw.Close()
	// The watcher watches the doorbell itself; if it is removed, the new
	// one rings too.
	if err := os.Remove(path + "-wake"); err != nil {
		t.Fatal(err)
	}
	wokenBy("a ring of a new doorbell", ring)

	// Waits end with their context.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	for w.Wait(wctx) == nil {
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !sqlite.Watching(a.Path()) {
		t.Error("file-system watcher stopped while Stores of the file are open")
	}
	// A Watch outliving its Store still works, and stops with its Close.
	w2, err := b.Watch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := a.Acquire(ctx, &driver.Request{Name: "w", Owner: "holder2", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := w2.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	w2.Close()
	a.Close()
	if sqlite.Watching(a.Path()) {
		t.Error("file-system watcher still running after the file's last Store and Watch closed")
	}
}

func TestOddPath(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	dir := filepath.Join(t.TempDir(), "a dir%20with?odd#chars")
	path := filepath.Join(dir, "lo cks%3F.db")
	s := open(t, path, nil)
	if _, err := s.Acquire(ctx, &driver.Request{Name: "n", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at its path: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "lo cks%3F.db") {
			t.Errorf("unexpected file %q", e.Name())
		}
	}
	// A relative path names the same file as its absolute form.
	t.Chdir(dir)
	s2 := open(t, "lo cks%3F.db", nil)
	if s2.Path() != s.Path() {
		t.Errorf("relative path opened %q, want %q", s2.Path(), s.Path())
	}
	if hs, err := s2.List(ctx, &driver.Filter{Name: "n"}); err != nil || len(hs) != 1 {
		t.Errorf("List through the relative path = %v, %v", hs, err)
	}
}

// TestClockRestarted checks that entries renewed "later than now" (the
// monotonic clock restarted: a reboot whose boot id went unnoticed) are
// dropped, and the counters kept.
func TestClockRestarted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the store's clock is the wall clock here, which may go back")
	}
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	s := open(t, path, nil)
	sqlite.SetBootID(s, "same-boot")
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	future := `"created":"2200-01-01T00:00:00Z","renewed":"2200-01-01T00:00:00Z","expires":"2200-01-01T01:00:00Z"`
	state := `{"boot":"same-boot","seq":41,"ticket":7,"holders":[{"owner":"ghost","mode":1,"token":41,"ttl":3600000000000,` + future + `}]}`
	if _, err := raw.Exec(`INSERT INTO baton_locks (name, state) VALUES ('r', ?)`, state); err != nil {
		t.Fatal(err)
	}
	if hs, err := s.List(ctx, &driver.Filter{Name: "r", Expired: true}); err != nil || len(hs) != 1 || hs[0].Left > 0 {
		t.Errorf("List = %+v, %v; want the ghost, expired", hs, err)
	}
	g, err := s.Acquire(ctx, &driver.Request{Name: "r", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute})
	if err != nil || g.Token != 42 {
		t.Fatalf("Acquire = %+v, %v; want token 42", g, err)
	}
}

// TestModel checks the store, on the record layer, against lockstate.
func TestModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "model.db")
	drivertest.Model(t, drivertest.ModelConfig{Open: func(t testing.TB) driver.Store { return open(t, path, nil) }})
}

// Commits need no flush: a power loss may lose the last ones, counters
// included, but tokens after the reboot are above every token handed out
// before it, for names whose rows went back and names whose rows were lost.
func TestTokensAfterLostCommits(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.db")
	restore := sqlite.SetBoot("boot-1")
	grant := func(s *sqlite.Store, name string) uint64 {
		t.Helper()
		g, err := s.Acquire(ctx, &driver.Request{Name: name, Owner: "o", Mode: driver.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(ctx, []driver.Key{{Name: name, Owner: "o"}}); err != nil {
			t.Fatal(err)
		}
		return g.Token
	}
	s, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	grant(s, "kept")
	s.Close() // the last connection checkpoints the WAL into the file
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The commits the power loss will take.
	s, err = sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]uint64{"kept": grant(s, "kept"), "new": grant(s, "new")}
	s.Close()
	restore()
	for _, f := range []string{path + "-wal", path + "-shm"} {
		os.Remove(f)
	}
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	defer sqlite.SetBoot("boot-2")()
	s = open(t, path, nil)
	for name, tok := range lost {
		if got := grant(s, name); got <= tok {
			t.Errorf("%s: token %#x after the reboot, not above %#x, lost in the power loss", name, got, tok)
		}
	}
}

// A name's counter that reaches the end of its epoch's 2^32 tokens moves
// the file to the next epoch with a flushed commit before it hands out a
// token of that range: a power loss that takes the commits of those grants
// then still leaves the next boot's tokens above them.
func TestCounterPastItsEpoch(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "locks.db")
	restore := sqlite.SetBoot("boot-1")
	grant := func(s *sqlite.Store) uint64 {
		t.Helper()
		g, err := s.Acquire(ctx, &driver.Request{Name: "hot", Owner: "o", Mode: driver.Exclusive, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Release(ctx, []driver.Key{{Name: "hot", Owner: "o"}}); err != nil {
			t.Fatal(err)
		}
		return g.Token
	}
	s, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := sqlite.Epoch(s)
	if err := sqlite.SetCounter(ctx, s, "hot", (e+1)<<32-1); err != nil {
		t.Fatal(err)
	}
	s.Close() // the last connection checkpoints the WAL into the file
	// What the disk holds for sure: the file now, or, once the epoch is
	// raised, the file and WAL just after that flushed commit.
	read := func() map[string][]byte {
		files := map[string][]byte{}
		for _, f := range []string{path, path + "-wal"} {
			if b, err := os.ReadFile(f); err == nil {
				files[f] = b
			}
		}
		return files
	}
	durable := read()
	defer sqlite.AfterEpochRaise(func() { durable = read() })()
	s, err = sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	lost := max(grant(s), grant(s)) // tokens of the next epoch's range
	if lost < (e+1)<<32 {
		t.Fatalf("token %#x: the counter did not pass its epoch", lost)
	}
	s.Close()
	restore()
	// The power loss: only what was flushed is left.
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		os.Remove(f)
	}
	for f, b := range durable {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	defer sqlite.SetBoot("boot-2")()
	s = open(t, path, nil)
	if got := grant(s); got <= lost {
		t.Errorf("token %#x after the reboot, not above %#x, handed out before the power loss", got, lost)
	}
}

// holdAll takes each name for owner "o", and returns the renewals of
// those holds (TTL 2 minutes), their keys and their tokens by name.
func holdAll(ctx context.Context, t *testing.T, s driver.Store, names []string) ([]driver.Hold, []driver.Key, map[string]uint64) {
	t.Helper()
	var holds []driver.Hold
	var keys []driver.Key
	tokens := map[string]uint64{}
	for _, n := range names {
		g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "o", Mode: 1, TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire %q: %v", n, err)
		}
		tokens[n] = g.Token
		holds = append(holds, driver.Hold{Name: n, Owner: "o", TTL: 2 * time.Minute})
		keys = append(keys, driver.Key{Name: n, Owner: "o"})
	}
	return holds, keys, tokens
}

// A batch (Renew, Release) reads and writes its rows in one statement
// each: names that JSON must escape come back as they went in, and a name
// given twice in one batch is decided twice, as one at a time would.
func TestBatchRows(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	s := open(t, filepath.Join(t.TempDir(), "locks.db"), nil)
	names := []string{`a"b`, `x'y`, `c\d`, "ü/ß/😀", "[1,2]", `{"k":1}`, "tab\u2028sep", "<&>"}
	holds, keys, tokens := holdAll(ctx, t, s, names)
	gs, err := s.Renew(ctx, append(holds, driver.Hold{Name: "never", Owner: "o", TTL: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if gs[i] == nil || gs[i].Token != tokens[n] {
			t.Errorf("Renew %q: %+v, want the hold of token %d", n, gs[i], tokens[n])
		}
	}
	if gs[len(names)] != nil {
		t.Errorf("Renew of a name never held: %+v", gs[len(names)])
	}
	hs, err := s.List(ctx, &driver.Filter{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != len(names) {
		t.Errorf("List: %d holds, want %d", len(hs), len(names))
	}
	for _, h := range hs {
		if h.TTL != 2*time.Minute || tokens[h.Name] != h.Token {
			t.Errorf("List: %q TTL %v token %d, want the renewed hold", h.Name, h.TTL, h.Token)
		}
	}
	held, err := s.Release(ctx, append(keys, keys[0], driver.Key{Name: "never", Owner: "o"}))
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if !held[i] {
			t.Errorf("Release %q: not released", n)
		}
	}
	if held[len(names)] || held[len(names)+1] {
		t.Errorf("Release of %q again and of a name never held: %v", names[0], held[len(names):])
	}
	// The client refuses such names; the store must not let JSON change one.
	if _, err := s.Release(ctx, []driver.Key{{Name: "a\xffb", Owner: "o"}, {Name: "c", Owner: "o"}}); err == nil {
		t.Error("a batch with a name that is not UTF-8: no error")
	}
	for _, n := range names {
		g, err := s.Acquire(ctx, &driver.Request{Name: n, Owner: "p", Mode: 1, TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire %q after the release: %v", n, err)
		}
		if g.Token <= tokens[n] {
			t.Errorf("%q: token %d after %d", n, g.Token, tokens[n])
		}
	}
}

// TestLargeBatch: a batch large enough to be decoded on several cores
// renews and releases every name, and one invalid row in it fails the
// whole batch with an error naming the row, writing nothing.
func TestLargeBatch(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	s := open(t, path, nil)
	names := make([]string, 1000)
	for i := range names {
		names[i] = fmt.Sprintf("n%04d", i)
	}
	holds, keys, tokens := holdAll(ctx, t, s, names)
	gs, err := s.Renew(ctx, holds)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range holds {
		if gs[i] == nil || gs[i].Token != tokens[h.Name] {
			t.Fatalf("Renew %q: %+v, want the hold of token %d", h.Name, gs[i], tokens[h.Name])
		}
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec(`UPDATE baton_locks SET state = '{"seq":' WHERE name = 'n0777'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Release(ctx, keys); err == nil || !strings.Contains(err.Error(), `row "n0777"`) {
		t.Fatalf("Release of a batch with an invalid row: %v, want an error naming the row", err)
	}
	var held int
	if err := raw.QueryRow(`SELECT count(*) FROM baton_locks WHERE state LIKE '%"holders":%'`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 999 {
		t.Fatalf("after the failed Release, %d rows hold, want 999", held)
	}
	if _, err := raw.Exec(`DELETE FROM baton_locks WHERE name = 'n0777'`); err != nil {
		t.Fatal(err)
	}
	released, err := s.Release(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if released[i] != (k.Name != "n0777") {
			t.Errorf("Release %q: %v", k.Name, released[i])
		}
	}
}

// rows counts the rows of the default table of the file at path.
func rows(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM baton_locks`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReclaim: a reclaim deletes the rows of idle names, keeps those with
// holders, and no token is handed out twice: a name used again, by this
// Store or by another one of the file whose epoch dates from before the
// reclaim (another process), starts above every token it had.
func TestReclaim(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	a := open(t, path, nil)
	b := open(t, path, nil) // opened before the reclaim: its epoch is the old one
	req := func(name, owner string) *driver.Request {
		return &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute}
	}
	var last uint64
	for i := range 3 {
		g, err := a.Acquire(ctx, req("idle", fmt.Sprint("o", i)))
		if err != nil {
			t.Fatal(err)
		}
		last = g.Token
		if _, err := a.Release(ctx, []driver.Key{{Name: "idle", Owner: fmt.Sprint("o", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	held, err := a.Acquire(ctx, req("held", "h"))
	if err != nil {
		t.Fatal(err)
	}
	if n := rows(t, path); n != 3 {
		t.Fatalf("%d rows before the reclaim, want 3 (the epoch's, idle, held)", n)
	}
	n, err := sqlite.Reclaim(ctx, a, time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("Reclaim = %d, %v; want 1 row deleted", n, err)
	}
	if n := rows(t, path); n != 2 {
		t.Fatalf("%d rows after the reclaim, want 2", n)
	}
	if n, err := sqlite.Reclaim(ctx, a, time.Hour); err != nil || n != -1 {
		t.Fatalf("a second Reclaim within the period = %d, %v; want -1 (not run)", n, err)
	}
	for _, s := range []*sqlite.Store{b, a} {
		g, err := s.Acquire(ctx, req("idle", "again"))
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last {
			t.Fatalf("token %d after the reclaim, not above the name's last %d", g.Token, last)
		}
		last = g.Token
		if _, err := s.Release(ctx, []driver.Key{{Name: "idle", Owner: "again"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Renew(ctx, []driver.Hold{{Name: "held", Owner: "h", TTL: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	g, err := b.Acquire(ctx, req("held", "h"))
	if err != nil || g.Token != held.Token || !g.Extended {
		t.Fatalf("the held name after the reclaim: %+v, %v; want its hold, token %d", g, err, held.Token)
	}
}

// TestReclaimEvery: with Options.Reclaim, a Store reclaims on its own,
// and stops when it closes.
func TestReclaimEvery(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	s := open(t, path, &sqlite.Options{Reclaim: 50 * time.Millisecond})
	c := client(t, s, nil)
	for i := range 20 {
		l, err := c.TryLock(ctx, fmt.Sprint("n", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}
	for rows(t, path) > 1 {
		if ctx.Err() != nil {
			t.Fatalf("%d rows left", rows(t, path))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCancelledReads checks that reads whose context ends while they run
// leave their connections as they found them. A leaked statement keeps a
// read transaction open on a pooled connection: its later reads see an old
// snapshot, and its writes fail with SQLITE_BUSY_SNAPSHOT until the busy
// timeout (modernc.org/sqlite before v1.40 leaked one when the context
// ended just after the statement's first row).
func TestCancelledReads(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	path := filepath.Join(t.TempDir(), "locks.db")
	r, w := open(t, path, &sqlite.Options{BusyTimeout: time.Second}), open(t, path, nil)
	for i := range 20 {
		if _, err := w.Acquire(ctx, &driver.Request{Name: fmt.Sprint("n", i), Owner: "o", Mode: driver.Exclusive, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Second)
	for round := 0; time.Now().Before(deadline); round++ {
		// Reads cancelled at every point, from several goroutines, so that
		// contexts also end between a read's first row and its return.
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					rctx, cancel := context.WithTimeout(ctx, time.Duration((i*7+g*13)%120)*time.Microsecond)
					r.List(rctx, &driver.Filter{Prefix: "n"})
					cancel()
				}
			}()
		}
		wg.Wait()
		owner := fmt.Sprint("w", round)
		if _, err := w.Acquire(ctx, &driver.Request{Name: "x", Owner: owner, Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		// Every connection of r's pool (reads at once take different ones)
		// sees the new hold.
		errs := make(chan error, 4)
		for range 4 {
			go func() {
				hs, err := r.List(ctx, &driver.Filter{Name: "x"})
				if err == nil && (len(hs) != 1 || hs[0].Owner != owner) {
					err = fmt.Errorf("List = %+v, want the hold of %s: a read of an old snapshot", hs, owner)
				}
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if _, err := r.Release(ctx, []driver.Key{{Name: "x", Owner: owner}}); err != nil {
			t.Fatalf("round %d: a write after cancelled reads: %v", round, err)
		}
	}
}
