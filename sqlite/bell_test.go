//go:build unix

package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/sqlite"
)

// A commit rings the doorbells of the processes whose queued requests it
// lets in, and no other process's: not a waiter of another name, nor one
// further back in the queue. Each Store here has the process-wide state
// of a process of its own.
func TestRingsWhomItLetsIn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx := ctxFor(t, 30*time.Second)
	path := filepath.Join(t.TempDir(), "locks.db")
	x, err := sqlite.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	apart := func(tag string) *sqlite.Store {
		s, err := sqlite.OpenApart(ctx, path, nil, tag)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	y, v, z := apart("y"), apart("v"), apart("z")
	for _, name := range []string{"a", "b"} {
		if _, err := x.Acquire(ctx, &driver.Request{Name: name, Owner: "x", Mode: driver.Exclusive, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	// What a process that died left: a doorbell nobody reads.
	dead := path + "-wake-" + strings.Repeat("a", 26)
	if err := unix.Mkfifo(dead, 0o644); err != nil {
		t.Fatal(err)
	}

	// y and then v wait for a, z for b, queued as Lock queues them.
	wait := func(s *sqlite.Store, name, owner string) (*driver.Request, driver.Watch) {
		t.Helper()
		req := &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: time.Minute, Queue: true, QueueTTL: time.Minute}
		if _, err := s.Acquire(ctx, req); !errors.Is(err, driver.ErrNotGranted) {
			t.Fatalf("%s's Acquire of %s: %v, want refused", owner, name, err)
		}
		w, err := s.Watch(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return req, w
	}
	ya, wy := wait(y, "a", "y")
	_, wv := wait(v, "a", "v")
	_, wz := wait(z, "b", "z")
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's doorbell was not removed: %v", err)
	}
	for _, s := range []*sqlite.Store{y, v, z} {
		if sqlite.FollowsCommon(s) {
			t.Error("a waiter whose request its process queued follows the common doorbell")
		}
	}
	woken := func(w driver.Watch, who string) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.Wait(wctx); err != nil {
			t.Fatalf("%s's waiter not woken: %v", who, err)
		}
	}
	heard := func() [3]int64 { return [3]int64{sqlite.Heard(y), sqlite.Heard(v), sqlite.Heard(z)} }
	settle := func() { time.Sleep(200 * time.Millisecond) } // for a stray ring to arrive

	h0 := heard()
	if _, err := x.Release(ctx, []driver.Key{{Name: "a", Owner: "x"}}); err != nil {
		t.Fatal(err)
	}
	woken(wy, "y")
	settle()
	if h := heard(); h[0] == h0[0] || h[1] != h0[1] || h[2] != h0[2] {
		t.Errorf("x's release of a (letting y in) was heard by y, v, z: %d, %d, %d times; want y only", h[0]-h0[0], h[1]-h0[1], h[2]-h0[2])
	}

	// y takes a, which lets nobody in; then its release lets v in.
	ya.Queue = false
	if _, err := y.Acquire(ctx, ya); err != nil {
		t.Fatal(err)
	}
	settle()
	h1 := heard()
	if h1[1] != h0[1] || h1[2] != h0[2] {
		t.Errorf("y's grant was heard by v or z")
	}
	if _, err := y.Release(ctx, []driver.Key{{Name: "a", Owner: "y"}}); err != nil {
		t.Fatal(err)
	}
	woken(wv, "v")
	settle()
	if h := heard(); h[1] == h1[1] || h[2] != h1[2] {
		t.Errorf("y's release of a (letting v in) was heard by v, z: %d, %d times; want v only", h[1]-h1[1], h[2]-h1[2])
	}
	if _, err := x.Release(ctx, []driver.Key{{Name: "b", Owner: "x"}}); err != nil {
		t.Fatal(err)
	}
	woken(wz, "z")

	for _, c := range []interface{ Close() error }{wy, wv, wz, y, v, z} {
		c.Close()
	}
	if left, _ := filepath.Glob(path + "-wake-*"); len(left) > 0 {
		t.Errorf("doorbells left after their processes' Stores closed: %v", left)
	}
}
