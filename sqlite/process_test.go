package sqlite_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/sqlite"
)

// The tests below run copies of the test binary as other processes: the
// child runs TestHelperProcess, which does what helperEnv says.
const helperEnv = "BATON_SQLITE_HELPER"

// child starts the test binary as a helper process doing mode on db.
func child(t *testing.T, mode, db string, env ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "BATON_SQLITE_DB="+db)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

// expect reads lines from r until one starts with prefix, and returns the
// rest of it.
func expect(t *testing.T, r *bufio.Reader, prefix string) string {
	t.Helper()
	type res struct {
		s   string
		err error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				ch <- res{err: err}
				return
			}
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				ch <- res{s: strings.TrimSpace(rest)}
				return
			}
		}
	}()
	select {
	case x := <-ch:
		if x.err != nil {
			t.Fatalf("helper exited before printing %q: %v", prefix, x.err)
		}
		return x.s
	case <-time.After(30 * time.Second):
		t.Fatalf("helper did not print %q", prefix)
	}
	return ""
}

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for other tests")
	}
	if err := helper(mode, os.Getenv("BATON_SQLITE_DB")); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(mode, db string) error {
	ctx := context.Background()
	switch mode {
	case "contend":
		// Take the lock 25 times, logging each critical section.
		s, err := sqlite.Open(ctx, db, nil)
		if err != nil {
			return err
		}
		c, err := baton.New(s, &baton.Options{TTL: 10 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		log, err := os.OpenFile(os.Getenv("BATON_SQLITE_LOG"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		defer log.Close()
		for range 25 {
			lctx, cancel := context.WithTimeout(ctx, 60*time.Second)
			l, err := c.Lock(lctx, "contend", nil)
			cancel()
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(log, "start %d %d\n", l.Token(), os.Getpid()); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
			if err := l.Err(); err != nil {
				return fmt.Errorf("lease lost in the critical section: %w", err)
			}
			if _, err := fmt.Fprintf(log, "end %d %d\n", l.Token(), os.Getpid()); err != nil {
				return err
			}
			if err := l.Release(ctx); err != nil {
				return err
			}
		}
		return nil
	case "midtx":
		// Begin a write transaction, write, and wait to be killed.
		raw, err := sql.Open("sqlite", "file:"+db+"?_txlock=immediate&_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		tx, err := raw.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(`UPDATE baton_locks SET state = 'garbage' WHERE name = 'x'`); err != nil {
			return err
		}
		for i := range 2000 { // more than fits in the page cache
			if _, err := tx.Exec(`INSERT INTO baton_locks (name, state) VALUES (?, ?)`,
				fmt.Sprint("junk", i), strings.Repeat("j", 1000)); err != nil {
				return err
			}
		}
		fmt.Println("ready")
		time.Sleep(time.Hour)
		return nil
	case "holder":
		// Take the lock with a short TTL, say so, and wait to be killed.
		s, err := sqlite.Open(ctx, db, nil)
		if err != nil {
			return err
		}
		c, err := baton.New(s, nil)
		if err != nil {
			return err
		}
		l, err := c.TryLock(ctx, "crash", &baton.LockOptions{TTL: 300 * time.Millisecond})
		if err != nil {
			return err
		}
		fmt.Println("token", l.Token())
		time.Sleep(time.Hour)
		return nil
	case "sessionholder":
		// Take the lock in the Store's session, say so, and wait to be
		// killed.
		s, err := sqlite.Open(ctx, db, nil)
		if err != nil {
			return err
		}
		c, err := baton.New(s, &baton.Options{TTL: 300 * time.Millisecond})
		if err != nil {
			return err
		}
		// The Store starts its session after its first grant; the
		// client offers a lease to it while it holds another.
		if _, err := c.TryLock(ctx, "first", nil); err != nil {
			return err
		}
		if _, err := c.TryLock(ctx, "second", nil); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
		l, err := c.TryLock(ctx, "crash", nil)
		if err != nil {
			return err
		}
		fmt.Println("token", l.Token())
		time.Sleep(time.Hour)
		return nil
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

// TestKilledSessionHolder checks that a hold kept past its TTL by its
// process's session is let go when that process dies.
func TestKilledSessionHolder(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	db := filepath.Join(t.TempDir(), "locks.db")
	c := client(t, open(t, db, nil), nil)
	cmd, out := child(t, "sessionholder", db)
	token, err := strconv.ParseUint(expect(t, out, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past the hold's own TTL: only its session keeps it
	if _, err := c.TryLock(ctx, "crash", nil); !errors.Is(err, baton.ErrLocked) {
		t.Fatalf("TryLock of a hold its live process keeps: %v, want ErrLocked", err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	l, err := c.Lock(ctx, "crash", nil)
	if err != nil {
		t.Fatalf("Lock after the holder died: %v", err)
	}
	if l.Token() <= token {
		t.Errorf("token %d after the dead holder's %d", l.Token(), token)
	}
}

func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 4 processes")
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "locks.db")
	logPath := filepath.Join(dir, "log")
	if err := os.WriteFile(logPath, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Create the file first, so that all children find it ready.
	open(t, db, nil).Close()
	var cmds []*exec.Cmd
	for range 4 {
		cmd, out := child(t, "contend", db, "BATON_SQLITE_LOG="+logPath)
		go io.Copy(io.Discard, out)
		cmds = append(cmds, cmd)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cmds))
	for i, cmd := range cmds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Wait()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("child %d: %v", i, err)
		}
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 200 {
		t.Fatalf("%d log lines, want 200", len(lines))
	}
	var last uint64
	pids := map[string]int{}
	for i := 0; i < len(lines); i += 2 {
		var start, end string
		var t1, t2 uint64
		var p1, p2 string
		if _, err := fmt.Sscan(lines[i], &start, &t1, &p1); err != nil || start != "start" {
			t.Fatalf("line %d: %q: want a start", i, lines[i])
		}
		if _, err := fmt.Sscan(lines[i+1], &end, &t2, &p2); err != nil || end != "end" || t2 != t1 || p2 != p1 {
			t.Fatalf("line %d: %q after %q: critical sections overlap", i+1, lines[i+1], lines[i])
		}
		if t1 <= last {
			t.Fatalf("line %d: token %d after %d", i, t1, last)
		}
		last = t1
		pids[p1]++
	}
	if len(pids) != 4 {
		t.Errorf("sections by %d processes, want 4", len(pids))
	}
	// Each waiting process made a doorbell of its own, and removed it
	// when it closed.
	if left, _ := filepath.Glob(db + "-wake-*"); len(left) > 0 {
		t.Errorf("doorbells left by processes that closed: %v", left)
	}
}

func TestKilledMidTransaction(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	db := filepath.Join(t.TempDir(), "locks.db")
	s := open(t, db, nil)
	req := &driver.Request{Name: "x", Owner: "a", Mode: driver.Exclusive, TTL: time.Minute}
	g, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	cmd, out := child(t, "midtx", db)
	expect(t, out, "ready")
	// The child holds the write lock: writes wait, and give up with ctx.
	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = s.Release(sctx, []driver.Key{{Name: "x", Owner: "a"}})
	cancel()
	if err == nil {
		t.Fatal("Release succeeded while another process held the write lock")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	hs, err := s.List(ctx, &driver.Filter{Name: "x"})
	if err != nil || len(hs) != 1 || hs[0].Owner != "a" || hs[0].Token != g.Token {
		t.Fatalf("after the kill, List = %+v, %v", hs, err)
	}
	held, err := s.Release(ctx, []driver.Key{{Name: "x", Owner: "a"}})
	if err != nil || !held[0] {
		t.Fatalf("Release = %v, %v", held, err)
	}
	g2, err := s.Acquire(ctx, &driver.Request{Name: "x", Owner: "b", Mode: driver.Exclusive, TTL: time.Minute})
	if err != nil || g2.Token != g.Token+1 {
		t.Fatalf("Acquire = %+v, %v; want token %d", g2, err, g.Token+1)
	}
	if hs, err := s.List(ctx, &driver.Filter{Prefix: "junk"}); err != nil || len(hs) != 0 {
		t.Errorf("rows of the killed transaction: %v, %v", len(hs), err)
	}
	raw, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	var check string
	if err := raw.QueryRow(`SELECT count(*) FROM baton_locks WHERE name <> ''`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d rows, %v; want 1", n, err)
	}
	if err := raw.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Errorf("integrity_check: %q, %v", check, err)
	}
}

func TestCrashedHolder(t *testing.T) {
	ctx := ctxFor(t, 30*time.Second)
	db := filepath.Join(t.TempDir(), "locks.db")
	c := client(t, open(t, db, nil), nil)
	cmd, out := child(t, "holder", db)
	token, err := strconv.ParseUint(expect(t, out, "token"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// The child's hold as last renewed: the lock cannot be free before.
	st, err := c.Status(ctx, &baton.Filter{Name: "crash", Expired: true})
	if err != nil || len(st) != 1 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	l, err := c.Lock(ctx, "crash", nil)
	if err != nil {
		t.Fatalf("Lock after the holder died: %v", err)
	}
	if l.Token() <= token {
		t.Errorf("token %d after the dead holder's %d", l.Token(), token)
	}
	if created := l.Info().Created; created.Before(st[0].Expires) {
		t.Errorf("granted at %v, before the dead holder's hold expired at %v", created, st[0].Expires)
	}
}
