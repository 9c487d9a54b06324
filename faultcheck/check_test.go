package faultcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/faultcheck/fenced"
)

// The checks catch what they are for: each history below is broken in
// one way, and only that way.
func TestChecksCatchViolations(t *testing.T) {
	s := int64(time.Second)
	op := func(proc int, name string, shared bool, limit int, token uint64, call, grant, end int64) *Op {
		return &Op{Proc: proc, Name: name, Shared: shared, Limit: limit, Token: token, Call: call, Grant: grant, End: end, Granted: true, Ended: true}
	}
	cases := []struct {
		name string
		ops  []*Op
		log  []fenced.Write
		want string // in the only violation; empty: none
	}{
		{name: "clean", ops: []*Op{op(1, "x", false, 0, 1, 0, 1*s, 2*s), op(2, "x", false, 0, 2, 0, 2*s, 3*s)}},
		{name: "exclusive overlap", ops: []*Op{op(1, "x", false, 0, 1, 0, 1*s, 3*s), op(2, "x", false, 0, 2, 0, 2*s, 4*s)}, want: "overlap"},
		{name: "shared beside exclusive", ops: []*Op{op(1, "rw", true, 0, 1, 0, 1*s, 3*s), op(2, "rw", false, 0, 2, 0, 2*s, 4*s)}, want: "overlap"},
		{name: "shared together", ops: []*Op{op(1, "rw", true, 0, 1, 0, 1*s, 3*s), op(2, "rw", true, 0, 2, 0, 2*s, 4*s)}},
		{name: "semaphore over its limit", ops: []*Op{
			op(1, "sem", true, 2, 1, 0, 1*s, 5*s), op(2, "sem", true, 2, 2, 0, 2*s, 5*s), op(3, "sem", true, 2, 3, 0, 3*s, 5*s)}, want: "semaphore"},
		{name: "token repeated", ops: []*Op{op(1, "x", false, 0, 5, 0, 1*s, 2*s), op(2, "x", false, 0, 5, 2*s, 3*s, 4*s)}, want: "tokens"},
		{name: "token went back", ops: []*Op{op(1, "x", false, 0, 5, 0, 1*s, 2*s), op(2, "x", false, 0, 4, 2*s, 3*s, 4*s)}, want: "tokens"},
		{name: "concurrent calls may get tokens in either order",
			ops: []*Op{op(1, "sem", true, 2, 5, 0, 2*s, 3*s), op(2, "sem", true, 2, 4, 1*s, 2*s, 3*s)}},
		{name: "fenced section interleaved", ops: []*Op{op(1, "x", false, 0, 1, 0, 1*s, 2*s), op(2, "x", false, 0, 2, 0, 2*s, 3*s)},
			log:  []fenced.Write{{Seq: 0, Name: "x", Token: 1, Accepted: true}, {Seq: 1, Name: "x", Token: 2, Accepted: true}, {Seq: 2, Name: "x", Token: 1, Accepted: true}},
			want: "fenced"},
		{name: "stale write refused", ops: []*Op{op(1, "x", false, 0, 1, 0, 1*s, 2*s), op(2, "x", false, 0, 2, 0, 2*s, 3*s)},
			log: []fenced.Write{{Seq: 0, Name: "x", Token: 1, Accepted: true}, {Seq: 1, Name: "x", Token: 2, Accepted: true}, {Seq: 2, Name: "x", Token: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRecorder()
			r.ops = c.ops
			res := r.check(c.log, Config{TTL: time.Second, MaxPoll: 100 * time.Millisecond}, 0, 10*s)
			switch {
			case c.want == "" && len(res.Violations) > 0:
				t.Fatalf("violations in a clean history: %q", res.Violations)
			case c.want != "" && (len(res.Violations) != 1 || !strings.Contains(res.Violations[0], c.want)):
				t.Fatalf("want one %q violation, got %q", c.want, res.Violations)
			}
		})
	}
}

// A holder killed while holding is measured until the next grant of its
// lock, and held to the bound.
func TestRegrantBound(t *testing.T) {
	s := int64(time.Second)
	cfg := Config{TTL: time.Second, MaxPoll: 100 * time.Millisecond} // bound 6s
	for _, c := range []struct {
		next int64
		bad  bool
	}{{next: 7 * s}, {next: 9 * s, bad: true}} {
		r := newRecorder()
		dead := &Op{Proc: 1, Name: "x", Token: 1, Call: 0, Grant: 1 * s, Granted: true}
		r.ops = []*Op{dead, {Proc: 2, Name: "x", Token: 2, Call: 1 * s, Grant: c.next, End: c.next + s, Granted: true, Ended: true}}
		r.open[1] = dead
		r.exited(1, 2*s, "killed")
		res := r.check(nil, cfg, 0, 20*s)
		if res.Deaths != 1 || res.Regrants != 1 || res.WorstRegrant != time.Duration(c.next-2*s) || (len(res.Violations) == 1) != c.bad {
			t.Fatalf("next grant at %v: %+v", time.Duration(c.next), res)
		}
	}
}

// A holder paused past its deadline and killed as soon as it resumed
// stopped, by its own view, at its deadline: no overlap with the holder
// granted meanwhile, and no death to time a re-grant from.
func TestKilledAfterDeadline(t *testing.T) {
	s := int64(time.Second)
	r := newRecorder()
	r.add(0, 1, event{K: "call", T: 0, Name: "x", Mode: "x"})
	r.add(0, 1, event{K: "grant", T: 1 * s, Name: "x", Token: 1, End: 4 * s})
	r.add(1, 2, event{K: "call", T: 0, Name: "x", Mode: "x"})
	r.add(1, 2, event{K: "grant", T: 4 * s, Name: "x", Token: 2, End: 7 * s})
	r.add(1, 2, event{K: "end", T: 5 * s, Name: "x", Token: 2, End: 5 * s})
	r.exited(1, 6*s, "killed")
	res := r.check(nil, Config{TTL: 3 * time.Second, MaxPoll: 100 * time.Millisecond}, 0, 10*s)
	if len(res.Violations) > 0 || res.Deaths != 0 || len(res.Errors) > 0 {
		t.Fatalf("%+v", res)
	}
}
