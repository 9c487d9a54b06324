package drivertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
)

// ModelConfig says how to run the model check on a store.
type ModelConfig struct {
	// Open returns the store under test. Its lock names must be new to it
	// (a namespace of this test's own).
	Open func(t testing.TB) driver.Store
	// HandsOff is set for stores that grant a queued request themselves
	// when the entries ahead of it leave, in FIFO order, as if it asked
	// again (Redis's server-side hand-off; etcd's and ZooKeeper's queue
	// keys and nodes): the model then does the same.
	HandsOff bool
	// HandsOffExclusive is set for stores that hand a name over only to
	// an exclusive request at the head of the queue; a shared one there
	// is woken and asks (MySQL's): the model then does the same.
	HandsOffExclusive bool
	// FixedModes makes each owner ask for a name always in one mode and
	// limit, for stores whose queued requests keep the mode they first
	// asked with (etcd's keys, ZooKeeper's nodes: asking in another
	// mode is ErrModeConflict there, while lockstate re-queues it).
	FixedModes bool
	// Steps is the length of the random walk (default 600).
	Steps int
	// Seed makes the walk repeatable (0: DRIVERTEST_SEED, or a random
	// one, logged).
	Seed uint64
	// AfterStep, if set, checks more after each step: promoted are the
	// queued owners the model granted by hand-off, with the model's
	// tokens.
	AfterStep func(t *testing.T, step int, name string, promoted map[string]uint64)
}

// Model compares a store with lockstate, baton's reference grant rules:
// a random walk of acquires (exclusive, shared, semaphores of 1–3;
// queued or not), releases and renewals (of one entry, or a batch across
// both names) by seven owners on two names,
// applied to both. After every step the outcomes must agree (granted,
// extended, refused, mode or limit conflict), the tokens must agree up to
// their values (a store's token may be any strictly increasing number:
// the check maps the model's tokens to the store's), and so must the
// holders (owner, mode, limit) and the queued owners the store lists.
// Nothing expires: the TTLs are an hour.
func Model(t *testing.T, cfg ModelConfig) {
	t.Helper()
	if cfg.Open == nil {
		t.Fatal("drivertest: ModelConfig.Open is nil")
	}
	steps := cfg.Steps
	if steps <= 0 {
		steps = 600
	}
	seed := walkSeed(t, cfg.Seed)
	t.Logf("model check: seed %d, %d steps", seed, steps)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := cfg.Open(t)
	run := fmt.Sprintf("model-%d-", rand.Uint32())
	names := []string{run + "a", run + "b"}
	owners := []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7"}
	model := map[string]*lockstate.State{}
	tokens := map[string]map[uint64]uint64{} // name → model token → store token
	// handed holds the owners granted by hand-off who have not asked again
	// since: their next acquire may be reported as a new grant or as an
	// extension (it is both: the waiter's first sight of its grant).
	handed := map[string]bool{} // name + "/" + owner
	top := map[string]uint64{}  // name → highest store token
	for _, n := range names {
		model[n] = &lockstate.State{}
		tokens[n] = map[uint64]uint64{}
	}
	defer func() {
		var keys []driver.Key
		for _, n := range names {
			for _, o := range owners {
				keys = append(keys, driver.Key{Name: n, Owner: o})
			}
		}
		_, _ = s.Release(context.Background(), keys)
	}()
	type modeLimit struct {
		mode  driver.Mode
		limit int
	}
	pick := func() modeLimit {
		if rng.IntN(2) == 0 {
			return modeLimit{driver.Shared, []int{0, 0, 1, 2, 3}[rng.IntN(5)]}
		}
		return modeLimit{driver.Exclusive, 0}
	}
	fixed := map[string]modeLimit{} // name + owner → its mode, with FixedModes
	for _, n := range names {
		for _, o := range owners {
			fixed[n+"/"+o] = pick()
		}
	}
	const ttl = time.Hour
	request := func(name, owner string, mode driver.Mode, limit int, queue bool) *driver.Request {
		// KeepAlive lets a store that keeps sessions bind the hold to one
		// (nothing expires here either way).
		return &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: ttl, Queue: queue, QueueTTL: ttl,
			KeepAlive: rng.IntN(2) == 0}
	}
	// token checks a store token against the model's.
	token := func(step int, what, name string, model, store uint64, extended bool) {
		t.Helper()
		if mapped, ok := tokens[name][model]; ok {
			if mapped != store {
				t.Fatalf("step %d (%s): token %d, want %d (the token of the hold it extends)", step, what, store, mapped)
			}
			return
		}
		if extended {
			t.Fatalf("step %d (%s): extended a hold the model does not know (token %d)", step, what, store)
		}
		if store <= top[name] {
			t.Fatalf("step %d (%s): new token %d, not above the name's earlier %d", step, what, store, top[name])
		}
		tokens[name][model], top[name] = store, store
	}
	// promote grants queued requests as a store that hands off does.
	promote := func(name string) map[string]uint64 {
		st := model[name]
		got := map[string]uint64{}
		for (cfg.HandsOff || cfg.HandsOffExclusive) && st.Freed {
			st.Freed = false
			for _, q := range slices.Clone(st.Queue) {
				if cfg.HandsOffExclusive && q.Mode != driver.Exclusive {
					break
				}
				if g, err := st.Acquire(request(name, q.Owner, q.Mode, q.Limit, true), time.Now()); err == nil {
					got[q.Owner] = g.Token
				}
				if q.Mode == driver.Exclusive {
					break
				}
			}
		}
		st.Freed, st.Dirty = false, false
		return got
	}
	outcome := func(g *driver.Grant, err error) string {
		switch {
		case err == nil:
			return fmt.Sprintf("granted (extended %v)", g.Extended)
		case errors.Is(err, driver.ErrNotGranted):
			return "refused"
		case errors.Is(err, driver.ErrModeConflict):
			return "mode conflict"
		case errors.Is(err, driver.ErrLimitConflict):
			return "limit conflict"
		}
		return "error: " + err.Error()
	}
	check := func(step int, what, name string, promoted map[string]uint64) {
		t.Helper()
		hs, err := s.List(ctx, &driver.Filter{Name: name, Queued: true})
		if err != nil {
			t.Fatalf("step %d (%s): List: %v", step, what, err)
		}
		var gotH, gotQ, wantH, wantQ []string
		// In token order: holds handed off in one step are checked as new
		// tokens, each above the one before, whatever order List uses.
		slices.SortFunc(hs, func(a, b driver.Holder) int { return cmp.Compare(a.Token, b.Token) })
		for _, h := range hs {
			if h.Name != name {
				continue
			}
			if h.Queued {
				gotQ = append(gotQ, h.Owner)
				continue
			}
			gotH = append(gotH, fmt.Sprintf("%s/%v/%d", h.Owner, h.Mode, h.Limit))
			var m uint64
			for _, e := range model[name].Holders {
				if e.Owner == h.Owner {
					m = e.Token
				}
			}
			if m != 0 {
				if _, known := tokens[name][m]; !known {
					token(step, what+", handed off", name, m, h.Token, false)
				} else if tokens[name][m] != h.Token {
					t.Fatalf("step %d (%s): %s listed with token %d, want %d", step, what, h.Owner, h.Token, tokens[name][m])
				}
			}
		}
		for _, h := range model[name].Holders {
			wantH = append(wantH, fmt.Sprintf("%s/%v/%d", h.Owner, h.Mode, h.Limit))
		}
		for _, q := range model[name].Queue {
			wantQ = append(wantQ, q.Owner)
		}
		for _, l := range [][]string{gotH, gotQ, wantH, wantQ} {
			slices.Sort(l)
		}
		if !slices.Equal(gotH, wantH) || !slices.Equal(gotQ, wantQ) {
			t.Fatalf("step %d (%s): holders [%s] queued [%s]; the model has holders [%s] queued [%s]",
				step, what, strings.Join(gotH, " "), strings.Join(gotQ, " "), strings.Join(wantH, " "), strings.Join(wantQ, " "))
		}
		if cfg.AfterStep != nil {
			cfg.AfterStep(t, step, name, promoted)
		}
	}
	// settle grants what a store that hands off grants after a step on
	// name, and checks the name. A step on both names (a batch) settles
	// the other name first.
	settle := func(step int, what, name string) {
		t.Helper()
		promoted := promote(name)
		for o := range promoted {
			handed[name+"/"+o] = true
		}
		if debugModel {
			t.Logf("step %d (%s): %s: holders %v queue %v", step, what, name, entries(model[name].Holders), entries(model[name].Queue))
		}
		check(step, what, name, promoted)
	}
	// batch picks the keys of a batch step, of both names, in random
	// order, each once (and each name once with onePerName), and
	// describes them.
	batch := func(onePerName bool) ([]driver.Key, string) {
		var keys []driver.Key
		var each []string
		seen := map[string]bool{}
		for range 2 + rng.IntN(6) {
			n, o := names[rng.IntN(len(names))], owners[rng.IntN(len(owners))]
			if !seen[n+"/"+o] && !(onePerName && seen[n]) {
				seen[n+"/"+o], seen[n] = true, true
				keys = append(keys, driver.Key{Name: n, Owner: o})
				each = append(each, n[len(run):]+" "+o)
			}
		}
		return keys, strings.Join(each, ", ")
	}
	for step := range steps {
		name := names[rng.IntN(len(names))]
		owner := owners[rng.IntN(len(owners))]
		st := model[name]
		var what string
		switch op := rng.IntN(10); {
		case op < 6:
			ml := pick()
			if cfg.FixedModes {
				ml = fixed[name+"/"+owner]
			}
			mode, limit := ml.mode, ml.limit
			req := request(name, owner, mode, limit, rng.IntN(5) != 0)
			what = fmt.Sprintf("acquire %s %s %v limit %d queue %v", name[len(run):], owner, mode, limit, req.Queue)
			mg, merr := st.Acquire(req, time.Now())
			sg, serr := s.Acquire(ctx, req)
			want, got := outcome(mg, merr), outcome(sg, serr)
			if handed[name+"/"+owner] && merr == nil && serr == nil {
				got = want // extended or not: see handed
			}
			delete(handed, name+"/"+owner)
			if got != want {
				t.Fatalf("step %d (%s): %s, the model says %s", step, what, got, want)
			}
			if merr == nil {
				token(step, what, name, mg.Token, sg.Token, mg.Extended)
			}
		case op < 9 && rng.IntN(3) == 0:
			// A batch, as Close sends. A store that hands off may grant a
			// queued key of the batch before releasing it, so there each
			// name is in it once.
			keys, each := batch(cfg.HandsOff || cfg.HandsOffExclusive)
			what = "release " + each
			got, err := s.Release(ctx, keys)
			if err != nil || len(got) != len(keys) {
				t.Fatalf("step %d (%s): %v, %v", step, what, got, err)
			}
			for i, k := range keys {
				delete(handed, k.Name+"/"+k.Owner)
				if want := model[k.Name].Release(k.Name, k.Owner, time.Now()); got[i] != want {
					t.Fatalf("step %d (%s): %s %s released %v, the model says %v", step, what, k.Name[len(run):], k.Owner, got[i], want)
				}
			}
			for _, n := range names {
				if n != name {
					settle(step, what, n)
				}
			}
		case op < 9:
			delete(handed, name+"/"+owner)
			what = fmt.Sprintf("release %s %s", name[len(run):], owner)
			want := st.Release(name, owner, time.Now())
			got, err := s.Release(ctx, []driver.Key{{Name: name, Owner: owner}})
			if err != nil || got[0] != want {
				t.Fatalf("step %d (%s): %v, %v; the model says %v", step, what, got, err, want)
			}
		case rng.IntN(2) == 0:
			// A batch, as keepalive sends: several holds of both names
			// (or no hold at all), in random order.
			keys, each := batch(false)
			holds := make([]driver.Hold, len(keys))
			for i, k := range keys {
				holds[i] = driver.Hold{Name: k.Name, Owner: k.Owner, TTL: ttl}
			}
			what = "renew " + each
			got, err := s.Renew(ctx, holds)
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			if len(got) != len(holds) {
				t.Fatalf("step %d (%s): %d results for %d holds", step, what, len(got), len(holds))
			}
			for i, h := range holds {
				want := model[h.Name].Renew(h.Name, h.Owner, ttl, time.Now())
				switch {
				case (got[i] == nil) != (want == nil):
					t.Fatalf("step %d (%s): %s %s renewed %v, the model says %v", step, what, h.Name[len(run):], h.Owner, got[i] != nil, want != nil)
				case want != nil:
					token(step, what, h.Name, want.Token, got[i].Token, true)
				}
			}
			for _, n := range names {
				if n != name {
					settle(step, what, n)
				}
			}
		default:
			what = fmt.Sprintf("renew %s %s", name[len(run):], owner)
			want := st.Renew(name, owner, ttl, time.Now())
			got, err := s.Renew(ctx, []driver.Hold{{Name: name, Owner: owner, TTL: ttl}})
			switch {
			case err != nil:
				t.Fatalf("step %d (%s): %v", step, what, err)
			case (got[0] == nil) != (want == nil):
				t.Fatalf("step %d (%s): renewed %v, the model says %v", step, what, got[0] != nil, want != nil)
			case want != nil:
				token(step, what, name, want.Token, got[0].Token, true)
			}
		}
		settle(step, what, name)
	}
}

var debugModel = os.Getenv("DRIVERTEST_MODEL_DEBUG") != ""

// walkSeed is a random walk's seed: seed if set, else DRIVERTEST_SEED (to
// repeat a walk a failure logged), else a random one.
func walkSeed(t testing.TB, seed uint64) uint64 {
	if seed != 0 {
		return seed
	}
	if v := os.Getenv("DRIVERTEST_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("drivertest: DRIVERTEST_SEED=%q: %v", v, err)
		}
		return s
	}
	return rand.Uint64()
}

func entries(es []lockstate.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s/%v/%d#%d", e.Owner, e.Mode, e.Limit, e.Token))
	}
	return out
}
