package drivertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// SessionModelConfig reaches a store's session rules below baton's API,
// with session ids of the test's choosing and a clock the test moves on.
type SessionModelConfig struct {
	// Acquire asks for req's hold (never queued), bound to the session sid
	// if granted ("" for none). It returns what lockstate's Acquire does
	// (a grant, Extended for an extension, with the store's token; or an
	// error satisfying driver.ErrNotGranted, ErrModeConflict or
	// ErrLimitConflict) and whether the hold granted or extended is bound
	// to sid.
	Acquire func(t testing.TB, req *driver.Request, sid string) (g *driver.Grant, bound bool, err error)
	// Renew renews owner's holds of names (in name order) for ttl, in one
	// call, and reports which it renewed.
	Renew func(t testing.TB, names []string, owner string, ttl time.Duration) []bool
	// Release releases owner's entry of name and reports whether it was a
	// live hold.
	Release func(t testing.TB, name, owner string) bool
	// KeepSession makes (create) or renews the session id for ttl, and
	// reports whether it did.
	KeepSession func(t testing.TB, id string, ttl time.Duration, create bool) bool
	// Pass moves the store's clock on by d.
	Pass func(t testing.TB, d time.Duration)
	// Live returns the holders of name live in the store, as "owner mode
	// limit", with their time left.
	Live func(t testing.TB, name string) map[string]time.Duration
	// LowerBound says that Live may show a bound holder's time left as a
	// lower bound (a store that reads sessions only for holders past the
	// expiry it has for them: lockstate.State.Sessions).
	LowerBound bool
	// LiveOnly says that the store binds a new hold only to a live
	// session: one asked for in a session that expired is granted in
	// none.
	LiveOnly bool
	// AfterStep, if set, checks more after each step.
	AfterStep func(t testing.TB, step int, what string, names []string)
	// Seed makes the walk repeatable (0: DRIVERTEST_SEED, or a random
	// one, logged).
	Seed uint64
}

// AcquireStatus converts the status of the SQL stores' acquire functions
// (0 granted, 1 extended, 2 not granted, 3 a mode conflict, 4 a limit
// conflict) to what SessionModelConfig.Acquire returns.
func AcquireStatus(status int, token uint64) (*driver.Grant, error) {
	switch status {
	case 0:
		return &driver.Grant{Token: token}, nil
	case 1:
		return &driver.Grant{Token: token, Extended: true}, nil
	case 3:
		return nil, driver.ErrModeConflict
	case 4:
		return nil, driver.ErrLimitConflict
	}
	return nil, driver.ErrNotGranted
}

// SessionModel compares a store's judgment of holds in sessions with
// lockstate's (Bind, ApplySessions), through time: a random walk of
// acquires (in a session or not; exclusive, shared, semaphores), renewals
// (alone or in a batch), releases, sessions made and renewed (mostly live
// ones, some expired), and time passing, on two names. Time passes in
// steps of 10 s with TTLs of 10–30 s, so that the few seconds the walk
// itself takes change no decision. After every step the outcome must agree
// (granted, extended, refused, conflicts; bound to the session asked for;
// tokens new and growing, or the same for the same grant), and so must the
// live holders, with their time left.
func SessionModel(t *testing.T, cfg SessionModelConfig) {
	t.Helper()
	seed := walkSeed(t, cfg.Seed)
	t.Logf("session model: seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	const unit = 10 * time.Second
	now := time.Unix(1_000_000_000, 0) // the model's clock
	names := []string{"m/a", "m/b"}
	owners := []string{"o1", "o2", "o3", "o4", "o5"}
	model := map[string]*lockstate.State{}
	tokens := map[string]map[uint64]uint64{} // name → model token → store token
	top := map[string]uint64{}
	for _, n := range names {
		model[n], tokens[n] = &lockstate.State{}, map[uint64]uint64{}
	}
	sessions := map[string]time.Time{} // the sessions: id → expiry
	ttls := map[string]time.Duration{} // a session's TTL, the same at every renewal (as a Store's)
	var made []string
	live := func(sid string) (time.Time, bool) {
		e, ok := sessions[sid]
		return e, ok && e.After(now)
	}
	// outcome names what an acquire did, bound or not.
	outcome := func(g *driver.Grant, bound bool, err error) string {
		switch {
		case g != nil && g.Extended:
			return fmt.Sprintf("extended, bound %v", bound)
		case g != nil:
			return fmt.Sprintf("granted, bound %v", bound)
		case errors.Is(err, driver.ErrModeConflict):
			return "mode conflict"
		case errors.Is(err, driver.ErrLimitConflict):
			return "limit conflict"
		case errors.Is(err, driver.ErrNotGranted):
			return "refused"
		}
		t.Fatalf("acquire: %v", err)
		return ""
	}
	for step := range 500 {
		name := names[rng.IntN(len(names))]
		owner := owners[rng.IntN(len(owners))]
		// Holds mostly shorter than sessions, so that sessions keep holds
		// past their own TTL.
		ttl := time.Duration(1+rng.IntN(3)/2) * unit
		for _, st := range model {
			st.ApplySessions(live)
		}
		st := model[name]
		var what string
		switch r := rng.IntN(20); {
		case r < 8: // acquire
			mode, limit := driver.Exclusive, 0
			if rng.IntN(2) == 0 {
				mode, limit = driver.Shared, rng.IntN(3)
			}
			var sid string
			if len(made) > 0 && rng.IntN(3) > 0 {
				sid = made[len(made)-1-rng.IntN(min(len(made), 2))] // a recent one
			}
			what = fmt.Sprintf("acquire %s by %s, mode %d limit %d ttl %v session %q", name, owner, mode, limit, ttl, sid)
			req := &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: ttl}
			if debugModel {
				t.Logf("step %d: %s", step, what)
			}
			g, bound, err := cfg.Acquire(t, req, sid)
			mg, merr := st.Acquire(req, now)
			wantBound := false
			switch {
			case mg != nil && mg.Extended:
				i := slices.IndexFunc(st.Holders, func(e lockstate.Entry) bool { return e.Owner == owner })
				wantBound = sid != "" && st.Holders[i].Session == sid
			case mg != nil && sid != "":
				if _, ok := live(sid); ok || !cfg.LiveOnly {
					st.Bind(owner, sid)
					wantBound = true
				}
			}
			if got, want := outcome(g, bound, err), outcome(mg, wantBound, merr); got != want {
				t.Fatalf("step %d (%s): %s, want %s", step, what, got, want)
			}
			if mg != nil {
				if mapped, ok := tokens[name][mg.Token]; ok {
					if mapped != g.Token {
						t.Fatalf("step %d (%s): token %d, want %d", step, what, g.Token, mapped)
					}
				} else {
					if g.Token <= top[name] {
						t.Fatalf("step %d (%s): new token %d not above %d", step, what, g.Token, top[name])
					}
					tokens[name][mg.Token], top[name] = g.Token, g.Token
				}
			}
		case r < 10: // renew, alone or the owner's holds of both names in one call
			ns := []string{name}
			if rng.IntN(2) == 0 {
				ns = names
			}
			what = fmt.Sprintf("renew %v by %s, ttl %v", ns, owner, ttl)
			got := cfg.Renew(t, ns, owner, ttl)
			for i, n := range ns {
				if want := model[n].Renew(n, owner, ttl, now) != nil; got[i] != want {
					t.Fatalf("step %d (%s): %s renewed %v, want %v", step, what, n, got[i], want)
				}
			}
		case r < 13: // release
			what = fmt.Sprintf("release %s by %s", name, owner)
			if got, want := cfg.Release(t, name, owner), st.Release(name, owner, now); got != want {
				t.Fatalf("step %d (%s): held %v, want %v", step, what, got, want)
			}
		case r < 14: // a new session
			sid := fmt.Sprintf("s%d", step)
			ttl := time.Duration(2+rng.IntN(2)) * unit
			what = fmt.Sprintf("make session %s, ttl %v", sid, ttl)
			if !cfg.KeepSession(t, sid, ttl, true) {
				t.Fatalf("step %d (%s): not made", step, what)
			}
			for s, e := range sessions { // making one deletes the expired ones
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
			got := cfg.KeepSession(t, sid, ttls[sid], false)
			_, want := live(sid)
			if want {
				sessions[sid] = now.Add(ttls[sid])
			}
			if got != want {
				t.Fatalf("step %d (%s): renewed %v, want %v", step, what, got, want)
			}
		default: // time passes
			d := time.Duration(rng.IntN(3)) * unit
			what = fmt.Sprintf("%v pass", d)
			cfg.Pass(t, d)
			now = now.Add(d)
		}
		// The live holders, as the store has them and as the model has them.
		for _, n := range names {
			ms := model[n]
			ms.ApplySessions(live)
			want := map[string]time.Duration{}
			for _, e := range ms.Holders {
				if e.Expires.After(now) {
					want[fmt.Sprintf("%s %d %d", e.Owner, e.Mode, e.Limit)] = e.Expires.Sub(now)
				}
			}
			got := cfg.Live(t, n)
			if len(got) != len(want) {
				t.Fatalf("step %d (%s): %s held by %v, want %v", step, what, n, got, want)
			}
			for k, w := range want {
				// The store's clock ran on by the few seconds the walk
				// took: its time left is at most that much shorter.
				low := w - unit
				if cfg.LowerBound {
					low = 0
				}
				if g, ok := got[k]; !ok || g > w || g <= low {
					t.Fatalf("step %d (%s): %s held by %v, want %v", step, what, n, got, want)
				}
			}
		}
		if debugModel {
			t.Logf("step %d done: %s", step, what)
		}
		if cfg.AfterStep != nil {
			cfg.AfterStep(t, step, what, names)
		}
	}
}
