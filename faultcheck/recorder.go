package faultcheck

import (
	"fmt"
	"slices"
	"sync"
)

// Op is one Lock call of a worker and, if granted, the hold that followed.
// Times are Mono nanoseconds.
type Op struct {
	Worker, Proc int
	Name         string
	Shared       bool
	Limit        int
	Token        uint64
	Call         int64 // Lock was called
	Grant        int64 // Lock returned the lease
	End          int64 // the holder stopped, by its own judgement (or was killed)
	Deadline     int64 // the lease's deadline, as last reported while held (0: none)
	Granted      bool
	Failed       bool   // Lock returned an error
	Ended        bool   // End is known
	Cause        string // how the hold ended: released, lost, killed, exited
}

// death is an exclusive holder killed while holding.
type death struct {
	op *Op
	at int64
}

// recorder assembles the workers' events into operations.
type recorder struct {
	mu       sync.Mutex
	ops      []*Op
	open     map[int]*Op // the current operation of each process
	writes   map[string]int
	fails    map[string]int // Lock errors, by message
	deaths   []death
	restarts [][2]int64
	faults   []faultSpan // for explaining violations
	errs     []error
}

func newRecorder() *recorder {
	return &recorder{open: map[int]*Op{}, writes: map[string]int{}, fails: map[string]int{}}
}

func (r *recorder) add(worker, proc int, e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.open[proc]
	if e.K != "call" && e.K != "ready" && (op == nil || op.Name != e.Name) {
		r.errs = append(r.errs, fmt.Errorf("process %d: %q event for %q outside its operation", proc, e.K, e.Name))
		return
	}
	switch e.K {
	case "call":
		op = &Op{Worker: worker, Proc: proc, Name: e.Name, Shared: e.Mode == "s", Limit: e.Limit, Call: e.T}
		r.ops = append(r.ops, op)
		r.open[proc] = op
	case "grant":
		op.Grant, op.Token, op.Granted, op.Deadline = e.T, e.Token, true, e.End
	case "deadline":
		op.Deadline = e.End
	case "fail":
		op.Failed = true
		msg := e.Err
		if len(msg) > 120 {
			msg = msg[:120] + "…"
		}
		r.fails[msg]++
		delete(r.open, proc)
	case "write":
		switch {
		case e.Err != "":
			r.writes["error"]++
		case e.OK:
			r.writes["accepted"]++
		default:
			r.writes["rejected"]++
		}
	case "end":
		op.End, op.Ended, op.Cause = e.End, true, "released"
		if e.Lost {
			op.Cause = "lost"
		}
		delete(r.open, proc)
	}
}

// exited closes the operation of a process that died at at.
func (r *recorder) exited(proc int, at int64, cause string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	op := r.open[proc]
	delete(r.open, proc)
	if op == nil || !op.Granted {
		return
	}
	end := at
	if op.Deadline > op.Grant && op.Deadline < at {
		end = op.Deadline // its lease ended before it died: it would have stopped then
	}
	op.End, op.Ended, op.Cause = end, true, cause
	if cause == "killed" && !op.Shared && end == at {
		r.deaths = append(r.deaths, death{op: op, at: at})
	}
}

// holding returns the hold proc is in, if any.
func (r *recorder) holding(proc int) *Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	if op := r.open[proc]; op != nil && op.Granted {
		c := *op
		return &c
	}
	return nil
}

func (r *recorder) restarted(from, to int64) {
	r.mu.Lock()
	r.restarts = append(r.restarts, [2]int64{from, to})
	r.mu.Unlock()
}

// faultSpan is one fault, as injected.
type faultSpan struct {
	kind     string
	worker   int // -1: the server
	proc     int // the worker's process when the fault began
	from, to int64
}

func (r *recorder) fault(kind string, worker, proc int, from, to int64) {
	r.mu.Lock()
	r.faults = append(r.faults, faultSpan{kind, worker, proc, from, to})
	r.mu.Unlock()
}

// faultsNear describes the faults on the given processes, and the
// server's, that overlap [from, to]. r.mu is held.
func (r *recorder) faultsNear(procs []int, from, to int64) string {
	out := ""
	for _, f := range r.faults {
		if f.to < from || f.from > to || (f.worker >= 0 && !slices.Contains(procs, f.proc)) {
			continue
		}
		who := "server"
		if f.worker >= 0 {
			who = fmt.Sprintf("process %d", f.proc)
		}
		out += fmt.Sprintf("; %s of %s %s–%s", f.kind, who, ms(f.from), ms(f.to))
	}
	return out
}
