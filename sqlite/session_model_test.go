package sqlite

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// TestSessionModel compares the file's sessions with lockstate's model of
// them (Bind, ApplySessions), through time: a random walk of acquires (in
// a session or not; exclusive, shared, semaphores), renewals, releases,
// sessions made and renewed, and time passing, on two names. The rules are
// lockstate's on both sides: what is checked is what the file keeps of
// them, the sessions' table and its renewal, and which sessions a decision
// or a read applies (applySessions). Time passes by moving the store's
// clock on, in steps of 10 s with TTLs of 10–30 s.
func TestSessionModel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "locks.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	defer clockShift.Store(0)
	d, sd := st.db, sessionDB{st.db}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	const unit = 10 * time.Second
	now := time.Unix(1_000_000_000, 0) // the model's clock
	names := []string{"m/a", "m/b"}
	owners := []string{"o1", "o2", "o3", "o4", "o5"}
	model := map[string]*lockstate.State{}
	for _, n := range names {
		model[n] = &lockstate.State{}
	}
	sessions := map[string]time.Time{} // id → expiry
	ttls := map[string]time.Duration{}
	var made []string
	live := func(sid string) (time.Time, bool) {
		e, ok := sessions[sid]
		return e, ok && e.After(now)
	}
	// update runs f on name's state in the file and on the model's.
	update := func(name string, f func(st *lockstate.State, now time.Time) any) (got, want any) {
		err := d.Update(ctx, []string{name}, func(_ int, st *lockstate.State, at time.Time) error {
			got = f(st, at)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		model[name].ApplySessions(live)
		return got, f(model[name], now)
	}
	for step := range 500 {
		name := names[rng.IntN(len(names))]
		owner := owners[rng.IntN(len(owners))]
		ttl := time.Duration(1+rng.IntN(3)/2) * unit
		var what string
		switch r := rng.IntN(20); {
		case r < 8: // acquire, bound as records.Store binds: a hold granted to the session offered, an extended one keeps its own
			mode, limit := driver.Exclusive, 0
			if rng.IntN(2) == 0 {
				mode, limit = driver.Shared, rng.IntN(3)
			}
			var sid string
			if len(made) > 0 && rng.IntN(3) > 0 {
				sid = made[len(made)-1-rng.IntN(min(len(made), 2))]
			}
			what = fmt.Sprintf("acquire %s by %s, mode %d limit %d ttl %v session %q", name, owner, mode, limit, ttl, sid)
			req := &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: ttl}
			got, want := update(name, func(st *lockstate.State, at time.Time) any {
				g, err := st.Acquire(req, at)
				switch {
				case g != nil && g.Extended:
					i := slices.IndexFunc(st.Holders, func(e lockstate.Entry) bool { return e.Owner == owner })
					return fmt.Sprintf("extended, bound %v", sid != "" && st.Holders[i].Session == sid)
				case g != nil:
					if sid != "" {
						st.Bind(owner, sid)
					}
					return fmt.Sprintf("granted, bound %v", sid != "")
				case errors.Is(err, driver.ErrModeConflict), errors.Is(err, driver.ErrLimitConflict):
					return err.Error()
				}
				return "refused"
			})
			if got != want {
				t.Fatalf("step %d (%s): %v, want %v", step, what, got, want)
			}
		case r < 10: // renew
			what = fmt.Sprintf("renew %s by %s, ttl %v", name, owner, ttl)
			got, want := update(name, func(st *lockstate.State, at time.Time) any { return st.Renew(name, owner, ttl, at) != nil })
			if got != want {
				t.Fatalf("step %d (%s): renewed %v, want %v", step, what, got, want)
			}
		case r < 13: // release
			what = fmt.Sprintf("release %s by %s", name, owner)
			got, want := update(name, func(st *lockstate.State, at time.Time) any { return st.Release(name, owner, at) })
			if got != want {
				t.Fatalf("step %d (%s): held %v, want %v", step, what, got, want)
			}
		case r < 14: // a new session
			sid := fmt.Sprintf("s%d", step)
			ttl := time.Duration(2+rng.IntN(2)) * unit
			what = fmt.Sprintf("make session %s, ttl %v", sid, ttl)
			if ok, err := sd.KeepSession(ctx, sid, ttl, true); !ok || err != nil {
				t.Fatalf("step %d (%s): %v, %v", step, what, ok, err)
			}
			for s, e := range sessions { // making one deletes the ended ones
				if !e.After(now) {
					delete(sessions, s)
				}
			}
			sessions[sid], ttls[sid] = now.Add(ttl), ttl
			made = append(made, sid)
		case r < 18 && len(made) > 0: // a session renewed, mostly a live one
			sid := made[rng.IntN(len(made))]
			var alive []string
			for _, x := range made {
				if _, ok := live(x); ok {
					alive = append(alive, x)
				}
			}
			if len(alive) > 0 && rng.IntN(4) > 0 {
				sid = alive[rng.IntN(len(alive))]
			}
			what = fmt.Sprintf("renew session %s, ttl %v", sid, ttls[sid])
			ok, err := sd.KeepSession(ctx, sid, ttls[sid], false)
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			_, want := live(sid)
			if want {
				sessions[sid] = now.Add(ttls[sid])
			}
			if ok != want {
				t.Fatalf("step %d (%s): renewed %v, want %v", step, what, ok, want)
			}
		default: // time passes
			dt := time.Duration(rng.IntN(3)) * unit
			what = fmt.Sprintf("%v pass", dt)
			clockShift.Add(int64(dt))
			now = now.Add(dt)
		}
		// The live holders, as a read of the file has them and as the model has them.
		for _, n := range names {
			ms := model[n]
			ms.ApplySessions(live)
			want := map[string]time.Duration{}
			for _, e := range ms.Holders {
				if e.Expires.After(now) {
					want[fmt.Sprintf("%s %d %d", e.Owner, e.Mode, e.Limit)] = e.Expires.Sub(now)
				}
			}
			got := map[string]time.Duration{}
			err := d.Scan(ctx, n, "", func(_ string, st *lockstate.State, at time.Time) bool {
				for _, e := range st.Holders {
					if e.Expires.After(at) {
						got[fmt.Sprintf("%s %d %d", e.Owner, e.Mode, e.Limit)] = e.Expires.Sub(at)
					}
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("step %d (%s): %s held by %v, want %v", step, what, n, got, want)
			}
			for k, w := range want {
				// The same live holders. A read applies only the sessions
				// of holders past the expiry they have in the file
				// (lockstate.State.Sessions): a holder within it shows
				// that, a lower bound of its time left.
				if g, ok := got[k]; !ok || g > w {
					t.Fatalf("step %d (%s): %s held by %v, want %v", step, what, n, got, want)
				}
			}
		}
	}
}
