package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/drivertest"
)

// TestSessionModel runs drivertest.SessionModel on the file. The rules are
// lockstate's on both sides: what it checks is what the file keeps of
// them, the bindings, the sessions' table and its renewal, and which
// sessions a decision or a read applies (applySessions). Acquires bind as
// records.Store does. Time passes by moving the store's clock on.
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
	update := func(t testing.TB, names []string, f func(i int, st *lockstate.State, now time.Time)) {
		err := d.Update(ctx, names, func(i int, st *lockstate.State, now time.Time) error {
			f(i, st, now)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	drivertest.SessionModel(t, drivertest.SessionModelConfig{
		Acquire: func(t testing.TB, req *driver.Request, sid string) (g *driver.Grant, bound bool, err error) {
			update(t, []string{req.Name}, func(_ int, st *lockstate.State, now time.Time) {
				if g, err = st.Acquire(req, now); g == nil {
					return
				}
				if g.Extended { // keeps its binding
					i := slices.IndexFunc(st.Holders, func(e lockstate.Entry) bool { return e.Owner == req.Owner })
					bound = sid != "" && st.Holders[i].Session == sid
				} else if sid != "" {
					st.Bind(req.Owner, sid)
					bound = true
				}
			})
			return g, bound, err
		},
		Renew: func(t testing.TB, names []string, owner string, ttl time.Duration) []bool {
			renewed := make([]bool, len(names))
			update(t, names, func(i int, st *lockstate.State, now time.Time) {
				renewed[i] = st.Renew(names[i], owner, ttl, now) != nil
			})
			return renewed
		},
		Release: func(t testing.TB, name, owner string) (held bool) {
			update(t, []string{name}, func(_ int, st *lockstate.State, now time.Time) { held = st.Release(name, owner, now) })
			return held
		},
		KeepSession: func(t testing.TB, sid string, ttl time.Duration, create bool) bool {
			ok, err := sd.KeepSession(ctx, sid, ttl, create)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		},
		Pass: func(_ testing.TB, dt time.Duration) { clockShift.Add(int64(dt)) },
		Live: func(t testing.TB, name string) map[string]time.Duration {
			got := map[string]time.Duration{}
			err := d.Scan(ctx, name, "", func(_ string, st *lockstate.State, now time.Time) bool {
				for _, e := range st.Holders {
					if e.Expires.After(now) {
						got[fmt.Sprintf("%s %d %d", e.Owner, e.Mode, e.Limit)] = e.Expires.Sub(now)
					}
				}
				return true
			})
			if err != nil {
				t.Fatal(err)
			}
			return got
		},
		// A read applies only the sessions of holders past the expiry they
		// have in the file (lockstate.State.Sessions).
		LowerBound: true,
	})
}
