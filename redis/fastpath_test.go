package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
)

// Acquire's fast path (a name with no state) writes what the general path
// writes for the same grant, field for field, in a session or not: the
// general path alone is checked against lockstate (TestModel,
// TestSessionModel).
func TestFastPathWritesWhatGeneralPathWrites(t *testing.T) {
	drivertest.EachServer(t, "BATON_TEST_REDIS", func(t *testing.T, srv drivertest.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		prefix := fmt.Sprintf("batontest-fast-%d", time.Now().UnixNano())
		s, err := Open(ctx, srv.URL, &Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		rdb := s.rdb
		src := luaSource("acquire")
		general := strings.Replace(src, "if redis.call('EXISTS', KEYS[1]) == 0 then", "if false then", 1)
		if general == src {
			t.Fatal("acquire.lua has no fast path to turn off")
		}
		generalScript := redis.NewScript(general)
		// state runs sc for req on a fresh name, in a new session sid if
		// not empty, and describes what it wrote, times relative to the
		// server's (in a session, to 100ms: the session was made a moment
		// before), and returns apart the TTL of the state's hash (in ms,
		// rounded by the server).
		state := func(sc *redis.Script, req *driver.Request, sid string) (string, time.Duration) {
			b := s.base("same")
			in, _ := encodeInfo(req.Host, req.Meta)
			keys := []string{b + "r", b + "q", b + "c"}
			if sid != "" {
				if ok, err := s.KeepSession(ctx, sid, 30*time.Second, true); !ok || err != nil {
					t.Fatal(ok, err)
				}
				keys = append(keys, s.sessionKey(sid))
			}
			v, err := sc.Run(ctx, rdb, keys, "same", req.Owner, s.acquireArgs(req), in, sid).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			now := v[2]
			rel := func(x float64) float64 {
				if sid != "" {
					return math.Round((x-float64(now))/1e5) * 1e5
				}
				return x - float64(now)
			}
			all := rdb.HGetAll(ctx, b+"r").Val()
			session := rdb.HGetAll(ctx, s.sessionKey(sid)).Val()
			keys = rdb.Keys(ctx, prefix+":*").Val()
			defer rdb.Del(ctx, keys...)
			c, _ := rdb.Get(ctx, b+"c").Int64()
			ttl := rdb.PTTL(ctx, b+"r").Val()
			out := fmt.Sprintf("reply %v %v %v keys %d counter %d, ttl %v, session %d fields; ",
				[]int64{v[0], v[1] - now, v[3] - now, v[5], v[6]}, rel(float64(v[4])), len(v), len(keys),
				c-now, rdb.PTTL(ctx, b+"c").Val().Round(time.Minute), len(session))
			d := func(s string, i int) float64 { return math.Float64frombits(binary.BigEndian.Uint64([]byte(s[i:]))) }
			for _, f := range []string{"n", "L", "S", "o:" + req.Owner, "b:" + req.Owner} {
				val, ok := all[f]
				switch {
				case !ok:
					out += f + " absent; "
				case f == "S":
					u := func(i int) uint32 { return binary.BigEndian.Uint32([]byte(val[i:])) }
					out += fmt.Sprintf("S %d %d %d %d %v %v %v %v; ", u(0), u(4), u(8), u(12), d(val, 16), rel(d(val, 24)), rel(d(val, 32)), rel(d(val, 40)))
				case f == "o:"+req.Owner:
					out += fmt.Sprintf("entry %d %d %d %v %v %v %v %v %v %q; ", val[0], val[1], binary.BigEndian.Uint32([]byte(val[2:])), d(val, 6)-float64(now), d(val, 14), d(val, 22), d(val, 30)-float64(now), d(val, 38)-float64(now), rel(d(val, 46)), val[54:])
				default:
					out += fmt.Sprintf("%s %q; ", f, val)
				}
			}
			return out, ttl
		}
		for _, req := range []*driver.Request{
			{Owner: "o", Mode: driver.Exclusive, TTL: 1500 * time.Millisecond, Host: "h"},
			{Owner: "o", Mode: driver.Shared, Limit: 3, TTL: 1500 * time.Millisecond, Host: "h", Queue: true, QueueTTL: time.Second},
			{Owner: "o", Mode: driver.Shared, TTL: 1234567 * time.Microsecond, Meta: map[string]string{"k": "v"}},
		} {
			for _, sid := range []string{"", "fast-session"} {
				fast, fttl := state(acquireScript, req, sid)
				slow, sttl := state(generalScript, req, sid)
				if fast != slow {
					t.Errorf("%+v, session %q:\nfast path:    %s\ngeneral path: %s", req, sid, fast, slow)
				}
				if d := fttl - sttl; d < -time.Second || d > time.Second {
					t.Errorf("%+v, session %q: the state expires in %v after the fast path, %v after the general path", req, sid, fttl, sttl)
				}
			}
		}
	})
}
