package faultcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/faultcheck/fenced"
)

// workerEnv carries a worker's configuration, as JSON, from the harness to
// the process it starts: its own executable (the faultcheck command, or
// the test binary) in worker mode.
const workerEnv = "BATON_FAULTCHECK_WORKER"

// The lock names every worker uses, under the run's prefix.
const (
	lockX   = "x"   // exclusive, fenced writes
	lockSem = "sem" // semaphore of semLimit
	lockRW  = "rw"  // shared, or exclusive with fenced writes
)

const semLimit = 2

// WorkerConfig is what one worker process is told.
type WorkerConfig struct {
	ID       int           // the worker's slot
	URL      string        // the store, through this worker's proxy
	Resource string        // base URL of the fenced resource
	Prefix   string        // lock name prefix of the run
	TTL      time.Duration // lease length
	MaxPoll  time.Duration
	// MonoOffset is what the worker's CLOCK_MONOTONIC is ahead of the
	// harness's (a time namespace); it is subtracted from every event.
	MonoOffset int64
	Seed       uint64
}

// event is one line a worker writes to its stdout.
type event struct {
	K     string `json:"k"` // ready, call, grant, deadline, fail, write, end
	T     int64  `json:"t"` // Mono, harness clock
	Name  string `json:"n,omitempty"`
	Mode  string `json:"m,omitempty"` // x or s
	Limit int    `json:"l,omitempty"`
	Token uint64 `json:"tok,omitempty"`
	// End: for "end", when the holder stopped, by its own judgement: just
	// before Release, or its lease's deadline if that came first; for
	// "grant" and "deadline", the lease's deadline.
	End  int64  `json:"end,omitempty"`
	Lost bool   `json:"lost,omitempty"` // the lease ended before the holder released it
	OK   bool   `json:"ok,omitempty"`   // write accepted
	Err  string `json:"err,omitempty"`
}

// IsWorker reports whether this process was started by the harness as a
// worker. Programs that run the harness call it first thing in main (or
// TestMain) and then RunWorker.
func IsWorker() bool { return os.Getenv(workerEnv) != "" }

// RunWorker runs the worker described by the environment until its stdin
// closes, and returns the process's exit code.
func RunWorker() int {
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "faultcheck worker:", err)
		return 2
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() {
		// The harness closes our stdin to stop us; if it dies, so do we.
		io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	w := &worker{cfg: cfg, out: os.Stdout, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))),
		http: &http.Client{Timeout: 2 * time.Second}}
	if err := w.run(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "faultcheck worker:", err)
		return 1
	}
	return 0
}

type worker struct {
	cfg  WorkerConfig
	mu   sync.Mutex
	out  io.Writer
	rng  *rand.Rand
	http *http.Client
}

// emit writes e as one line, in one write, so that a SIGKILL never leaves
// half an event.
func (w *worker) emit(e event) {
	if e.T == 0 {
		e.T = w.now()
	}
	b, _ := json.Marshal(e)
	w.mu.Lock()
	w.out.Write(append(b, '\n'))
	w.mu.Unlock()
}

func (w *worker) now() int64 { return Mono() - w.cfg.MonoOffset }

func (w *worker) run(ctx context.Context) error {
	opts := &baton.Options{TTL: w.cfg.TTL, MaxPoll: w.cfg.MaxPoll, OnEvent: func(e baton.Event) {
		// The worker's log (in the servers' logs directory) explains a
		// violation: when each lease was renewed or lost.
		fmt.Fprintf(os.Stderr, "%s pid %d: %s %s token %d %v\n", ms(w.now()), os.Getpid(), e.Kind, e.Name, e.Token, e.Err)
	}}
	var client *baton.Client
	for {
		// The store may be restarting: retry until it answers.
		octx, cancel := context.WithTimeout(ctx, 2*w.cfg.TTL)
		c, err := baton.Open(octx, w.cfg.URL, opts)
		cancel()
		if err == nil {
			client = c
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		fmt.Fprintln(os.Stderr, "faultcheck worker: open:", err)
		time.Sleep(200 * time.Millisecond)
	}
	defer client.Close()
	if w.rng.IntN(2) == 0 {
		// Hold a lock of the worker's own for its life: baton offers the
		// leases a client takes while it holds another to the store's
		// session, where the store keeps one (SQLite, PostgreSQL, MySQL,
		// Redis), so that half the workers run their leases in sessions
		// and half on their own.
		octx, cancel := context.WithTimeout(ctx, 2*w.cfg.TTL)
		_, err := client.TryLock(octx, w.cfg.Prefix+"own-"+baton.NewOwner(), nil)
		cancel()
		if err != nil {
			fmt.Fprintln(os.Stderr, "faultcheck worker: a lock of its own:", err)
		}
	}
	w.emit(event{K: "ready"})
	for ctx.Err() == nil {
		w.once(ctx, client)
	}
	return nil
}

// once takes one lock, works under it, and releases it.
func (w *worker) once(ctx context.Context, c *baton.Client) {
	var name string
	o := &baton.LockOptions{}
	switch r := w.rng.IntN(100); {
	case r < 50:
		name = lockX
	case r < 75:
		name, o.Shared, o.Limit = lockSem, true, semLimit
	default:
		name, o.Shared = lockRW, w.rng.IntN(2) == 0
	}
	mode := "x"
	if o.Shared {
		mode = "s"
	}
	full := w.cfg.Prefix + name
	call := w.now()
	w.emit(event{K: "call", T: call, Name: name, Mode: mode, Limit: o.Limit})
	lctx, cancel := context.WithTimeout(ctx, 4*w.cfg.TTL)
	l, err := c.Lock(lctx, full, o)
	cancel()
	if err != nil {
		w.emit(event{K: "fail", Name: name, Err: err.Error()})
		sleep(ctx, time.Duration(100+w.rng.IntN(300))*time.Millisecond) // not a spin while cut off
		return
	}
	g := event{K: "grant", Name: name, Token: l.Token()}
	if d := l.Deadline(); !d.IsZero() {
		g.End = monoAt(d) - w.cfg.MonoOffset
	}
	w.emit(g)
	// Tell the harness the lease's deadline with the grant and now and
	// then, so that if we are killed it knows when we would have stopped
	// anyway (a holder paused, resumed and killed before it looked).
	hctx, cancelBeat := context.WithCancel(ctx)
	beat := make(chan struct{})
	stopBeat := func() { cancelBeat(); <-beat }
	go func() {
		defer close(beat)
		for sleep(hctx, 100*time.Millisecond) {
			if d := l.Deadline(); !d.IsZero() {
				w.emit(event{K: "deadline", Name: name, End: monoAt(d) - w.cfg.MonoOffset})
			}
		}
	}()

	// Work in three steps; an exclusive holder writes to the fenced
	// resource at each. Most holds are short; one in fifteen outlives a
	// keepalive renewal or two.
	hold := time.Duration(50+w.rng.IntN(350)) * time.Millisecond
	if w.rng.IntN(15) == 0 {
		hold = w.cfg.TTL/2 + time.Duration(w.rng.Int64N(int64(w.cfg.TTL/2)))
	}
	for i, step := range []string{"begin", "mid", "end"} {
		if i > 0 && !sleep(ctx, hold/2) {
			break
		}
		if l.Err() != nil {
			break // a correct holder stops when its lease is lost
		}
		if o.Shared {
			continue
		}
		// Preparing the write takes a moment after the check: a pause
		// that lands here makes the write stale, which only fencing
		// catches.
		sleep(ctx, time.Duration(20+w.rng.IntN(30))*time.Millisecond)
		werr := fenced.Post(ctx, w.http, w.cfg.Resource, name, l.Token(), fmt.Sprintf("w%d %s", w.cfg.ID, step))
		if werr != nil && !errors.Is(werr, fenced.ErrStale) {
			w.emit(event{K: "write", Name: name, Token: l.Token(), Err: werr.Error()})
			continue
		}
		w.emit(event{K: "write", Name: name, Token: l.Token(), OK: werr == nil})
	}
	stopBeat()
	end := w.now()
	if d := l.Deadline(); !d.IsZero() && time.Now().After(d) {
		end = monoAt(d) - w.cfg.MonoOffset
	}
	w.emit(event{K: "end", Name: name, Token: l.Token(), End: end, Lost: l.Err() != nil})
	rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	l.Release(rctx)
	cancel()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
