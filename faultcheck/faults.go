package faultcheck

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"time"
)

// inject runs faults until the run's duration is over: one fault starts
// every 0.4–1.4s, on a worker that has no fault on it, and the server is
// restarted once, at 40% of the run, and crashed once, at 70%.
func (r *runner) inject(ctx context.Context, slots []*slot, start int64) {
	end := start + int64(r.cfg.Duration)
	restartAt := start + int64(r.cfg.Duration)*4/10
	crashAt := start + int64(r.cfg.Duration)*7/10
	restarted := r.cfg.Store.Server == "" || r.cfg.Store.NoRestart
	crashed := restarted
	var faults []func(*slot) // the kinds that apply to this store
	var kinds []string
	weights := []int{}
	add := func(w int, kind string, f func(*slot)) {
		faults, kinds, weights = append(faults, f), append(kinds, kind), append(weights, w)
	}
	add(4, FaultKill, r.kill)
	add(3, FaultPause, r.pause)
	if r.target != "" { // it has proxies
		add(2, FaultLatency, r.latency)
		add(2, FaultReset, r.reset)
		add(2, FaultBlackhole, r.blackhole)
		add(2, FaultPartition, r.partition)
	}
	var wg sync.WaitGroup
	total := 0
	for _, w := range weights {
		total += w
	}
	for ctx.Err() == nil && Mono() < end {
		if !sleep(ctx, time.Duration(400+r.intn(1000))*time.Millisecond) {
			break
		}
		if !restarted && Mono() >= restartAt {
			restarted = true
			wg.Add(1)
			go func() { defer wg.Done(); r.restart(ctx, false) }()
			continue
		}
		if !crashed && Mono() >= crashAt {
			crashed = true
			wg.Add(1)
			go func() { defer wg.Done(); r.restart(ctx, true) }()
			continue
		}
		pick := r.intn(total)
		i := 0
		for ; pick >= weights[i]; i++ {
			pick -= weights[i]
		}
		s := r.pickSlot(ctx, slots, i < 2)
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.mu.Lock()
			proc := s.proc
			s.mu.Unlock()
			from := Mono()
			r.count(kinds[i])
			faults[i](s)
			r.rec.fault(kinds[i], s.id, proc, from, Mono())
			s.mu.Lock()
			s.busy = false
			s.mu.Unlock()
		}()
	}
	wg.Wait() // every fault has ended
}

// pickSlot marks a worker without a fault busy and returns it; with
// holder set, one that holds an exclusive lock, or else any lock, if one
// does within a second.
func (r *runner) pickSlot(ctx context.Context, slots []*slot, holder bool) *slot {
	if !holder {
		return r.pickSlotNow(slots, false)
	}
	for range 50 {
		if s := r.pickSlotNow(slots, true); s != nil || !sleep(ctx, 20*time.Millisecond) {
			return s
		}
	}
	return r.pickSlotNow(slots, false)
}

// pickSlotNow is pickSlot without waiting: with exclusive set, only a
// holder of an exclusive lock.
func (r *runner) pickSlotNow(slots []*slot, exclusiveOnly bool) *slot {
	var free, holding, exclusive []*slot
	holder := exclusiveOnly
	for _, s := range slots {
		s.mu.Lock()
		if !s.busy && s.cmd != nil {
			free = append(free, s)
			if holder {
				if op := r.rec.holding(s.proc); op != nil {
					holding = append(holding, s)
					if !op.Shared {
						exclusive = append(exclusive, s)
					}
				}
			}
		}
		s.mu.Unlock()
	}
	sets := [][]*slot{exclusive, holding, free}
	if exclusiveOnly {
		sets = sets[:1]
	}
	for _, set := range sets {
		if len(set) > 0 {
			s := set[r.intn(len(set))]
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.busy {
				return nil
			}
			s.busy = true
			return s
		}
	}
	return nil
}

func (r *runner) jitter(min, max time.Duration) time.Duration {
	return min + time.Duration(int64(r.intn(int(max-min))))
}

// kill sends SIGKILL, then starts a new process in the slot.
func (r *runner) kill(s *slot) {
	s.mu.Lock()
	s.killed = true
	cmd, proc, done := s.cmd, s.proc, s.done
	s.mu.Unlock()
	cmd.Process.Signal(syscall.SIGKILL)
	at := Mono()
	<-done // every event it wrote before dying is recorded
	r.rec.exited(proc, at, "killed")
	time.Sleep(r.jitter(100*time.Millisecond, time.Second))
	if err := r.start(s); err != nil {
		r.fail(fmt.Errorf("restarting worker %d: %w", s.id, err))
	}
}

// pause stops a worker with SIGSTOP, as a long GC pause would, mostly for
// longer than the TTL, and resumes it with SIGCONT.
func (r *runner) pause(s *slot) {
	d := r.jitter(r.cfg.TTL*13/10, r.cfg.TTL*5/2)
	if r.intn(4) == 0 {
		d = r.jitter(r.cfg.TTL/10, r.cfg.TTL/2)
	}
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	cmd.Process.Signal(syscall.SIGCONT)
}

func (r *runner) latency(s *slot) {
	s.proxy.SetLatency(r.jitter(20*time.Millisecond, 300*time.Millisecond))
	time.Sleep(r.jitter(2*time.Second, 5*time.Second))
	s.proxy.SetLatency(0)
}

func (r *runner) reset(s *slot) {
	s.proxy.Reset()
	time.Sleep(r.cfg.TTL / 3) // the client reconnects before its next fault
}

func (r *runner) blackhole(s *slot) {
	s.proxy.SetMode(Blackhole)
	time.Sleep(r.jitter(r.cfg.TTL*12/10, r.cfg.TTL*2))
	s.proxy.SetMode(Pass)
	time.Sleep(r.cfg.TTL / 3)
}

func (r *runner) partition(s *slot) {
	s.proxy.SetMode(Partition)
	time.Sleep(r.jitter(r.cfg.TTL*12/10, r.cfg.TTL*2))
	s.proxy.SetMode(Pass)
	time.Sleep(r.cfg.TTL / 3)
}

// restart restarts the store's server through scripts/servers: cleanly,
// or, with crash, killing it with SIGKILL first.
func (r *runner) restart(ctx context.Context, crash bool) {
	kind, how := FaultRestart, "restarted"
	if crash {
		kind, how = FaultCrash, "crashed and started again"
	}
	r.serverMu.Lock()
	defer r.serverMu.Unlock()
	r.count(kind)
	from := Mono()
	var err error
	if crash {
		err = Servers(ctx, r.cfg.Servers, r.cfg.Dir, r.cfg.Store, "crash", r.cfg.Store.Server)
		if err == nil {
			err = Servers(ctx, r.cfg.Servers, r.cfg.Dir, r.cfg.Store, "up", r.cfg.Store.Server)
		}
	} else {
		err = Servers(ctx, r.cfg.Servers, r.cfg.Dir, r.cfg.Store, "restart", r.cfg.Store.Server)
	}
	to := Mono()
	r.rec.restarted(from, to)
	r.rec.fault(kind, -1, 0, from, to)
	r.logf("%s: server %s in %s", r.cfg.Store.Name, how, ms(to-from))
	if err != nil {
		r.fail(err)
	}
}
