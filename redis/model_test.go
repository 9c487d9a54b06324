package redis_test

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	batonredis "github.com/baton-go/baton/redis"
)

// The scripts implement lockstate's rules, and hand the lock to queued
// requests when an entry leaves: drivertest's model check, with hand-off,
// and after each step the grants found in the mailboxes must be those the
// model handed off. Nothing expires (an hour's TTL): expiry is the
// conformance suite's.
func TestModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 5*time.Minute)
		var s *batonredis.Store
		owners := []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7"}
		drivertest.Model(t, drivertest.ModelConfig{
			Open: func(t testing.TB) driver.Store {
				s = open(t, nil)
				return s
			},
			HandsOff: true,
			// The model checked the listed holders' tokens against its
			// own: a grant in a mailbox must carry its owner's.
			AfterStep: func(t *testing.T, step int, name string, promoted map[string]uint64) {
				hs, err := s.List(ctx, &driver.Filter{Name: name})
				if err != nil {
					t.Fatal(err)
				}
				listed := map[string]uint64{}
				for _, h := range hs {
					listed[h.Owner] = h.Token
				}
				for _, o := range owners {
					mb := s.Mailbox(name, o)
					v, err := s.Client().LRange(ctx, mb, 0, -1).Result()
					if err != nil {
						t.Fatal(err)
					}
					_, ok := promoted[o]
					want := listed[o]
					switch {
					case ok && (len(v) != 1 || len(v[0]) != 24):
						t.Fatalf("step %d: mailbox of %s = %q, want the grant of token %d", step, o, v, want)
					case ok && uint64(math.Float64frombits(binary.BigEndian.Uint64([]byte(v[0])))) != want:
						t.Fatalf("step %d: %s handed token %v, want %d", step, o, math.Float64frombits(binary.BigEndian.Uint64([]byte(v[0]))), want)
					case !ok && len(v) > 0:
						t.Fatalf("step %d: mailbox of %s = %q, want nothing", step, o, v)
					}
					s.Client().Del(ctx, mb)
				}
			},
		})
	})
}
