package mysql_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestSessionModel compares the store's judgment of holds in sessions with
// lockstate's (Bind, ApplySessions), through time: a random walk of
// acquires (in a session or not; exclusive, shared, semaphores), renewals
// (alone or in a batch), releases, sessions made and renewed, and time
// passing, on two names.
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
		db := rawDB(t)
		seed := rand.Uint64()
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 2))
		const unit = 10 * time.Second
		exec := func(step int, q string, args ...any) {
			t.Helper()
			if _, err := db.ExecContext(ctx, q, args...); err != nil {
				t.Fatalf("step %d: %s: %v", step, q, err)
			}
		}
		// Grace periods cover the walk's TTLs; the incarnation starts.
		var max int64
		if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(?, -1)", int64(mysql.DefaultMaxGrace)).Scan(&max); err != nil {
			t.Fatal(err)
		}
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
		// entry is one element of a batch: [hex name, hex owner, rest].
		entry := func(name, owner string, rest any) string {
			return fmt.Sprintf(`["%s","%s",%v]`, hex.EncodeToString([]byte(name)), hex.EncodeToString([]byte(owner)), rest)
		}
		key := func(name, owner string, rest any) string { return "[" + entry(name, owner, rest) + "]" }
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
				var status, flags int8
				var token uint64
				var y any
				err := db.QueryRowContext(ctx, "CALL "+tb+"_grant(?, ?, ?, ?, ?, 0, 0, 'h', NULL, 0, '', ?)",
					name, owner, int8(mode), int32(limit), int64(ttl), sid).
					Scan(&status, &token, &y, &y, &y, &y, &y, &y, &y, &flags)
				if err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				bound := flags&2 != 0
				req := &driver.Request{Name: name, Owner: owner, Mode: mode, Limit: limit, TTL: ttl}
				g, merr := st.Acquire(req, now)
				want, wantBound := int8(2), false
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
						if mapped != token {
							t.Fatalf("step %d (%s): token %d, want %d", step, what, token, mapped)
						}
					} else {
						if token <= top[name] {
							t.Fatalf("step %d (%s): new token %d not above %d", step, what, token, top[name])
						}
						tokens[name][g.Token], top[name] = token, token
					}
				}
			case r < 10 && rng.IntN(2) == 0: // renew
				what = fmt.Sprintf("renew %s by %s, ttl %v", name, owner, ttl)
				var res string
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_renew(?)", key(name, owner, int64(ttl))).Scan(&res); err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				if want := st.Renew(name, owner, ttl, now) != nil; (res != "") != want {
					t.Fatalf("step %d (%s): renewed %q, want %v", step, what, res, want)
				}
			case r < 10: // a batch of renewals: the owner's holds of both names
				what = fmt.Sprintf("renew both names by %s, ttl %v", owner, ttl)
				batch := "[" + entry(names[0], owner, int64(ttl)) + "," + entry(names[1], owner, int64(ttl)) + "]" // sorted by name
				var res string
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_renew(?)", batch).Scan(&res); err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				for i, n := range names {
					model[n].ApplySessions(live)
					want := model[n].Renew(n, owner, ttl, now) != nil
					got := strings.HasPrefix(res, fmt.Sprint(i+1, ",")) || strings.Contains(res, fmt.Sprint(";", i+1, ","))
					if got != want {
						t.Fatalf("step %d (%s): %s renewed %v (%q), want %v", step, what, n, got, res, want)
					}
				}
			case r < 13: // release
				what = fmt.Sprintf("release %s by %s", name, owner)
				var res string
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_release(?)", key(name, owner, `""`)).Scan(&res); err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				if want := st.Release(name, owner, now); strings.Contains(res, ",1;") != want {
					t.Fatalf("step %d (%s): released %q, want held %v", step, what, res, want)
				}
			case r < 14: // a new session
				sid := fmt.Sprintf("s%d", step)
				ttl := time.Duration(2+rng.IntN(2)) * unit
				what = fmt.Sprintf("make session %s, ttl %v", sid, ttl)
				var status int8
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_session(?, ?, 1)", sid, int64(ttl)).Scan(&status); err != nil || status != 1 {
					t.Fatalf("step %d (%s): %v, %v", step, what, status, err)
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
				var status int8
				if err := db.QueryRowContext(ctx, "CALL "+tb+"_session(?, ?, 0)", sid, int64(ttl)).Scan(&status); err != nil {
					t.Fatalf("step %d (%s): %v", step, what, err)
				}
				_, want := live(sid)
				if want {
					sessions[sid] = now.Add(ttl)
				}
				if (status == 1) != want {
					t.Fatalf("step %d (%s): renewed %v, want %v", step, what, status, want)
				}
			default: // time passes
				d := time.Duration(rng.IntN(3)) * unit
				what = fmt.Sprintf("%v pass", d)
				us := d.Microseconds()
				exec(step, "UPDATE "+tb+"_holds SET created = created - INTERVAL ? MICROSECOND, renewed = renewed - INTERVAL ? MICROSECOND, expires = expires - INTERVAL ? MICROSECOND", us, us, us)
				exec(step, "UPDATE "+tb+"_sessions SET expires = expires - INTERVAL ? MICROSECOND", us)
				exec(step, "UPDATE "+tb+"_state SET grace = grace - INTERVAL ? MICROSECOND WHERE name = ''", us)
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
				rows, err := db.QueryContext(ctx, "SELECT owner, mode, lim, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires) FROM "+tb+"_holds WHERE name = ? AND queued = 0", n)
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var o string
					var mode, lim int
					var left int64
					if err := rows.Scan(&o, &mode, &lim, &left); err != nil {
						t.Fatal(err)
					}
					if left > 0 {
						got[fmt.Sprintf("%s %d %d", o, mode, lim)] = time.Duration(left) * time.Microsecond
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
			}
		}
	})
}
