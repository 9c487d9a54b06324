package baton_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mem"
)

// events records a client's events.
type events struct {
	mu sync.Mutex
	es []baton.Event
}

func (e *events) add(ev baton.Event) {
	e.mu.Lock()
	e.es = append(e.es, ev)
	e.mu.Unlock()
}

func (e *events) of(kind baton.EventKind) []baton.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []baton.Event
	for _, ev := range e.es {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// A waiting Lock says so; renewals carry the time the lease had left;
// the end of a lease carries how long it was held.
func TestEventsSayWaitLeftHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ev events
	// TTL 600ms: renewed by 200ms, before the release at 400ms, with room
	// for a stalled renewal on a loaded machine (300ms lost one in CI).
	o := &baton.Options{TTL: 600 * time.Millisecond, MaxPoll: 20 * time.Millisecond, OnEvent: ev.add}
	a, err := baton.Open(ctx, "mem://events", o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	l, err := a.Lock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(400 * time.Millisecond)
		l.Release(ctx)
	}()
	l2, err := a.Lock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	l2.Release(ctx)
	// The first Release reports its event after the store let go, so the
	// second lease may be granted and released before that event is out.
	<-released
	if w := ev.of(baton.EventWaiting); len(w) != 1 || w[0].Name != "x" || w[0].Owner != l2.Owner() {
		t.Errorf("waiting events %+v, want one for the second Lock", w)
	}
	rs := ev.of(baton.EventRenewed)
	if len(rs) == 0 {
		t.Fatal("no renewal in 400ms of a 600ms lease")
	}
	for _, r := range rs {
		if r.Left <= 0 || r.Left > 600*time.Millisecond {
			t.Errorf("renewal with %v left, want within (0, TTL]", r.Left)
		}
	}
	rel := ev.of(baton.EventReleased)
	var first *baton.Event
	for i := range rel {
		if rel[i].Owner == l.Owner() {
			first = &rel[i]
		}
	}
	if len(rel) != 2 || first == nil || first.Held < 350*time.Millisecond {
		t.Errorf("released events %+v, want two, the first lease's held about 400ms", rel)
	}
}

// Health turns unhealthy when renewals come with little time left: here a
// store that stops answering renewals.
func TestHealth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const ttl = time.Minute
	f := drivertest.NewFaulty(mem.Open("health"))
	k := baton.NewFakeClock()
	c, err := baton.NewWithClock(f, &baton.Options{TTL: ttl}, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Health(1.0 / 3); err != nil {
		t.Errorf("Health with no lease: %v", err)
	}
	l, err := c.Lock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	k.Advance(3 * ttl / 4) // renewed in time, with two thirds left
	if err := c.Health(1.0 / 3); err != nil {
		t.Errorf("Health while renewing in time: %v", err)
	}
	f.SetDown(true) // renewals fail from now on
	for {
		if err := c.Health(1.0 / 3); err != nil && strings.Contains(err.Error(), `"x"`) {
			break
		}
		if l.Err() != nil {
			t.Fatal("lease ended before Health reported it thin")
		}
		k.Advance(ttl / 100)
	}
	k.Advance(ttl)
	select {
	case <-l.Done():
	default:
		t.Fatal("lease still held a TTL after renewals began to fail")
	}
}

// Options.Logger gets the library's own diagnostics.
func TestLogger(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil)
	f := drivertest.NewFaulty(mem.Open("logger"))
	k := baton.NewFakeClock()
	const ttl = 200 * time.Millisecond
	c, err := baton.NewWithClock(f, &baton.Options{TTL: ttl, Logger: slog.New(h)}, k)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Lock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.SetDown(true)
	k.Advance(ttl)
	select {
	case <-l.Done():
	default:
		t.Fatal("lease still held a TTL after renewals began to fail")
	}
	if !errors.Is(l.Err(), baton.ErrLeaseLost) {
		t.Fatalf("lease ended with %v", l.Err())
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"lease renewal failed", "lease lost", "lock=x"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
