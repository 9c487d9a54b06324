package faultcheck

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/faultcheck/fenced"
)

// Config describes one run of the harness against one store.
type Config struct {
	Store    Store
	Duration time.Duration
	Workers  int           // client processes (6 if zero)
	TTL      time.Duration // lease length, session timeout for etcd and ZooKeeper (3s if zero)
	MaxPoll  time.Duration // baton.Options.MaxPoll of the workers (250ms if zero)
	// Servers is the path of scripts/servers; Dir the directory of the
	// harness's own server instances (DefaultDir if empty).
	Servers string
	Dir     string
	// Worker is the executable started for each worker; it must call
	// RunWorker when IsWorker (os.Executable if empty).
	Worker string
	Seed   uint64
	Log    io.Writer // progress lines (none if nil)
}

// Fault kinds, as counted in Result.Faults.
const (
	FaultLatency   = "latency"   // a client's traffic delayed 20–300ms per chunk for 2–5s
	FaultReset     = "reset"     // a client's connections reset
	FaultBlackhole = "blackhole" // a client's traffic held, longer than the TTL
	FaultPartition = "partition" // a client refused, longer than the TTL
	FaultKill      = "kill"      // SIGKILL of a worker, a holder when one holds
	FaultPause     = "pause"     // SIGSTOP … SIGCONT of a worker, a holder when one holds
	FaultRestart   = "restart"   // the server restarted (once per run)
	FaultCrash     = "crash"     // the server killed (SIGKILL, no clean shutdown) and started again (once per run)
	FaultClock     = "clock"     // a worker (re)started with its monotonic and boot clocks jumped
)

// slot is one worker position: its proxy, and its current process.
type slot struct {
	id    int
	proxy *Proxy // nil for embedded stores

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	proc   int  // incarnation number, unique in the run
	busy   bool // a fault is on it
	killed bool // the current process was sent SIGKILL
	done   chan struct{}
}

type runner struct {
	cfg    Config
	rng    *rand.Rand
	rec    *recorder
	res    *fenced.Resource
	resURL string
	prefix string
	target string // the server's address
	timeNS bool
	wg     sync.WaitGroup

	rngMu sync.Mutex // fault goroutines draw from rng too
	// serverMu makes a restart and a crash of the server take turns: two
	// of scripts/servers' stops and starts at once fight over the server.
	serverMu sync.Mutex

	mu     sync.Mutex
	faults map[string]int
	procs  int
	errs   []error
	// knownRaces counts workers whose race detector found only races
	// of knownRaces, inside a driver: they are reported, not failed.
	knownRaces int
}

// Run runs the harness: it starts the store's own server (if any),
// Workers client processes, and injects faults for Duration; then it
// stops everything and checks the history.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Workers == 0 {
		cfg.Workers = 6
	}
	if cfg.TTL == 0 {
		cfg.TTL = 3 * time.Second
	}
	if cfg.MaxPoll == 0 {
		cfg.MaxPoll = 250 * time.Millisecond
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if cfg.Worker == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Worker = exe
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Store.Server != "" && cfg.Servers == "" {
		return nil, errors.New("faultcheck: the store needs a server: set BATON_SERVERS to the path of scripts/servers (scripts/test does)")
	}
	r := &runner{
		cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 1)), rec: newRecorder(), res: &fenced.Resource{},
		prefix: fmt.Sprintf("fc-%d-", time.Now().UnixNano()), faults: map[string]int{},
	}
	r.logf("%s: seed %d, %d workers, TTL %v, %v", cfg.Store.Name, cfg.Seed, cfg.Workers, cfg.TTL, cfg.Duration)

	if err := os.MkdirAll(filepath.Join(cfg.Dir, "sqlite"), 0o755); err != nil {
		return nil, err
	}
	if s := cfg.Store; s.Server != "" {
		if len(s.ServerEnv) > 0 || s.NoRestart {
			// Restart it so that it surely runs with those settings, or
			// afresh.
			if err := Servers(ctx, cfg.Servers, cfg.Dir, s, "down", s.Server); err != nil {
				return nil, err
			}
		}
		if err := Servers(ctx, cfg.Servers, cfg.Dir, s, "up", s.Server); err != nil {
			return nil, err
		}
		r.target = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		if s.Setup != nil {
			if err := s.Setup(ctx, r.target); err != nil {
				return nil, fmt.Errorf("faultcheck: setting up %s: %w", s.Name, err)
			}
		}
	}
	r.timeNS = cfg.Store.TimeNS && timeNamespaces()
	// Open the store once directly, so that its schema exists before the
	// workers race to create it.
	c, err := baton.Open(ctx, cfg.Store.URL(r.target, cfg.Dir, cfg.TTL), nil)
	if err != nil {
		return nil, fmt.Errorf("faultcheck: open %s: %w", cfg.Store.Name, err)
	}
	c.Close()

	// The fenced resource, served to the workers over HTTP.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: r.res}
	go srv.Serve(ln)
	defer srv.Close()
	r.resURL = "http://" + ln.Addr().String()

	slots := make([]*slot, cfg.Workers)
	for i := range slots {
		s := &slot{id: i}
		if r.target != "" {
			if s.proxy, err = NewProxy(r.target); err != nil {
				return nil, err
			}
			defer s.proxy.Close()
		}
		slots[i] = s
		if err := r.start(s); err != nil {
			r.stopAll(slots)
			return nil, err
		}
	}

	start := Mono()
	r.inject(ctx, slots, start)
	r.stopAll(slots)
	stop := Mono()
	srv.Close()

	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.rec.check(r.res.Log(), cfg, start, stop)
	res.Store, res.Seed, res.Faults, res.Processes, res.KnownRaces = cfg.Store.Name, cfg.Seed, r.faults, r.procs, r.knownRaces
	res.Errors = append(res.Errors, r.errs...)
	return res, nil
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, format+"\n", args...)
	}
}

func (r *runner) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *runner) count(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *runner) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// timeNamespaces reports whether workers can be started in a time
// namespace: unshare(1) is there and we may create one (root).
func timeNamespaces() bool {
	if os.Geteuid() != 0 {
		return false
	}
	_, err := exec.LookPath("unshare")
	return err == nil
}

// start starts a new worker process in s.
func (r *runner) start(s *slot) error {
	r.mu.Lock()
	r.procs++
	proc := r.procs
	r.mu.Unlock()
	addr := ""
	if s.proxy != nil {
		addr = s.proxy.Addr()
	}
	wc := WorkerConfig{
		ID: s.id, URL: r.cfg.Store.URL(addr, r.cfg.Dir, r.cfg.TTL), Resource: r.resURL, Prefix: r.prefix,
		TTL: r.cfg.TTL, MaxPoll: r.cfg.MaxPoll, Seed: r.cfg.Seed + uint64(proc),
	}
	var cmd *exec.Cmd
	if r.timeNS && proc > r.cfg.Workers && r.intn(2) == 0 {
		// A restarted worker comes back with its monotonic and boot clocks
		// some days ahead of everyone else's: as far as a process can
		// see, its clock jumped while it was dead.
		days := 1 + r.intn(1000)
		wc.MonoOffset = int64(days) * 86400 * int64(time.Second)
		off := strconv.Itoa(days * 86400)
		cmd = exec.Command("unshare", "--time", "--monotonic", off, "--boottime", off, r.cfg.Worker)
		r.count(FaultClock)
		r.rec.fault(FaultClock, s.id, proc, Mono(), Mono())
	} else {
		cmd = exec.Command(r.cfg.Worker)
	}
	b, _ := json.Marshal(wc)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(b))
	if r.cfg.Store.Env != nil {
		cmd.Env = append(cmd.Env, r.cfg.Store.Env(addr)...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logPath := filepath.Join(r.cfg.Dir, "logs", fmt.Sprintf("faultcheck-%s-worker%d.log", r.cfg.Store.Name, s.id))
	stderr, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		if err = os.MkdirAll(filepath.Join(r.cfg.Dir, "logs"), 0o755); err != nil {
			return err
		}
		return r.start(s)
	}
	cmd.Stderr = stderr
	var logStart int64 // where this process's part of the log begins
	if fi, err := stderr.Stat(); err == nil {
		logStart = fi.Size()
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		stderr.Close()
		return err
	}
	stderr.Close()
	done := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.stdin, s.proc, s.killed, s.done = cmd, stdin, proc, false, done
	s.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				r.fail(fmt.Errorf("worker %d: bad event %q", s.id, sc.Text()))
				continue
			}
			r.rec.add(s.id, proc, e)
		}
		err := cmd.Wait()
		s.mu.Lock()
		killed := s.killed
		s.mu.Unlock()
		if killed {
			return // its open operations were closed at the kill
		}
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit) && exit.ExitCode() == raceExit && onlyKnownRaces(logPath, logStart):
			r.mu.Lock()
			r.knownRaces++
			r.mu.Unlock()
		case err != nil:
			r.fail(fmt.Errorf("worker %d (process %d) exited: %v (see its log in %s/logs)", s.id, proc, err, r.cfg.Dir))
		}
		r.rec.exited(proc, Mono(), "exited")
	}()
	return nil
}

// stopAll ends every fault and stops every worker: closing its stdin
// makes it release what it holds and exit.
func (r *runner) stopAll(slots []*slot) {
	for _, s := range slots {
		if s.proxy != nil {
			s.proxy.SetMode(Pass)
			s.proxy.SetLatency(0)
		}
		s.mu.Lock()
		if s.cmd != nil && !s.killed {
			s.cmd.Process.Signal(syscall.SIGCONT)
			s.stdin.Close()
		}
		s.mu.Unlock()
	}
	for _, s := range slots {
		s.mu.Lock()
		done, cmd := s.done, s.cmd
		s.mu.Unlock()
		if done == nil {
			continue
		}
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			r.fail(fmt.Errorf("worker %d did not stop within 15s of being told to: killed; its goroutines are at the end of its log in %s/logs", s.id, r.cfg.Dir))
			s.mu.Lock()
			s.killed = true
			s.mu.Unlock()
			// SIGQUIT makes the Go runtime write every goroutine's stack
			// to the worker's stderr, its log, and exit: what it waited
			// for. SIGKILL if even that does not end it.
			cmd.Process.Signal(syscall.SIGQUIT)
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		}
	}
	r.wg.Wait()
}
