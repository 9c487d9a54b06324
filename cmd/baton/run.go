package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-go/baton"
)

// handledSignals are the signals baton catches while it runs (so that it
// never dies before its command) and forwards to the command.
var handledSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// errInterrupted cancels a wait for the lock when baton gets a signal.
var errInterrupted = errors.New("interrupted")

// releaseTimeout bounds the release of the lock after the command ended.
const releaseTimeout = 5 * time.Second

type runFlags struct {
	name      string
	argv      []string
	shared    bool
	limit     int
	ttl       time.Duration
	minHold   time.Duration
	lockDelay time.Duration
	wait      bool
	timeout   time.Duration
	owner     string
	grace     time.Duration
	onAsk     string // the signal an ask to release is forwarded as ("none": ignored)
	store     string
	// conflictCode is the exit code when the lock is not acquired
	// (flock's -E).
	conflictCode int
	verbose      bool
}

func runFlagSet(f *runFlags) *flag.FlagSet {
	fs := newFlagSet("run")
	fs.BoolVar(&f.shared, "shared", false, "take a shared lock")
	fs.IntVar(&f.limit, "n", 0, "take one of N slots of a semaphore")
	durationVar(fs, &f.ttl, "ttl", 15*time.Second, "lease length")
	durationVar(fs, &f.minHold, "min-hold", 0, "keep the lock at least this long after it is granted")
	durationVar(fs, &f.lockDelay, "lock-delay", 0, "after the lease is lost, grant NAME to nobody for this long")
	fs.BoolVar(&f.wait, "wait", true, "wait for the lock")
	durationVar(fs, &f.timeout, "timeout", 0, "longest wait for the lock (0: forever)")
	fs.StringVar(&f.owner, "owner", "", "owner id")
	durationVar(fs, &f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL")
	fs.StringVar(&f.onAsk, "on-ask", "TERM", "signal sent to the command when someone asks for the lock (baton release --ask), or none")
	fs.IntVar(&f.conflictCode, "conflict-exit-code", exitNotAcquired, "exit code when the lock is not acquired")
	fs.IntVar(&f.conflictCode, "E", exitNotAcquired, "short for --conflict-exit-code")
	fs.BoolVar(&f.verbose, "verbose", false, "say what baton waits for, and what happens to the lease")
	fs.BoolVar(&f.verbose, "v", false, "short for --verbose")
	fs.StringVar(&f.store, "store", "", "store URL")
	return fs
}

func cmdRun(args []string) int {
	var f runFlags
	flags := runFlagSet(&f)
	pos, rest, dash, code, done := parseOrHelp("run", flags, args)
	if done {
		return code
	}
	set := flagsSet(flags)
	switch {
	case len(pos) == 0 && !dash:
		return usageErr("run", "missing lock NAME and command: baton run NAME [flags] -- CMD [ARGS...]")
	case len(pos) == 0:
		return usageErr("run", "missing lock NAME before --")
	case len(pos) > 1 && !dash:
		return usageErr("run", "missing -- before the command %q: baton run NAME [flags] -- CMD [ARGS...]", pos[1])
	case len(pos) > 1:
		return usageErr("run", "unexpected argument %q before -- (only the lock NAME goes there)", pos[1])
	case pos[0] == "":
		return usageErr("run", "the lock NAME is empty")
	case strings.TrimSpace(pos[0]) == "":
		return usageErr("run", "the lock NAME %q is blank (only spaces)", pos[0])
	case !dash || len(rest) == 0:
		return usageErr("run", "missing command: baton run NAME [flags] -- CMD [ARGS...]")
	case rest[0] == "":
		return usageErr("run", "the command is empty")
	case set["n"] && f.limit <= 0:
		return usageErr("run", "-n must be at least 1 (got %d)", f.limit)
	case f.conflictCode < 0 || f.conflictCode > 255:
		return usageErr("run", "--conflict-exit-code must be 0 to 255 (got %d)", f.conflictCode)
	case f.ttl <= 0:
		return usageErr("run", "--ttl must be positive (got %v)", f.ttl)
	case f.ttl < baton.MinTTL:
		return usageErr("run", "--ttl %v is below the minimum of %v", f.ttl, baton.MinTTL)
	case f.timeout < 0:
		return usageErr("run", "--timeout must not be negative (got %v; 0 waits forever)", f.timeout)
	case f.grace < 0:
		return usageErr("run", "--grace must not be negative (got %v)", f.grace)
	case f.minHold < 0:
		return usageErr("run", "--min-hold must not be negative (got %v)", f.minHold)
	case f.lockDelay < 0:
		return usageErr("run", "--lock-delay must not be negative (got %v)", f.lockDelay)
	case set["owner"] && f.owner == "":
		return usageErr("run", "--owner is empty")
	}
	if _, ok := askSignal(f.onAsk); !ok {
		return usageErr("run", "--on-ask %q is not a signal baton forwards (%s, or none)", f.onAsk, strings.Join(askSignalNames(), ", "))
	}
	f.name, f.argv = pos[0], rest
	verbose = f.verbose
	return run(&f)
}

func run(f *runFlags) int {
	// Catch the signals from the start: baton must not die while it waits
	// for the lock (it would leave a queue entry behind) nor while its
	// command runs (the command would lose its lock to the TTL).
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, handledSignals...)
	defer signal.Stop(sigs)

	raw, from, err := storeURL(f.store)
	if err != nil {
		return fail(exitError, "%v", err)
	}

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var interrupted os.Signal
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case s := <-sigs:
			interrupted = s
			cancel(errInterrupted)
		case <-stopWatch:
		}
	}()
	client, lease, code := acquire(ctx, f, raw, from)
	close(stopWatch)
	<-watchDone
	if interrupted != nil {
		if client != nil {
			client.Close() // releases the lease, if it was granted meanwhile
		}
		return fail(signalExit(interrupted), "interrupted (%v) while waiting for lock %q", interrupted, f.name)
	}
	if lease == nil {
		if client != nil {
			client.Close()
		}
		return code
	}
	defer client.Close()
	return supervise(f, lease, raw, sigs)
}

// acquire opens the store and takes the lock. Without a lease, it has
// reported why and returns the exit code.
func acquire(ctx context.Context, f *runFlags, raw, from string) (*baton.Client, *baton.Lease, int) {
	// Connecting is bounded by --timeout, or else by connectTimeout.
	bound := connectTimeout
	if f.wait && f.timeout > 0 {
		bound = f.timeout
	}
	start := time.Now()
	client, code := connect(ctx, raw, from, bound, &baton.Options{TTL: f.ttl, OnEvent: leaseEvents(f.name)})
	if client == nil {
		if context.Cause(ctx) == errInterrupted {
			return nil, nil, 0
		}
		return nil, nil, code
	}
	lo := &baton.LockOptions{
		Shared:    f.shared,
		Limit:     f.limit,
		TTL:       f.ttl,
		Owner:     f.owner,
		MinHold:   f.minHold,
		LockDelay: f.lockDelay,
		Meta: map[string]string{
			"pid": strconv.Itoa(os.Getpid()),
			"cmd": strings.ToValidUTF8(truncate(filepath.Base(f.argv[0]), 200), "?"),
		},
	}
	var (
		lease *baton.Lease
		err   error
	)
	if f.wait {
		lctx := ctx
		if f.timeout > 0 {
			var c context.CancelFunc
			lctx, c = context.WithTimeout(ctx, f.timeout-time.Since(start))
			defer c()
		}
		wctx, stopSaying := context.WithCancel(lctx)
		said := make(chan struct{})
		go func() {
			defer close(said)
			sayWaiting(wctx, client, f.name)
		}()
		lease, err = client.Lock(lctx, f.name, lo)
		stopSaying()
		<-said
		if err != nil && errors.Is(lctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			return client, nil, fail(f.conflictCode, "timed out after %v waiting for lock %q, %s", f.timeout, f.name, describe(client, f.name))
		}
	} else {
		lease, err = client.TryLock(ctx, f.name, lo)
		if errors.Is(err, baton.ErrLocked) {
			return client, nil, fail(f.conflictCode, "lock %q is %s; not waiting (--wait=false)", f.name, describe(client, f.name))
		}
	}
	switch {
	case err == nil:
		return client, lease, 0
	case context.Cause(ctx) == errInterrupted:
		return client, nil, 0
	case errors.Is(err, baton.ErrModeConflict):
		return client, nil, fail(exitError, "owner %q already holds lock %q in another mode or with another -n", f.owner, f.name)
	case errors.Is(err, baton.ErrLimitConflict):
		return client, nil, fail(exitError, "lock %q is %s, taken %s; %s would exceed their limit", f.name, describe(client, f.name), heldAs(client, f.name), asked(f))
	}
	return client, nil, failErr(err)
}

// heldAs says how name's holders took it: "as a semaphore of N" or "shared
// without -n".
func heldAs(client *baton.Client, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs, err := client.Status(ctx, &baton.Filter{Name: name})
	if err != nil || len(hs) == 0 {
		return "with another limit"
	}
	if hs[0].Limit > 0 {
		return fmt.Sprintf("as a semaphore of %d (-n %d)", hs[0].Limit, hs[0].Limit)
	}
	return "shared without -n"
}

// asked describes the request of f, for messages.
func asked(f *runFlags) string {
	if f.limit > 0 {
		return fmt.Sprintf("joining with -n %d", f.limit)
	}
	return "joining with --shared (no limit)"
}

// describe says why name cannot be granted, for messages: "held by OWNER
// on HOST (token 7, for 2m3s)", or "held" if the store cannot tell.
func describe(client *baton.Client, name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hs, err := client.Status(ctx, &baton.Filter{Name: name, Queued: true})
	if err != nil {
		return "held"
	}
	var held []baton.LockInfo
	for _, h := range hs {
		if !h.Queued {
			held = append(held, h)
		}
	}
	if len(held) == 0 {
		if waiting := len(hs); waiting > 0 {
			return fmt.Sprintf("free, but %d earlier request(s) wait for it", waiting)
		}
		return "held"
	}
	h := held[0]
	s := "held by " + h.Owner
	if h.Host != "" {
		s += " on " + h.Host
	}
	s += fmt.Sprintf(" (token %d, for %s)", h.Token, fmtDuration(time.Since(h.Created)))
	if len(held) > 1 {
		s += fmt.Sprintf(" and %d more", len(held)-1)
	}
	return s
}

// supervise runs the command under the lease and returns baton's exit code.
func supervise(f *runFlags, lease *baton.Lease, raw string, sigs <-chan os.Signal) int {
	select {
	case s := <-sigs: // came just as the lock was granted
		release(lease)
		return fail(signalExit(s), "interrupted (%v) before running the command", s)
	default:
	}
	c, err := startChild(f.argv, childEnv(os.Environ(), lease, raw))
	if err != nil {
		release(lease)
		return cannotRun(f.argv[0], err)
	}
	defer c.done()

	var (
		lost      bool
		leaseDone = lease.Done()
		killTimer <-chan time.Time
		signals   int
		asked     <-chan struct{}
	)
	askSig, _ := askSignal(f.onAsk)
	if askSig != nil {
		asked = lease.Asked()
	}
	stopping := func() {
		if killTimer == nil {
			killTimer = time.After(f.grace)
		}
	}
	for killed := false; ; {
		select {
		case <-c.exited:
			return finish(f, lease, c.cmd.ProcessState, lost)
		case <-leaseDone:
			leaseDone = nil
			if err := lease.Err(); errors.Is(err, baton.ErrReleased) {
				continue // cannot happen: only baton releases, after the command
			}
			lost = true
			fmt.Fprintf(stderr, "baton: lost the lease on lock %q (not renewed in time, or released by someone else); stopping the command (SIGTERM, SIGKILL after %v)\n", f.name, f.grace)
			c.signal(syscall.SIGTERM)
			stopping()
		case <-asked:
			asked = nil
			why := ""
			var ae *baton.AskedError
			if errors.As(lease.AskCause(), &ae) && ae.Reason != "" {
				why = " (" + ae.Reason + ")"
			}
			if stopsCommand(askSig) {
				fmt.Fprintf(stderr, "baton: asked to release lock %q%s; stopping the command (SIG%s, SIGKILL after %v)\n", f.name, why, sigName(f.onAsk), f.grace)
				stopping()
			} else {
				fmt.Fprintf(stderr, "baton: asked to release lock %q%s; sending SIG%s to the command\n", f.name, why, sigName(f.onAsk))
			}
			c.signal(askSig)
		case s := <-sigs:
			signals++
			// A terminal's ^C or ^\ reaches the whole foreground process
			// group, the command included: do not deliver it twice. A
			// repeated one is passed on, in case it came from kill(1).
			if signals > 1 || !fromTerminal(s) {
				c.signal(s)
			}
			stopping()
		case <-killTimer:
			if !killed {
				killed = true
				c.kill()
			}
		}
	}
}

// finish releases the lock after the command exited and returns baton's
// exit code.
func finish(f *runFlags, lease *baton.Lease, ps *os.ProcessState, lost bool) int {
	if lost {
		release(lease)
		return exitLeaseLost
	}
	code := exitCode(ps)
	// On stores whose holds live in a session, the release waits for the
	// minimum hold.
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout+f.minHold)
	defer cancel()
	err := lease.ReleaseStrict(ctx)
	switch {
	case err == nil:
	case errors.Is(err, baton.ErrNotHeld):
		// The lease ended while the command ran, before baton noticed
		// (an administrator released it, or a renewal came too late).
		return fail(exitLeaseLost, "lost the lease on lock %q while the command ran (it was no longer held when the command exited with code %d)", f.name, code)
	default:
		fmt.Fprintf(stderr, "baton: warning: could not release lock %q: %s (it expires within %v)\n", f.name, errText(err), lease.TTL())
	}
	return code
}

func release(lease *baton.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	_ = lease.Release(ctx)
}

// childEnv is env with the lease's BATON_* variables set.
func childEnv(env []string, lease *baton.Lease, raw string) []string {
	vars := [][2]string{
		{"BATON_NAME", lease.Name()},
		{"BATON_TOKEN", strconv.FormatUint(lease.Token(), 10)},
		{"BATON_OWNER", lease.Owner()},
		{"BATON_TTL", lease.TTL().String()},
		{"BATON_MODE", lease.Mode().String()},
		{"BATON_STORE", redact(raw)},
	}
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, v := range vars {
			if k == v[0] {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	for _, v := range vars {
		out = append(out, v[0]+"="+v[1])
	}
	return out
}

// exitCode is the command's exit code, 128+N if signal N killed it.
func exitCode(ps *os.ProcessState) int {
	if c := ps.ExitCode(); c >= 0 {
		return c
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return exitError
}

// signalExit is the conventional exit code after signal s: 128+N.
func signalExit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok && n > 0 {
		return 128 + int(n)
	}
	return exitError
}

// cannotRun reports that argv0 could not be started and returns the exit
// code for it.
func cannotRun(argv0 string, err error) int {
	code := exitCannotRun
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitNotFound
	}
	return fail(code, "cannot run %s: %s", argv0, startErrText(err))
}

func startErrText(err error) string {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err.Error()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
