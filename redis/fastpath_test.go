package redis

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"slices"
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
		s, prefix := openFresh(ctx, t, srv, "fast")
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

// The contended fast paths, a release that hands an exclusive hold to the
// head of a queue of exclusive requests and an exclusive request that joins
// a queue, write what the general path writes on the same state: each runs
// on a state made through the store, and the general path on the same
// state restored, and every key of the store is compared (times the
// operation wrote relative to its clock, others as they were; expiries of
// keys to 200ms).
func TestContendedFastPathsWriteWhatGeneralPathWrites(t *testing.T) {
	drivertest.EachServer(t, "BATON_TEST_REDIS", func(t *testing.T, srv drivertest.Server) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s, prefix := openFresh(ctx, t, srv, "cfast")
		rdb := s.rdb
		rel := luaSource("release")
		relGeneral := strings.Replace(rel, "if not handoff(", "if true or not handoff(", 1)
		acq := luaSource("acquire")
		acqGeneral := strings.Replace(acq, "if mode == 1 and queue == 1 then", "if false then", 1)
		if relGeneral == rel || acqGeneral == acq {
			t.Fatal("release.lua or acquire.lua has no contended fast path to turn off")
		}
		const name = "same"
		b := s.base(name)
		ex := func(owner string, ttl, qttl time.Duration) *driver.Request {
			return &driver.Request{Name: name, Owner: owner, Mode: driver.Exclusive, TTL: ttl, Queue: true, QueueTTL: qttl, Host: "h-" + owner}
		}
		// setup makes the state: the requests in order (the first holds,
		// with session sid if not empty), and returns a snapshot of every
		// key.
		setup := func(sid string, reqs ...*driver.Request) map[string][2]string {
			if keys := rdb.Keys(ctx, prefix+":*").Val(); len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			if sid != "" {
				if ok, err := s.KeepSession(ctx, sid, 30*time.Second, true); !ok || err != nil {
					t.Fatal(ok, err)
				}
			}
			for i, r := range reqs {
				in, _ := encodeInfo(r.Host, r.Meta)
				id := ""
				if i == 0 {
					id = sid
				}
				if _, _, err := s.acquire(ctx, r, in, id); (err == nil) != (i == 0) {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			snap := map[string][2]string{}
			for _, k := range rdb.Keys(ctx, prefix+":*").Val() {
				snap[k] = [2]string{rdb.Dump(ctx, k).Val(), fmt.Sprint(max(rdb.PTTL(ctx, k).Val().Milliseconds(), 0))}
			}
			return snap
		}
		restore := func(snap map[string][2]string) {
			if keys := rdb.Keys(ctx, prefix+":*").Val(); len(keys) > 0 {
				rdb.Del(ctx, keys...)
			}
			for k, v := range snap {
				var ttl int64
				fmt.Sscan(v[1], &ttl)
				if err := rdb.RestoreReplace(ctx, k, time.Duration(ttl)*time.Millisecond, v[0]).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		// describe lists every key of the store: its type, value and time
		// to live. A time (a double past 1e12 µs) found in old is printed
		// as it is, any other relative to the earliest such, the clock of
		// the operation.
		describe := func(old map[float64]bool) (string, map[string]time.Duration) {
			keys := rdb.Keys(ctx, prefix+":*").Val()
			slices.Sort(keys)
			var times []float64
			type val struct {
				f     func(now float64) string
				plain string
			}
			var parts []val
			d := func(x float64) val {
				if x < 1e12 || old[x] {
					return val{plain: fmt.Sprint(x)}
				}
				times = append(times, x)
				return val{f: func(now float64) string { return fmt.Sprintf("now%+v", x-now) }}
			}
			text := func(s string) val { return val{plain: s} }
			dbl := func(s string, i int) float64 { return math.Float64frombits(binary.BigEndian.Uint64([]byte(s[i:]))) }
			ttls := map[string]time.Duration{}
			for _, k := range keys {
				ttls[k] = rdb.PTTL(ctx, k).Val()
				parts = append(parts, text("\n"+strings.TrimPrefix(k, prefix)+" "+rdb.Type(ctx, k).Val()+":"))
				switch rdb.Type(ctx, k).Val() {
				case "hash":
					all := rdb.HGetAll(ctx, k).Val()
					fs := slices.Sorted(maps.Keys(all))
					for _, f := range fs {
						v := all[f]
						parts = append(parts, text(" "+f+"="))
						switch {
						case f == "S":
							u := func(i int) uint32 { return binary.BigEndian.Uint32([]byte(v[i:])) }
							parts = append(parts, text(fmt.Sprintf("%d,%d,%d,%d,", u(0), u(4), u(8), u(12))))
							for i := 16; i < 48; i += 8 {
								parts = append(parts, d(dbl(v, i)), text(","))
							}
						case strings.HasPrefix(f, "o:"):
							parts = append(parts, text(fmt.Sprintf("%d,%d,%d,", v[0], v[1], binary.BigEndian.Uint32([]byte(v[2:])))))
							for i := 6; i < 54; i += 8 {
								parts = append(parts, d(dbl(v, i)), text(","))
							}
							parts = append(parts, text(fmt.Sprintf("%q", v[54:])))
						default:
							parts = append(parts, text(fmt.Sprintf("%q", v)))
						}
					}
				case "zset":
					for _, z := range rdb.ZRangeWithScores(ctx, k, 0, -1).Val() {
						parts = append(parts, text(fmt.Sprintf(" %v=%v", z.Member, z.Score)))
					}
				case "list":
					for _, v := range rdb.LRange(ctx, k, 0, -1).Val() {
						parts = append(parts, text(" ["), d(dbl(v, 0)), text(","), d(dbl(v, 8)), text(","), d(dbl(v, 16)), text("]"))
					}
				case "string":
					x, _ := rdb.Get(ctx, k).Float64()
					parts = append(parts, text(" "), d(x))
				}
			}
			now := slices.Min(append(times, math.MaxFloat64))
			var out strings.Builder
			for _, p := range parts {
				if p.f != nil {
					out.WriteString(p.f(now))
				} else {
					out.WriteString(p.plain)
				}
			}
			return out.String(), ttls
		}
		oldTimes := func(snap map[string][2]string) map[float64]bool {
			restore(snap)
			old := map[float64]bool{}
			for _, k := range rdb.Keys(ctx, prefix+":*").Val() {
				switch rdb.Type(ctx, k).Val() {
				case "hash":
					for f, v := range rdb.HGetAll(ctx, k).Val() {
						var from, to int
						switch {
						case f == "S":
							from, to = 16, 48
						case strings.HasPrefix(f, "o:"):
							from, to = 6, 54
						}
						for i := from; i < to; i += 8 {
							old[math.Float64frombits(binary.BigEndian.Uint64([]byte(v[i:])))] = true
						}
					}
				case "string":
					x, _ := rdb.Get(ctx, k).Float64()
					old[x] = true
				}
			}
			return old
		}
		compare := func(what string, snap map[string][2]string, run func(general bool)) {
			old := oldTimes(snap)
			restore(snap)
			run(false)
			fast, fttl := describe(old)
			restore(snap)
			run(true)
			slow, sttl := describe(old)
			if fast != slow {
				t.Errorf("%s:\nfast path:    %s\ngeneral path: %s", what, fast, slow)
			}
			for k, d := range fttl {
				if diff := d - sttl[k]; diff < -200*time.Millisecond || diff > 200*time.Millisecond {
					t.Errorf("%s: %s expires in %v after the fast path, %v after the general path", what, k, d, sttl[k])
				}
			}
		}
		release := func(owner string) func(bool) {
			return func(general bool) {
				sc := releaseScript
				if general {
					sc = redis.NewScript(relGeneral)
				}
				v, err := sc.Run(ctx, rdb, []string{b + "r"}, s.linger, owner).Slice()
				if err != nil || len(v) == 0 || v[0] != int64(1) {
					t.Fatalf("release %s: %v %v", owner, v, err)
				}
			}
		}
		acquire := func(r *driver.Request) func(bool) {
			return func(general bool) {
				sc := acquireScript
				if general {
					sc = redis.NewScript(acqGeneral)
				}
				in, _ := encodeInfo(r.Host, r.Meta)
				v, err := sc.Run(ctx, rdb, []string{b + "r", b + "q", b + "c"}, name, r.Owner, s.acquireArgs(r), in, "").Int64Slice()
				if err != nil || len(v) != 3 || v[0] != 0 {
					t.Fatalf("acquire %s: %v %v", r.Owner, v, err)
				}
			}
		}
		sec := time.Second
		for _, sid := range []string{"", "cfast-session"} {
			// The name's keys expire later after the hand-off (the new
			// holder's TTL is longer), or not.
			compare("hand-off, the queue's keys extended "+sid,
				setup(sid, ex("h", 3*sec, sec), ex("a", 9*sec, 2*sec), ex("b", sec, 4*sec)), release("h"))
			compare("hand-off, no expiry moved "+sid,
				setup(sid, ex("h", 20*sec, sec), ex("a", sec, 2*sec), ex("b", sec, 4*sec)), release("h"))
			compare("hand-off to the last waiter "+sid,
				setup(sid, ex("h", 3*sec, sec), ex("a", 40*sec, 2*sec)), release("h"))
		}
		compare("the first to queue", setup("", ex("h", 3*sec, sec)), acquire(ex("a", 9*sec, 2*sec)))
		compare("the first to queue, the keys extended", setup("", ex("h", 3*sec, sec)), acquire(ex("a", 9*sec, 20*sec)))
		compare("the third to queue", setup("", ex("h", 30*sec, sec), ex("a", 9*sec, 2*sec)), acquire(ex("b", 2*sec, 500*time.Millisecond)))
		compare("the third to queue, before its expiry bound", setup("", ex("h", 30*sec, sec), ex("a", 9*sec, 2*sec)), acquire(ex("b", 2*sec, 1500*time.Millisecond)))
	})
}

// openFresh opens a Store on srv under a prefix of its own, and deletes
// every key under it when the test ends.
func openFresh(ctx context.Context, t *testing.T, srv drivertest.Server, kind string) (*Store, string) {
	t.Helper()
	prefix := fmt.Sprintf("batontest-%s-%d", kind, time.Now().UnixNano())
	s, err := Open(ctx, srv.URL, &Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		if err := DeleteKeys(srv.URL, prefix+":"); err != nil {
			t.Errorf("deleting the test's keys: %v", err)
		}
	})
	return s, prefix
}
