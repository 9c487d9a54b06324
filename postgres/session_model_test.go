package postgres_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/postgres"
)

// TestSessionModel compares the store's judgment of holds in sessions with
// lockstate's (Bind, ApplySessions), through time: a random walk of
// acquires (in a session or not; exclusive, shared, semaphores), renewals,
// releases, sessions made and renewed, and time passing, on two names.
// Time passes by moving every time the tables hold back (which is what
// the server's clock moving on looks like to them), in steps of 10 s with
// TTLs of 10–30 s, so that the few seconds the walk itself takes change
// no decision. After every step the outcome must agree (granted, extended,
// refused, conflicts; bound to the session asked for), and so must the
// live holders the store lists, with their time left.
func TestSessionModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 3*time.Minute)
		tb := freshTable(t)
		open(t, tb).Close() // the schema
		p := pool(t)
		id := func(suffix string) string { return pgx.Identifier{tb + suffix}.Sanitize() }
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 2))
		const unit = 10 * time.Second
		maxGrace := int64(postgres.DefaultMaxGrace)
		now := time.Unix(1_000_000_000, 0) // the model's clock
		names := []string{"m/a", "m/b"}
		owners := []string{"o1", "o2", "o3", "o4", "o5"}
		model := map[string]*lockstate.State{}
		tokens := map[string]map[uint64]uint64{}
		top := map[string]uint64{}
		for _, n := range names {
			model[n], tokens[n] = &lockstate.State{}, map[uint64]uint64{}
		}
		sessions := map[string]time.Time{} // the sessions' rows: id → expiry
		ttls := map[string]time.Duration{} // a session's TTL, the same at every renewal (as the Store's)
		var made []string
		live := func(sid string) (time.Time, bool) {
			e, ok := sessions[sid]
			return e, ok && e.After(now)
		}
		exec := func(step int, q string, args ...any) {
			if _, err := p.Exec(ctx, q, args...); err != nil {
				t.Fatalf("step %d: %s: %v", step, q, err)
			}
		}
		for step := range 500 {
			name := names[rng.IntN(len(names))]
			owner := owners[rng.IntN(len(owners))]
			// Holds mostly shorter than sessions, so that sessions keep
			// holds past their own TTL.
			ttl := time.Duration(1+rng.IntN(3)/2) * unit
			st := model[name]
			st.ApplySessions(live)
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
				var status int16
				var token int64
				var bound bool
				var psid *string
				if sid != "" {
					psid = &sid
				}
				err := p.QueryRow(ctx, "SELECT o_status, o_token, o_bound FROM "+id("_acquire")+"($1, $2, $3, $4, $5, false, 0, 'h', NULL, $6, $7)",
					name, owner, int16(mode), int32(limit), int64(ttl), maxGrace, psid).Scan(&status, &token, &bound)
				if err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				req := &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: ttl}
				g, merr := st.Acquire(req, now)
				want, wantBound := int16(2), false
				switch {
				case g != nil && g.Extended:
					want = 1
					i := slices.IndexFunc(st.Holders, func(e lockstate.Entry) bool { return e.Owner == owner })
					wantBound = sid != "" && st.Holders[i].Session == sid
				case g != nil:
					want, wantBound = 0, sid != ""
					if sid != "" {
						st.Bind(owner, sid)
					}
				case errors.Is(merr, driver.ErrModeConflict):
					want = 3
				case errors.Is(merr, driver.ErrLimitConflict):
					want = 4
				}
				if status != want || (status <= 1 && bound != wantBound) {
					t.Fatalf("step %d (%s): status %d bound %v, want %d bound %v", step, what, status, bound, want, wantBound)
				}
				if g != nil {
					if mapped, ok := tokens[name][g.Token]; ok {
						if mapped != uint64(token) {
							t.Fatalf("step %d (%s): token %d, want %d", step, what, token, mapped)
						}
					} else {
						if uint64(token) <= top[name] {
							t.Fatalf("step %d (%s): new token %d not above %d", step, what, token, top[name])
						}
						tokens[name][g.Token], top[name] = uint64(token), uint64(token)
					}
				}
			case r < 10: // renew
				what = fmt.Sprintf("renew %s by %s, ttl %v", name, owner, ttl)
				rows, err := p.Query(ctx, "SELECT o_i FROM "+id("_renew")+"($1, $2, $3, $4)",
					[]string{name}, []string{owner}, []int64{int64(ttl)}, maxGrace)
				if err != nil {
					t.Fatal(err)
				}
				n := 0
				for rows.Next() {
					n++
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatalf("step %d (%s): %v", step, what, rows.Err())
				}
				if want := st.Renew(name, owner, ttl, now) != nil; (n > 0) != want {
					t.Fatalf("step %d (%s): renewed %v, want %v", step, what, n > 0, want)
				}
			case r < 13: // release
				what = fmt.Sprintf("release %s by %s", name, owner)
				var held bool
				rows, err := p.Query(ctx, "SELECT o_held FROM "+id("_release")+"($1, $2)", []string{name}, []string{owner})
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var h bool
					if err := rows.Scan(&h); err != nil {
						t.Fatal(err)
					}
					held = held || h
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatalf("step %d (%s): %v", step, what, rows.Err())
				}
				if want := st.Release(name, owner, now); held != want {
					t.Fatalf("step %d (%s): held %v, want %v", step, what, held, want)
				}
			case r < 14: // a new session
				sid := fmt.Sprintf("s%d", step)
				ttl := time.Duration(2+rng.IntN(2)) * unit
				what = fmt.Sprintf("make session %s, ttl %v", sid, ttl)
				var ok bool
				if err := p.QueryRow(ctx, "SELECT "+id("_session")+"($1, $2, true, $3)", sid, int64(ttl), maxGrace).Scan(&ok); err != nil || !ok {
					t.Fatalf("step %d (%s): %v, %v", step, what, ok, err)
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
				ttl := ttls[sid]
				what = fmt.Sprintf("renew session %s, ttl %v", sid, ttl)
				var ok bool
				if err := p.QueryRow(ctx, "SELECT "+id("_session")+"($1, $2, false, $3)", sid, int64(ttl), maxGrace).Scan(&ok); err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				_, want := live(sid)
				if want {
					sessions[sid] = now.Add(ttl)
				}
				if ok != want {
					t.Fatalf("step %d (%s): renewed %v, want %v", step, what, ok, want)
				}
			default: // time passes
				d := time.Duration(rng.IntN(3)) * unit
				what = fmt.Sprintf("%v pass", d)
				for _, q := range []string{
					"UPDATE " + id("") + " SET xc = xc - $1::interval, xr = xr - $1::interval, xe = xe - $1::interval WHERE xe IS NOT NULL",
					"UPDATE " + id("_holds") + " SET created = created - $1::interval, renewed = renewed - $1::interval, expires = expires - $1::interval",
					"UPDATE " + id("_sessions") + " SET expires = expires - $1::interval",
					"UPDATE " + id("_incarnation") + " SET grace = grace - $1::interval",
				} {
					exec(step, q, d)
				}
				now = now.Add(d)
			}
			// The live holders, as the store lists them and as the model has them.
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
				rows, err := p.Query(ctx, "SELECT o_owner, o_mode, o_lim, o_queued, o_expires - o_now FROM "+id("_list")+"($1, '', '')", n)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var o string
					var mode int16
					var lim int32
					var queued bool
					var left time.Duration
					if err := rows.Scan(&o, &mode, &lim, &queued, &left); err != nil {
						t.Fatal(err)
					}
					if !queued && left > 0 {
						got[fmt.Sprintf("%s %d %d", o, mode, lim)] = left
					}
				}
				if rows.Close(); rows.Err() != nil {
					t.Fatal(rows.Err())
				}
				if len(got) != len(want) {
					t.Fatalf("step %d (%s): %s held by %v, want %v", step, what, n, got, want)
				}
				for k, w := range want {
					// The store's clock ran on by the few seconds the walk
					// took: its time left is at most that much shorter.
					if g, ok := got[k]; !ok || g > w || g <= w-unit {
						t.Fatalf("step %d (%s): %s held by %v, want %v", step, what, n, got, want)
					}
				}
				var busy, bound, entries, bindings bool
				err = p.QueryRow(ctx, "SELECT k.busy, k.bound, EXISTS (SELECT 1 FROM "+id("_holds")+" e WHERE e.name = k.name), "+
					"EXISTS (SELECT 1 FROM "+id("_holds")+" e WHERE e.name = k.name AND e.sid IS NOT NULL) FROM "+id("")+" k WHERE k.name = $1", n).
					Scan(&busy, &bound, &entries, &bindings)
				if err != nil && !errors.Is(err, pgx.ErrNoRows) {
					t.Fatal(err)
				}
				if busy != entries || bindings && !bound {
					t.Fatalf("step %d (%s): %s busy %v with entries %v, bound %v with entries in sessions %v", step, what, n, busy, entries, bound, bindings)
				}
			}
		}
	})
}
