package baton_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mem"
)

func TestMemConformance(t *testing.T) {
	// A named mem store lives while a client has it open: keep one open so
	// that its fencing counters outlive the clients the suite closes.
	anchor := mem.Open("conformance")
	defer anchor.Close()
	drivertest.Run(t, drivertest.Config{
		Open: func(t testing.TB) driver.Store { return mem.Open("conformance") },
	})
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{"nope://x", "unknown store"},
		{"no-scheme", "has no scheme"},
		{"::", "invalid argument"},
	} {
		_, err := baton.Open(ctx, tc.url, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error containing %q", tc.url, err, tc.want)
		}
	}
	if _, err := baton.Open(ctx, "nope://user:secret@host/x", nil); !errors.Is(err, baton.ErrUnknownStore) ||
		strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "mem") {
		t.Errorf("unknown scheme: %v (want ErrUnknownStore, listing mem, hiding the password)", err)
	}
	// mem://NAME is shared by everyone who opens it; mem:// is private.
	a, err := baton.Open(ctx, "mem://shared-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _ := baton.Open(ctx, "mem://shared-test", nil)
	defer b.Close()
	p, _ := baton.Open(ctx, "mem://", nil)
	defer p.Close()
	l, err := a.TryLock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "x", nil); !errors.Is(err, baton.ErrLocked) {
		t.Errorf("second client of mem://shared-test: %v, want ErrLocked", err)
	}
	if _, err := p.TryLock(ctx, "x", nil); err != nil {
		t.Errorf("private mem:// store: %v", err)
	}
	l.Release(ctx)
}

func TestNewValidatesOptions(t *testing.T) {
	for _, o := range []*baton.Options{{TTL: -1}, {TTL: 1}, {MaxPoll: -1}} {
		if _, err := baton.New(mem.New(), o); !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", o, err)
		}
	}
	if _, err := baton.New(nil, nil); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("New(nil) = %v", err)
	}
}

func TestClosedClient(t *testing.T) {
	c, _ := baton.New(mem.New(), nil)
	c.Close()
	if _, err := c.Lock(context.Background(), "x", nil); !errors.Is(err, baton.ErrClosed) {
		t.Errorf("Lock after Close: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// The store keeps a lease with a lock-delay for its TTL plus the delay,
// also when RenewOwner renews it.
func TestLockDelayInEveryRenewal(t *testing.T) {
	ctx := context.Background()
	c, err := baton.New(mem.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	owner := baton.NewOwner()
	ttl, delay := time.Minute, 10*time.Second
	l, err := c.Lock(ctx, "x", &baton.LockOptions{Owner: owner, TTL: ttl, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		hs, err := c.Status(ctx, &baton.Filter{Name: "x"})
		if err != nil || len(hs) != 1 {
			t.Fatalf("%s: Status = %v, %v", when, hs, err)
		}
		if d := hs[0].Expires.Sub(hs[0].Renewed); d != ttl+delay {
			t.Errorf("%s: the store keeps the hold %v, want %v", when, d, ttl+delay)
		}
		if l.TTL() != ttl {
			t.Errorf("%s: lease TTL %v, want %v", when, l.TTL(), ttl)
		}
	}
	check("granted")
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	check("Renew")
	if _, err := c.RenewOwner(ctx, owner, ttl); err != nil {
		t.Fatal(err)
	}
	check("RenewOwner")
}

// Do releases at once a lock whose minimum hold passed while its function
// ran.
func TestDoReleasesAfterTheMinimumHold(t *testing.T) {
	ctx := context.Background()
	c, err := baton.New(mem.New(), &baton.Options{TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Do(ctx, "x", &baton.LockOptions{MinHold: 10 * time.Millisecond}, func(ctx context.Context, l *baton.Lease) error {
		time.Sleep(250 * time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v", err)
	}
	l, err := c.TryLock(ctx, "x", nil)
	if err != nil {
		t.Fatalf("TryLock after Do = %v, want the lock released", err)
	}
	l.Release(ctx)
}

// A lease's context is made when first asked for, so it must end with the
// lease whenever that is: asked for before the end, after it, or while it
// ends (run with -race).
func TestLeaseContextAnyTime(t *testing.T) {
	ctx := context.Background()
	c, _ := baton.New(mem.New(), nil)
	defer c.Close()
	check := func(what string, lctx context.Context) {
		t.Helper()
		select {
		case <-lctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the context did not end with the lease", what)
		}
		if !errors.Is(context.Cause(lctx), baton.ErrReleased) {
			t.Errorf("%s: cause %v, want ErrReleased", what, context.Cause(lctx))
		}
	}
	l, err := c.Lock(ctx, "ctx-before", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := l.Context()
	if before.Err() != nil {
		t.Fatal("the context ended while the lease is held")
	}
	if l.Context() != before {
		t.Error("Context returned another context the second time")
	}
	l.Release(ctx)
	check("asked for before the release", before)

	l, err = c.Lock(ctx, "ctx-after", nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	check("asked for after the release", l.Context())

	for i := range 50 {
		l, err := c.Lock(ctx, "ctx-during", nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan context.Context)
		go func() { got <- l.Context() }()
		if i%2 == 0 {
			l.Release(ctx)
			check("asked for while it was released", <-got)
		} else {
			lctx := <-got
			l.Release(ctx)
			check("asked for while it was released", lctx)
		}
	}
}
