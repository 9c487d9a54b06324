package faultcheck

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/baton-go/baton/faultcheck/fenced"
)

// Result is what a run did and found.
type Result struct {
	Store     string
	Seed      uint64
	Duration  time.Duration
	Processes int // worker processes started
	Ops       int // Lock calls
	Grants    int
	Failed    int            // Lock calls that returned an error (timeouts under faults)
	Lost      int            // leases that ended before their holder released them
	Writes    map[string]int // to the fenced resource: accepted, rejected (stale), error
	FailedBy  map[string]int // Lock errors, by message
	Faults    map[string]int
	// Deaths is the number of exclusive holders killed while holding;
	// Regrants how many of them were followed by a grant of the lock in
	// the run, WorstRegrant the longest wait for it (from the death, or
	// from the later call of the next holder), Bound the bound it is held
	// to (a server restart in the window adds its duration and a TTL).
	Deaths       int
	Regrants     int
	WorstRegrant time.Duration
	WorstWhat    string        // the worst re-grant's lock, death, next call and grant, and its own bound
	RegrantP50   time.Duration // the median re-grant
	RegrantP90   time.Duration
	Bound        time.Duration
	Violations   []string
	Errors       []error // the harness itself failed (a worker crashed…)
	// KnownRaces counts workers built with -race that found only a known
	// data race inside a store's driver (knownRaces).
	KnownRaces int
}

// Bound is the stated bound on the time from the death of a holder to the
// next grant of its lock: the TTL (or session timeout), by when the store
// lets the hold go; another TTL, for a waiter whose turn came just as it
// was paused or cut off (it is granted, or keeps its queue place, until its
// own TTL or session runs out); ten MaxPolls, by when queue entries of
// dead waiters have gone; and 3s for a loaded machine.
func Bound(ttl, maxPoll time.Duration) time.Duration { return 2*ttl + 10*maxPoll + 3*time.Second }

// check checks the recorded history and the fenced resource's log.
func (r *recorder) check(log []fenced.Write, cfg Config, start, stop int64) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &Result{Duration: time.Duration(stop - start), Writes: r.writes, FailedBy: r.fails, Bound: Bound(cfg.TTL, cfg.MaxPoll)}
	res.Errors = append(res.Errors, r.errs...)
	byName := map[string][]*Op{}
	for _, op := range r.ops {
		res.Ops++
		if op.Failed {
			res.Failed++
		}
		if !op.Granted {
			continue
		}
		res.Grants++
		if op.Cause == "lost" {
			res.Lost++
		}
		if !op.Ended {
			op.End = stop // still held when the run ended (a worker that did not stop)
		}
		byName[op.Name] = append(byName[op.Name], op)
	}
	v := &res.Violations
	checkFenced(log, byName, v)
	checkTokens(r.ops, v)
	for _, ops := range byName {
		r.checkOverlaps(ops, v)
	}
	r.checkRegrants(byName, cfg, start, res)
	return res
}

// checkFenced checks the fenced resource's log: per name, accepted
// tokens never decrease, and the accepted writes of one token (one
// holder's critical section) are never interleaved with another token's.
// It also checks that every token written was granted for that name.
func checkFenced(log []fenced.Write, byName map[string][]*Op, v *[]string) {
	granted := map[string]map[uint64]bool{}
	for name, ops := range byName {
		granted[name] = map[uint64]bool{}
		for _, op := range ops {
			granted[name][op.Token] = true
		}
	}
	last := map[string]uint64{}
	closed := map[string]map[uint64]bool{}
	for _, w := range log {
		if !granted[w.Name][w.Token] {
			*v = append(*v, fmt.Sprintf("fenced: write #%d to %q with token %d, which no grant of it had", w.Seq, w.Name, w.Token))
		}
		if !w.Accepted {
			continue
		}
		if closed[w.Name] == nil {
			closed[w.Name] = map[uint64]bool{}
		}
		l, seen := last[w.Name]
		switch {
		case seen && w.Token < l:
			*v = append(*v, fmt.Sprintf("fenced: write #%d to %q accepted token %d after token %d", w.Seq, w.Name, w.Token, l))
		case closed[w.Name][w.Token]:
			*v = append(*v, fmt.Sprintf("fenced: write #%d to %q with token %d resumed a critical section after another token's writes", w.Seq, w.Name, w.Token))
		case seen && w.Token != l:
			closed[w.Name][l] = true
		}
		last[w.Name] = w.Token
	}
}

// tokenModel is the sequential specification of fencing tokens, per lock
// name: every grant's token is larger than every token granted before it.
// Checked with porcupine, a grant may take effect at any moment between
// its Lock call and its return, as the store decides it then.
var tokenModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range h {
			n := op.Input.(string)
			if by[n] == nil {
				names = append(names, n)
			}
			by[n] = append(by[n], op)
		}
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, by[n])
		}
		return out
	},
	Init: func() any { return uint64(0) },
	Step: func(state, _, output any) (bool, any) {
		t := output.(uint64)
		return t > state.(uint64), t
	},
	DescribeOperation: func(in, out any) string { return fmt.Sprintf("grant %s → %d", in, out) },
}

// checkTokens checks that tokens strictly increase per name across all
// grants, in an order consistent with real time (linearizability).
// Operations of killed workers whose outcome is unknown are left out:
// a grant nobody saw constrains nothing here.
func checkTokens(ops []*Op, v *[]string) {
	var h []porcupine.Operation
	for _, op := range ops {
		if op.Granted {
			h = append(h, porcupine.Operation{ClientId: op.Proc, Input: op.Name, Call: op.Call, Output: op.Token, Return: op.Grant})
		}
	}
	switch porcupine.CheckOperationsTimeout(tokenModel, h, 2*time.Minute) {
	case porcupine.Illegal:
		// Say which: the first pair out of order.
		msg := "tokens: no order of the grants consistent with real time has strictly increasing tokens per name"
		for _, a := range ops {
			for _, b := range ops {
				if a.Granted && b.Granted && a.Name == b.Name && a != b && b.Call > a.Grant && b.Token <= a.Token {
					msg += fmt.Sprintf(" (%q: process %d got %d, then process %d asked and got %d)", a.Name, a.Proc, a.Token, b.Proc, b.Token)
					*v = append(*v, msg)
					return
				}
			}
		}
		*v = append(*v, msg)
	case porcupine.Unknown:
		*v = append(*v, "tokens: porcupine did not finish within 2 minutes")
	}
}

// checkOverlaps checks the holders' own view of one name: the intervals
// [grant, end) of exclusive holders overlap no other hold, and no more
// semaphore holders than the limit overlap.
func (r *recorder) checkOverlaps(ops []*Op, v *[]string) {
	// A hold whose lease ended before its holder saw the grant is empty:
	// the holder never acted on it.
	ops = slices.DeleteFunc(slices.Clone(ops), func(op *Op) bool { return op.End <= op.Grant })
	slices.SortFunc(ops, func(a, b *Op) int { return cmp.Compare(a.Grant, b.Grant) })
	var active []*Op // holds whose interval contains the current grant
	for i, a := range ops {
		for j := i + 1; j < len(ops) && ops[j].Grant < a.End; j++ {
			if b := ops[j]; !a.Shared || !b.Shared {
				*v = append(*v, fmt.Sprintf("overlap on %q: process %d (token %d, %s, %s) held %s–%s, process %d (token %d, %s, %s) held %s–%s%s",
					a.Name, a.Proc, a.Token, kind(a), a.Cause, ms(a.Grant), ms(a.End), b.Proc, b.Token, kind(b), b.Cause, ms(b.Grant), ms(b.End),
					r.faultsNear([]int{a.Proc, b.Proc}, a.Grant-int64(10*time.Second), max(a.End, b.End))))
			}
		}
		active = slices.DeleteFunc(active, func(b *Op) bool { return b.End <= a.Grant })
		if a.Shared && a.Limit > 0 && len(active)+1 > a.Limit {
			*v = append(*v, fmt.Sprintf("semaphore %q of %d had %d holders when process %d was granted token %d",
				a.Name, a.Limit, len(active)+1, a.Proc, a.Token))
		}
		active = append(active, a)
	}
}

func kind(op *Op) string {
	if !op.Shared {
		return "exclusive"
	}
	if op.Limit > 0 {
		return fmt.Sprintf("semaphore of %d", op.Limit)
	}
	return "shared"
}

// checkRegrants measures, for every exclusive holder killed while holding,
// the time until its lock was next granted, and holds it to the bound.
func (r *recorder) checkRegrants(byName map[string][]*Op, cfg Config, start int64, res *Result) {
	var waits []time.Duration
	defer func() {
		if len(waits) > 0 {
			slices.Sort(waits)
			res.RegrantP50, res.RegrantP90 = waits[len(waits)/2], waits[len(waits)*9/10]
		}
	}()
	for _, d := range r.deaths {
		res.Deaths++
		var next *Op
		for _, op := range byName[d.op.Name] {
			if op.Grant > d.at && (next == nil || op.Grant < next.Grant) {
				next = op
			}
		}
		if next == nil {
			continue // the run ended first
		}
		res.Regrants++
		wait := time.Duration(next.Grant - max(d.at, next.Call))
		waits = append(waits, wait)
		bound := res.Bound
		for _, rs := range r.restarts {
			if rs[0] < next.Grant && rs[1] > d.at-int64(cfg.TTL) {
				bound += time.Duration(rs[1]-rs[0]) + cfg.TTL
			}
		}
		if wait > res.WorstRegrant {
			res.WorstRegrant = wait
			res.WorstWhat = fmt.Sprintf("%q: its holder (process %d) killed %s into the run, the next holder's Lock called at %s, granted at %s; bound %s",
				d.op.Name, d.op.Proc, ms(d.at-start), ms(next.Call-start), ms(next.Grant-start), bound)
		}
		if wait > bound {
			res.Violations = append(res.Violations, fmt.Sprintf("re-grant: %q, whose holder (process %d, token %d) was killed at %s, was granted again only after %s (bound %s)",
				d.op.Name, d.op.Proc, d.op.Token, ms(d.at), wait.Round(time.Millisecond), bound))
		}
	}
}
