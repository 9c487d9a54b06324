package redis_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/drivertest"
)

// The scripts implement lockstate's rules, and hand the lock to queued
// requests when an entry leaves. TestModel runs random requests against
// the store and against lockstate, which promotes as the scripts do (each
// queued request in turn, as if it asked itself, up to the first
// exclusive one), and compares every outcome, token, holder and queue,
// and the grants found in the mailboxes. Nothing expires (an hour's TTL):
// expiry is the conformance suite's.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 1))
		ctx := ctxFor(t, 2*time.Minute)
		// Names of this run alone: tokens start from 1, as the model's do.
		s := open(t, nil)
		names := []string{fmt.Sprint("model-a-", seed), fmt.Sprint("model-b-", seed)}
		owners := []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7"}
		model := map[string]*lockstate.State{}
		for _, n := range names {
			model[n] = &lockstate.State{}
		}
		const ttl = time.Hour
		request := func(name, owner string, mode driver.Mode, limit int, queue bool) *driver.Request {
			return &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: ttl, Queue: queue, QueueTTL: ttl}
		}
		// promote applies to the model what the scripts do when an entry
		// leaves, and returns the owners granted so, with their tokens.
		promote := func(name string) map[string]uint64 {
			st := model[name]
			got := map[string]uint64{}
			for st.Freed {
				st.Freed = false
				for _, q := range slices.Clone(st.Queue) {
					g, err := st.Acquire(request(name, q.Owner, q.Mode, q.Limit, true), time.Now())
					if err == nil {
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
		check := func(step int, what, name string, promoted map[string]uint64) {
			t.Helper()
			// The grants the store pushed.
			for _, o := range owners {
				mb := s.Mailbox(name, o)
				v, err := s.Client().LRange(ctx, mb, 0, -1).Result()
				if err != nil {
					t.Fatal(err)
				}
				want, ok := promoted[o]
				switch {
				case ok && (len(v) != 1 || len(v[0]) != 24):
					t.Fatalf("step %d (%s): mailbox of %s = %q, want the grant of token %d", step, what, o, v, want)
				case ok && uint64(math.Float64frombits(binary.BigEndian.Uint64([]byte(v[0])))) != want:
					t.Fatalf("step %d (%s): %s handed token %v, want %d", step, what, o, v[0], want)
				case !ok && len(v) > 0:
					t.Fatalf("step %d (%s): mailbox of %s = %q, want nothing", step, what, o, v)
				}
				s.Client().Del(ctx, mb)
			}
			// Holders and queue.
			hs, err := s.List(ctx, &driver.Filter{Name: name, Queued: true})
			if err != nil {
				t.Fatal(err)
			}
			var gotH, wantH []string
			for _, h := range hs {
				if !h.Queued {
					gotH = append(gotH, fmt.Sprintf("%s/%v/%d/%d", h.Owner, h.Mode, h.Limit, h.Token))
				}
			}
			for _, h := range model[name].Holders {
				wantH = append(wantH, fmt.Sprintf("%s/%v/%d/%d", h.Owner, h.Mode, h.Limit, h.Token))
			}
			slices.Sort(gotH)
			slices.Sort(wantH)
			queue, err := s.Client().ZRange(ctx, s.QueueKey(name), 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			var wantQ []string
			for _, q := range model[name].Queue {
				wantQ = append(wantQ, q.Owner)
			}
			if !slices.Equal(gotH, wantH) || !slices.Equal(queue, wantQ) || len(hs) != len(wantH)+len(wantQ) {
				t.Fatalf("step %d (%s): holders %v queue %v (%d listed), want holders %v queue %v",
					step, what, gotH, queue, len(hs), wantH, wantQ)
			}
		}
		outcome := func(g *driver.Grant, err error) string {
			switch {
			case err == nil:
				return fmt.Sprintf("grant %d extended %v", g.Token, g.Extended)
			case errors.Is(err, driver.ErrNotGranted):
				return "busy"
			case errors.Is(err, driver.ErrModeConflict):
				return "conflict"
			}
			return "error " + err.Error()
		}
		for step := range 1500 {
			name := names[rng.IntN(len(names))]
			owner := owners[rng.IntN(len(owners))]
			st := model[name]
			var what string
			switch op := rng.IntN(10); {
			case op < 6:
				mode, limit := driver.Exclusive, 0
				if rng.IntN(2) == 0 {
					mode, limit = driver.Shared, []int{0, 1, 2, 3}[rng.IntN(4)]
				}
				req := request(name, owner, mode, limit, rng.IntN(5) != 0)
				what = fmt.Sprintf("acquire %s %s %v limit %d queue %v", name, owner, mode, limit, req.Queue)
				want := outcome(st.Acquire(req, time.Now()))
				got := outcome(s.Acquire(ctx, req))
				if got != want {
					t.Fatalf("step %d (%s): %s, want %s", step, what, got, want)
				}
			case op < 9:
				what = fmt.Sprintf("release %s %s", name, owner)
				want := st.Release(name, owner, time.Now())
				got, err := s.Release(ctx, []driver.Key{{Name: name, Owner: owner}})
				if err != nil || got[0] != want {
					t.Fatalf("step %d (%s): %v, %v; want %v", step, what, got, err, want)
				}
			default:
				what = fmt.Sprintf("renew %s %s", name, owner)
				want := st.Renew(name, owner, ttl, time.Now())
				got, err := s.Renew(ctx, []driver.Hold{{Name: name, Owner: owner, TTL: ttl}})
				if err != nil || (got[0] == nil) != (want == nil) || (want != nil && got[0].Token != want.Token) {
					t.Fatalf("step %d (%s): %+v, %v; want %+v", step, what, got[0], err, want)
				}
			}
			check(step, what, name, promote(name))
		}
		var keys []driver.Key
		for _, n := range names {
			for _, o := range owners {
				keys = append(keys, driver.Key{Name: n, Owner: o})
			}
		}
		s.Release(ctx, keys)
	})
}
