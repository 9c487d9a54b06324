package drivertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// askWithin is how long a holder that follows asks may take to see one:
// the store's notification, or a read every MaxPoll of the suite's clients.
func (s *suite) askWithin() time.Duration { return s.d(3 * time.Second) }

// askClient is a client that reads asks often on stores that cannot notify.
func (s *suite) askClient(t testing.TB) *baton.Client {
	return s.client(t, &baton.Options{MaxPoll: s.d(50 * time.Millisecond)})
}

// waitAsked waits for l to be told of an ask. When it is not told in
// time it says what it can of why: whether the lease is still held,
// whether the ask's hold is in the store (a read by another client),
// and whether the ask came late or not at all.
func (s *suite) waitAsked(t testing.TB, l *baton.Lease, what string) *baton.AskedError {
	t.Helper()
	within := s.askWithin()
	start := time.Now()
	select {
	case <-l.Asked():
	case <-time.After(within):
		ctx, cancel := context.WithTimeout(context.Background(), s.d(10*time.Second))
		defer cancel()
		// The companion name that holds a lock's asks (see askName), read
		// from the store itself: Status refuses the name.
		st := s.cfg.Open(t)
		hs, err := st.List(ctx, &driver.Filter{Name: "\x01ask\x01" + l.Name()})
		st.Close()
		asks := make([]string, 0, len(hs))
		for _, h := range hs {
			asks = append(asks, fmt.Sprintf("%v left %v", h.Meta, h.Left))
		}
		late := "not told within a further 10s"
		select {
		case <-l.Asked():
			late = fmt.Sprintf("told after %v", time.Since(start))
		case <-ctx.Done():
		}
		t.Fatalf("%s: the holder (token %d) was not told of the ask within %v: %s; lease error %v; asks in the store then: %v (read error %v)",
			what, l.Token(), within, late, l.Err(), asks, err)
	}
	var ae *baton.AskedError
	if err := l.AskCause(); !errors.As(err, &ae) || !errors.Is(err, baton.ErrAsked) {
		t.Fatalf("%s: AskCause() = %v, want an *AskedError", what, err)
	}
	return ae
}

func notAsked(t testing.TB, wait time.Duration, l *baton.Lease, what string) {
	t.Helper()
	select {
	case <-l.Asked():
		t.Fatalf("%s: the holder was told of an ask (%v)", what, l.AskCause())
	case <-time.After(wait):
	}
}

// ask checks Client.Ask: the holders of the moment are told, with the
// reason, and keep the lock; a later holder is not told of an earlier
// ask; nobody is asked on a free name; asks are not listed; Do with
// Revocable cancels its function with the ask.
func (s *suite) ask(t *testing.T) {
	ctx := s.ctx(t)
	n := name(t)
	a, b := s.askClient(t), s.askClient(t)

	if got, err := b.Ask(ctx, n, &baton.AskOptions{Reason: "nobody"}); err != nil || got != 0 {
		t.Fatalf("Ask of a free name = %d, %v; want 0, nil", got, err)
	}

	l := mustTry(t, ctx, a, n, nil)
	l.Asked() // follow asks from now on
	notAsked(t, s.d(200*time.Millisecond), l, "before any ask")
	if got, err := b.Ask(ctx, n, &baton.AskOptions{Reason: "maintenance at 10:00"}); err != nil || got != 1 {
		t.Fatalf("Ask = %d, %v; want 1, nil", got, err)
	}
	ae := s.waitAsked(t, l, "exclusive holder")
	if ae.Reason != "maintenance at 10:00" || ae.Name != n {
		t.Errorf("AskCause() = %+v, want the reason and the lock's name", ae)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("asked lease ended: %v (an ask forces nothing)", err)
	}
	mustBeLocked(t, ctx, b, n, nil)

	// Asks are nobody's locks in listings.
	for _, f := range []*baton.Filter{{Prefix: n}, {}, {Owner: l.Owner()}} {
		hs, err := b.Status(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if !strings.HasPrefix(h.Name, "drivertest/") && strings.ContainsRune(h.Name, '\x01') {
				t.Errorf("Status(%+v) lists an ask: %q", f, h.Name)
			}
		}
	}

	// A later holder is not asked by the earlier ask.
	release(t, ctx, l)
	l2 := mustTry(t, ctx, a, n, nil)
	l2.Asked()
	notAsked(t, s.d(500*time.Millisecond), l2, "a holder granted after the ask")
	if got, err := b.Ask(ctx, n, nil); err != nil || got != 1 {
		t.Fatalf("second Ask = %d, %v; want 1, nil", got, err)
	}
	if ae := s.waitAsked(t, l2, "the new holder, asked anew"); ae.Reason != "" {
		t.Errorf("reason %q, want none", ae.Reason)
	}
	release(t, ctx, l2)

	// Every shared holder is asked.
	r1 := mustTry(t, ctx, a, n, &baton.LockOptions{Shared: true})
	r2 := mustTry(t, ctx, b, n, &baton.LockOptions{Shared: true})
	if got, err := s.askClient(t).Ask(ctx, n, &baton.AskOptions{Reason: "both"}); err != nil || got != 2 {
		t.Fatalf("Ask of two shared holders = %d, %v; want 2, nil", got, err)
	}
	s.waitAsked(t, r1, "first shared holder")
	s.waitAsked(t, r2, "second shared holder")
	release(t, ctx, r1)
	release(t, ctx, r2)

	// Do with Revocable: the ask cancels fn's context, with the ask as
	// its cause, and Do's error says so.
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Do(ctx, n, &baton.LockOptions{Revocable: true}, func(fctx context.Context, _ *baton.Lease) error {
			close(started)
			<-fctx.Done()
			return context.Cause(fctx)
		})
	}()
	<-started
	if got, err := b.Ask(ctx, n, &baton.AskOptions{Reason: "deploy"}); err != nil || got != 1 {
		t.Fatalf("Ask of a Do = %d, %v; want 1, nil", got, err)
	}
	select {
	case err := <-done:
		var ae *baton.AskedError
		if !errors.As(err, &ae) || ae.Reason != "deploy" {
			t.Errorf("Do = %v, want the *AskedError of the ask", err)
		}
	case <-time.After(s.askWithin() + s.d(time.Second)):
		t.Fatal("Do's function was not cancelled by the ask")
	}
	mustTry(t, ctx, b, n, nil) // Do released it

	// Bad input.
	for _, tc := range []struct {
		name string
		o    *baton.AskOptions
	}{
		{"", nil},
		{"bad\x00name", nil},
		{n, &baton.AskOptions{Reason: strings.Repeat("r", baton.MaxReasonLen+1)}},
		{n, &baton.AskOptions{TTL: -time.Second}},
		{n, &baton.AskOptions{Reason: "red \x1b[31malert"}},
		{n, &baton.AskOptions{Reason: "two\nlines"}},
	} {
		if _, err := b.Ask(ctx, tc.name, tc.o); !errors.Is(err, baton.ErrInvalid) {
			t.Errorf("Ask(%q, %+v): %v, want ErrInvalid", tc.name, tc.o, err)
		}
	}
}

// handOver checks Election.HandOver: the leader's Run is cancelled with the
// ask and resigns, and the preferred candidate leads next, even when
// another candidate waited longer.
func (s *suite) handOver(t *testing.T) {
	ctx := s.ctx(t)
	n := name(t)
	ttl := s.d(2 * time.Second)
	type run struct {
		e       *baton.Election
		leading chan uint64
		asked   chan error
	}
	var runs []*run
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	start := func(i int) *run {
		e, err := s.askClient(t).Election(n, &baton.ElectionOptions{TTL: ttl, Owner: baton.NewOwner()})
		if err != nil {
			t.Fatal(err)
		}
		r := &run{e: e, leading: make(chan uint64, 10), asked: make(chan error, 10)}
		runs = append(runs, r)
		go e.Run(rctx, func(fctx context.Context, l *baton.Lease) error {
			r.leading <- l.Token()
			<-fctx.Done()
			if err := context.Cause(fctx); errors.Is(err, baton.ErrAsked) {
				r.asked <- err
			}
			return context.Cause(fctx)
		})
		return r
	}
	leads := func(r *run, what string) uint64 {
		t.Helper()
		select {
		case tok := <-r.leading:
			return tok
		case <-time.After(s.d(10 * time.Second)):
			t.Fatalf("%s: did not lead", what)
		}
		return 0
	}
	r0 := start(0)
	leads(r0, "the first candidate")
	r1 := start(1)
	waitQueued(t, ctx, s.client(t, nil), n, 1)
	r2 := start(2)
	waitQueued(t, ctx, s.client(t, nil), n, 2)

	e, err := s.client(t, nil).Election(n, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.HandOver(ctx, r2.e.Owner(), &baton.AskOptions{Reason: "drain node 0", TTL: s.d(10 * time.Second)}); err != nil {
		t.Fatalf("HandOver: %v", err)
	}
	select {
	case err := <-r0.asked:
		var ae *baton.AskedError
		if !errors.As(err, &ae) || ae.Prefer != r2.e.Owner() || ae.Reason != "drain node 0" {
			t.Errorf("the leader's cause %v, want the hand-over to candidate 2", err)
		}
	case <-time.After(s.askWithin()):
		t.Fatal("the leader was not asked to hand over")
	}
	tok := leads(r2, "the preferred candidate")
	select {
	case <-r1.leading:
		t.Error("candidate 1 led (ran its function) during the hand-over to candidate 2")
	default:
	}
	ld, err := e.Leader(ctx)
	if err != nil || ld.Token != tok || ld.Owner != r2.e.Owner() {
		t.Errorf("Leader() = %+v, %v; want candidate 2 with token %d", ld, err, tok)
	}

	if err := e.HandOver(ctx, "", nil); !errors.Is(err, baton.ErrInvalid) {
		t.Errorf("HandOver to nobody: %v, want ErrInvalid", err)
	}
	rcancel()
}
