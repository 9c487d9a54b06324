package sessions

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fake is a store of sessions in memory, by the local clock.
type fake struct {
	mu      sync.Mutex
	expires map[string]time.Time
	renews  int
	ended   []string
	fail    error         // returned by every call while set
	lose    bool          // renewals find the session gone
	gate    chan struct{} // renewals wait for it to close, if set
	waiting int           // renewals waiting for gate
}

func (f *fake) KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error) {
	f.mu.Lock()
	if g := f.gate; g != nil && !create {
		f.waiting++
		f.mu.Unlock()
		<-g // whatever ctx says: a store's call in flight ends when it ends
		f.mu.Lock()
		f.waiting--
	}
	defer f.mu.Unlock()
	if f.fail != nil {
		return false, f.fail
	}
	now := time.Now()
	if f.expires == nil {
		f.expires = map[string]time.Time{}
	}
	if !create {
		f.renews++
		if e, ok := f.expires[id]; !ok || !e.After(now) || f.lose {
			return false, nil
		}
	}
	f.expires[id] = now.Add(ttl)
	return true, nil
}

func (f *fake) EndSession(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.expires, id)
	f.ended = append(f.ended, id)
	return nil
}

func (f *fake) set(fn func(f *fake)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// waitSession waits for k's session of ttl.
func waitSession(t *testing.T, k *Keeper, ttl time.Duration) *Session {
	t.Helper()
	if x := k.Session(ttl, true); x != nil {
		return x
	}
	for range 200 {
		time.Sleep(5 * time.Millisecond)
		if x := k.Session(ttl, false); x != nil {
			return x
		}
	}
	t.Fatal("no session made")
	return nil
}

func TestKeeper(t *testing.T) {
	defer goleak.VerifyNone(t)
	f := &fake{}
	k := New(f)
	ttl := 300 * time.Millisecond
	if x := k.Session(ttl, false); x != nil {
		t.Fatal("a session before any grant asked for one")
	}
	x := waitSession(t, k, ttl)
	if k.Session(ttl, false) != x {
		t.Error("another session of the same TTL")
	}
	if y := waitSession(t, k, 2*ttl); y == x {
		t.Error("one session for two TTLs")
	}
	time.Sleep(3 * ttl)
	f.set(func(f *fake) {
		if f.renews < 6 || f.renews > 20 {
			t.Errorf("%d renewals of two sessions in 3 TTLs, want about one every third of each's TTL", f.renews)
		}
	})
	if d := time.Until(x.Deadline()); d < ttl/2 || d > ttl {
		t.Errorf("a live session's deadline is %v ahead, want within its TTL %v and past half of it", d, ttl)
	}
	k.Close()
	select {
	case <-x.Done():
	default:
		t.Error("Close did not end the session")
	}
	if !errors.Is(x.Err(), ErrEnded) || x.Deadline().After(time.Now()) {
		t.Errorf("after Close: Err %v, deadline %v ahead", x.Err(), time.Until(x.Deadline()))
	}
	f.set(func(f *fake) {
		if len(f.ended) != 2 || len(f.expires) != 0 {
			t.Errorf("after Close: %d sessions ended, %d left in the store; want 2, 0", len(f.ended), len(f.expires))
		}
	})
	if k.Session(ttl, true) != nil {
		t.Error("a session after Close")
	}
}

// TestKeeperLost: a session the store no longer has ends at once; one the
// store cannot be reached about ends at its deadline; either way the next
// grant starts a new one.
func TestKeeperLost(t *testing.T) {
	defer goleak.VerifyNone(t)
	ttl := 300 * time.Millisecond
	for _, c := range []struct {
		name  string
		fault func(f *fake)
	}{
		{"gone", func(f *fake) { f.lose = true }},
		{"unreachable", func(f *fake) { f.fail = errors.New("down") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fake{}
			k := New(f)
			defer k.Close()
			x := waitSession(t, k, ttl)
			f.set(c.fault)
			select {
			case <-x.Done():
			case <-time.After(2 * ttl):
				t.Fatal("the session did not end")
			}
			if !errors.Is(x.Err(), ErrEnded) {
				t.Errorf("Err %v, want ErrEnded", x.Err())
			}
			if c.name == "unreachable" && time.Now().Before(x.Deadline()) {
				t.Error("ended before its deadline though the store only failed to answer")
			}
			// Its record goes, in the store and in the store's client.
			for i := 0; ; i++ {
				f.mu.Lock()
				gone := slices.Contains(f.ended, x.ID())
				f.mu.Unlock()
				if gone {
					break
				}
				if i == 100 {
					t.Fatal("the ended session's record was not deleted")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if k.Session(ttl, false) != nil {
				t.Error("an ended session still offered")
			}
			f.set(func(f *fake) { f.lose, f.fail = false, nil })
			if y := waitSession(t, k, ttl); y == x {
				t.Error("the ended session came back")
			}
		})
	}
}

// TestKeeperEndsAtDeadline: a session whose store fails fast ends at its
// deadline, not at the first retry after it: at this TTL retries are a
// second apart, and the one after the deadline would come some 430ms past
// it, past the store's expiry (a hundredth of the TTL after the deadline).
func TestKeeperEndsAtDeadline(t *testing.T) {
	if testing.Short() {
		t.Skip("a TTL of 10s")
	}
	defer goleak.VerifyNone(t)
	f := &fake{}
	k := New(f)
	defer k.Close()
	ttl := 10 * time.Second
	x := waitSession(t, k, ttl)
	f.set(func(f *fake) { f.fail = errors.New("down") })
	deadline := x.Deadline()
	select {
	case <-x.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the session did not end")
	}
	if late := time.Since(deadline); late > 200*time.Millisecond {
		t.Errorf("the session ended %v past its deadline", late)
	}
}

// TestKeeperStop: Stop waits for a renewal in flight, and then neither
// renews the session nor deletes its record, even when that renewal
// found it ended (as it does once its client's release has begun); the
// session ends and is offered no more.
func TestKeeperStop(t *testing.T) {
	defer goleak.VerifyNone(t)
	f := &fake{}
	k := New(f)
	defer k.Close()
	ttl := 300 * time.Millisecond
	x := waitSession(t, k, ttl)
	gate := make(chan struct{})
	f.set(func(f *fake) { f.gate, f.lose = gate, true })
	for i := 0; ; i++ {
		f.mu.Lock()
		w := f.waiting
		f.mu.Unlock()
		if w > 0 {
			break
		}
		if i == 100 {
			t.Fatal("no renewal")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := k.Stop(ctx, x); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a renewal in flight past ctx: %v, want the deadline", err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- k.Stop(context.Background(), x) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a renewal was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	select {
	case <-x.Done():
	default:
		t.Error("Stop did not end the session")
	}
	f.mu.Lock()
	renews := f.renews
	f.mu.Unlock()
	if k.Session(ttl, false) == x {
		t.Error("a stopped session still offered")
	}
	time.Sleep(ttl)
	k.Close()
	f.set(func(f *fake) {
		if f.renews != renews {
			t.Errorf("%d renewals after Stop", f.renews-renews)
		}
		if slices.Contains(f.ended, x.ID()) {
			t.Error("the stopped session's record deleted by the Keeper: the release it makes way for deletes it")
		}
	})
}
