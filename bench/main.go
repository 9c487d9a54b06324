// Command bench measures lock stores and peer libraries side by side, with
// the workloads of shared/notes/peer-baselines.md:
//
//	(a) uncontended: one client takes and releases a lock N times;
//	    p50/p99 of one acquire+release.
//	(b) contended: C clients, each with its own connection, hammer one lock
//	    name for D; acquisitions per second, the per-client minimum and
//	    maximum (fairness), and a mutual-exclusion check on a shared
//	    counter.
//	(c) hand-off: from the holder calling release to a blocked waiter's
//	    acquire returning, H times; p50/p95.
//
// and, when asked for, workloads of scale (see many.go), each in a table
// of its own:
//
//	many-names (-names N): C clients (-names-clients, 32) take and release
//	    random names among N for D; ops/s and p50/p99 of one
//	    acquire+release.
//	hold-many (-hold N): one client takes N locks of distinct names
//	    (-hold-workers goroutines, 4), holds them for -hold-window (20s),
//	    then releases them all; the acquire rate of the first and the last
//	    tenth, the process's CPU time while holding (getrusage), baton's
//	    renewal calls meanwhile, and the time to release them all (baton:
//	    Client.Close). Not for procs: targets.
//
// -basic=false skips (a)-(c), -failover K adds the leader-election
// workload (elect.go).
//
// Usage:
//
//	go run ./bench -target baton=sqlite:///tmp/bench.db -target baton=mem://bench
//	go run ./bench -basic=false -hold 100000 -names 10000 -target baton=mem://
//
// A target is KIND=URL: KIND "baton" measures baton on the store at URL;
// other kinds are peer libraries, registered by the files of this package
// (see kinds). "procs:KIND=URL" runs each client in a process of its own
// (see procs.go); "LABEL/KIND=URL" adds LABEL to the row's name (the
// server's version, say). Output is a Markdown table, one row per target.
//
// This machine's speed drifts by tens of percent within a minute, so that
// one run of two targets can rank them either way. -rounds R measures the
// targets R times, in turn (A B A B …), and ends with a table of each
// figure's median over the rounds: compare those.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton"
	_ "github.com/baton-go/baton/sqlite"
)

// Locker is one client of a lock implementation.
type Locker interface {
	// Lock blocks until the lock named name is held and returns its release.
	Lock(ctx context.Context, name string) (release func() error, err error)
	Close() error
}

// Target makes clients of one implementation.
type Target struct {
	Name string
	New  func(ctx context.Context) (Locker, error)
	// NewElector, if set, makes a candidate of the election name, with
	// leases of lease (see elect.go).
	NewElector func(ctx context.Context, name string, lease time.Duration) (Elector, error)
	// Calls, if set, counts the calls to the server of every client the
	// target made so far.
	Calls func() int64
	// Remote is set when the clients run in other processes (procs:):
	// hold-many, which holds many locks in one client and measures this
	// process's CPU time, skips the target.
	Remote bool
}

type targets []string

func (t *targets) String() string     { return strings.Join(*t, ",") }
func (t *targets) Set(s string) error { *t = append(*t, s); return nil }

func main() {
	var ts targets
	flag.Var(&ts, "target", "KIND=URL to measure (repeatable); kinds: "+kindNames())
	n := flag.Int("n", 500, "uncontended iterations")
	clients := flag.Int("clients", 8, "contending clients")
	dur := flag.Duration("d", 5*time.Second, "contended run length")
	handoffs := flag.Int("handoffs", 40, "hand-off samples")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	rounds := flag.Int("rounds", 1, "measure the targets this many times, in turn, and end with the medians")
	failover := flag.Int("failover", 0, "leader crashes to time per round, for targets with elections (0: none)")
	lease := flag.Duration("lease", 5*time.Second, "lease length of the failover workload")
	skipLocks := flag.Bool("failover-only", false, "run only the failover workload (as -basic=false)")
	basic := flag.Bool("basic", true, "run the uncontended, contended and hand-off workloads")
	names := flag.Int("names", 0, "many-names: names to take at random (0: skip the workload)")
	namesClients := flag.Int("names-clients", 32, "many-names: clients")
	hold := flag.Int("hold", 0, "hold-many: locks one client takes and holds (0: skip the workload; else at least 10)")
	holdWorkers := flag.Int("hold-workers", 4, "hold-many: goroutines taking the locks")
	holdWindow := flag.Duration("hold-window", 20*time.Second, "hold-many: how long to hold them all")
	flag.DurationVar(&batonTTL, "baton-ttl", 0, "the TTL of baton's leases (0: baton's default, 15s); not passed to procs: children")
	childSpec := flag.String("child", "", "internal: serve one client of KIND=URL over stdin/stdout (for procs: targets)")
	flag.Parse()
	if *childSpec != "" {
		if err := child(*childSpec); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if len(ts) == 0 {
		fmt.Fprintln(os.Stderr, "bench: give at least one -target KIND=URL; kinds: "+kindNames())
		os.Exit(2)
	}
	if *hold != 0 && (*hold < 10 || *holdWorkers < 1) || *names < 0 || *names > 0 && *namesClients < 1 {
		fmt.Fprintln(os.Stderr, "bench: -hold is 0 or at least 10, -hold-workers and -names-clients at least 1")
		os.Exit(2)
	}
	if *skipLocks {
		*basic = false
	}
	if *basic && (*n < 1 || *clients < 2 || *handoffs < 1 || *dur <= 0) {
		fmt.Fprintln(os.Stderr, "bench: -n and -handoffs are at least 1, -clients at least 2 (the hand-off is between two of them), -d above 0")
		os.Exit(2)
	}
	fmt.Printf("go %s, %s/%s, %d CPUs, %s\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339))
	if *basic {
		fmt.Println("| target | uncontended p50/p99 µs | contended ops/s (per-client min–max) | hand-off p50/p95 ms |")
		fmt.Println("|---|---|---|---|")
	}
	var targets []Target
	for _, spec := range ts {
		kind, url, ok := strings.Cut(spec, "=")
		label, k, labelled := strings.Cut(kind, "/")
		if labelled {
			kind = k
		}
		var t Target
		if inner, isProcs := strings.CutPrefix(kind, "procs:"); isProcs {
			t, ok = procsTarget(inner, url)
		} else if mk := kinds[kind]; ok && mk != nil {
			t = mk(url)
		} else {
			ok = false
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "bench: target %q is not [LABEL/][procs:]KIND=URL with a known kind (%s)\n", spec, kindNames())
			os.Exit(2)
		}
		if labelled {
			t.Name += " (" + label + ")"
		}
		targets = append(targets, t)
	}
	all := make([][]result, len(targets))
	fos := make([][]failoverResult, len(targets))
	nrs := make([][]namesResult, len(targets))
	hrs := make([][]holdResult, len(targets))
	for range max(*rounds, 1) {
		for i, t := range targets {
			if !*basic {
				break
			}
			r, err := measure(t, *n, *clients, *dur, *handoffs)
			if err != nil {
				fmt.Fprintf(os.Stderr, "bench: %s: %v\n", t.Name, err)
				os.Exit(1)
			}
			all[i] = append(all[i], r)
			fmt.Println(r.row(t.Name))
		}
		if *failover > 0 {
			fmt.Printf("\nFailover (3 candidates, lease %v):\n\n", *lease)
			fmt.Println("| target | leader crash to new leader p50/max ms | calls/s per candidate | samples |")
			fmt.Println("|---|---|---|---|")
			for i, t := range targets {
				if t.NewElector == nil {
					continue
				}
				r, err := measureFailover(t, *failover, *lease)
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s: failover: %v\n", t.Name, err)
					os.Exit(1)
				}
				fos[i] = append(fos[i], r)
				fmt.Println(r.row(t.Name))
			}
			fmt.Println()
		}
		if *names > 0 {
			fmt.Printf("\nMany names (%d clients, %d names, %v):\n\n%s\n", *namesClients, *names, *dur, namesHeader)
			for i, t := range targets {
				r, err := measureNames(t, *names, *namesClients, *dur)
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s: many-names: %v\n", t.Name, err)
					os.Exit(1)
				}
				nrs[i] = append(nrs[i], r)
				fmt.Println(r.row(t.Name))
			}
			fmt.Println()
		}
		if *hold > 0 {
			fmt.Printf("\nHold many (%d locks, %d workers, held %v):\n\n%s\n", *hold, *holdWorkers, *holdWindow, holdHeader)
			for i, t := range targets {
				if t.Remote {
					continue
				}
				runtime.GC() // not to bill a target for the garbage of the one before
				r, err := measureHold(t, *hold, *holdWorkers, *holdWindow)
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s: hold-many: %v\n", t.Name, err)
					os.Exit(1)
				}
				hrs[i] = append(hrs[i], r)
				fmt.Println(r.row(t.Name))
			}
			fmt.Println()
		}
	}
	if *rounds > 1 && *basic {
		fmt.Printf("\nMedians of %d rounds:\n\n", *rounds)
		fmt.Println("| target | uncontended p50/p99 µs | contended ops/s (per-client min–max) | hand-off p50/p95 ms |")
		fmt.Println("|---|---|---|---|")
		for i, t := range targets {
			fmt.Println(median(all[i]).row(t.Name))
		}
	}
	if *rounds > 1 && *failover > 0 {
		fmt.Printf("\nFailover, medians of %d rounds:\n\n", *rounds)
		fmt.Println("| target | leader crash to new leader p50/max ms | calls/s per candidate | samples |")
		fmt.Println("|---|---|---|---|")
		for i, t := range targets {
			if len(fos[i]) > 0 {
				fmt.Println(medianFailover(fos[i]).row(t.Name))
			}
		}
	}
	if *rounds > 1 && *names > 0 {
		fmt.Printf("\nMany names, medians of %d rounds:\n\n%s\n", *rounds, namesHeader)
		for i, t := range targets {
			fmt.Println(medianNames(nrs[i]).row(t.Name))
		}
	}
	if *rounds > 1 && *hold > 0 {
		fmt.Printf("\nHold many, medians of %d rounds:\n\n%s\n", *rounds, holdHeader)
		for i, t := range targets {
			if len(hrs[i]) > 0 {
				fmt.Println(medianHold(hrs[i]).row(t.Name))
			}
		}
	}
}

// result is one measurement of one target.
type result struct {
	p50, p99       time.Duration // uncontended
	opsPerSec      float64       // contended
	minOps, maxOps int           // per client
	hoP50, hoP95   time.Duration // hand-off
}

func (r result) row(name string) string {
	return fmt.Sprintf("| %s | %.0f/%.0f | %.0f (%d–%d) | %.2f/%.2f |", name,
		us(r.p50), us(r.p99), r.opsPerSec, r.minOps, r.maxOps, ms(r.hoP50), ms(r.hoP95))
}

// median takes the median of each figure on its own.
func median(rs []result) result {
	pick := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return result{
		p50:       time.Duration(pick(func(r result) float64 { return float64(r.p50) })),
		p99:       time.Duration(pick(func(r result) float64 { return float64(r.p99) })),
		opsPerSec: pick(func(r result) float64 { return r.opsPerSec }),
		minOps:    int(pick(func(r result) float64 { return float64(r.minOps) })),
		maxOps:    int(pick(func(r result) float64 { return float64(r.maxOps) })),
		hoP50:     time.Duration(pick(func(r result) float64 { return float64(r.hoP50) })),
		hoP95:     time.Duration(pick(func(r result) float64 { return float64(r.hoP95) })),
	}
}

// kinds maps a target kind to its constructor; peer files add theirs in init.
var kinds = map[string]func(url string) Target{
	"baton": batonTarget,
}

func kindNames() string {
	var ns []string
	for k := range kinds {
		ns = append(ns, k)
	}
	slices.Sort(ns)
	return strings.Join(ns, ", ")
}

func batonTarget(url string) Target {
	scheme, _, _ := strings.Cut(url, ":")
	return Target{Name: "baton-" + scheme, New: func(ctx context.Context) (Locker, error) {
		return newBatonLocker(func(o *baton.Options) (*baton.Client, error) { return baton.Open(ctx, url, o) })
	}}
}

// batonTTL is the -baton-ttl flag.
var batonTTL time.Duration

// newBatonLocker makes a client with open, counting its renewals.
func newBatonLocker(open func(*baton.Options) (*baton.Client, error)) (Locker, error) {
	b := &batonLocker{}
	c, err := open(&baton.Options{Observer: &b.counts, TTL: batonTTL})
	if err != nil {
		return nil, err
	}
	b.c = c
	return b, nil
}

// batonLocker is a Keeper.
type batonLocker struct {
	c      *baton.Client
	counts renewCounter
}

func (b *batonLocker) Renewals() (calls, holds, lost int64) {
	return b.counts.calls.Load(), b.counts.holds.Load(), b.counts.lost.Load()
}

func (b *batonLocker) Lock(ctx context.Context, name string) (func() error, error) {
	l, err := b.c.Lock(ctx, name, nil)
	if err != nil {
		return nil, err
	}
	return func() error { return l.Release(ctx) }, nil
}

func (b *batonLocker) Close() error { return b.c.Close() }

func measure(t Target, n, clients int, dur time.Duration, handoffs int) (result, error) {
	ctx := context.Background()
	run := fmt.Sprintf("bench-%d", time.Now().UnixNano())

	// (a) uncontended
	l, err := t.New(ctx)
	if err != nil {
		return result{}, err
	}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		rel, err := l.Lock(ctx, run+"/a")
		if err != nil {
			return result{}, err
		}
		if err := rel(); err != nil {
			return result{}, err
		}
		lat = append(lat, time.Since(start))
	}
	l.Close()

	// (b) contended
	ls := make([]Locker, clients)
	for i := range ls {
		if ls[i], err = t.New(ctx); err != nil {
			return result{}, err
		}
	}
	counts := make([]int, clients)
	var inside atomic.Int32
	var violations atomic.Int32
	var wg sync.WaitGroup
	var firstErr error
	var errOnce sync.Once
	deadline := time.Now().Add(dur)
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				rel, err := l.Lock(ctx, run+"/b")
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				counts[i]++
				inside.Add(-1)
				if err := rel(); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return result{}, firstErr
	}
	if v := violations.Load(); v > 0 {
		return result{}, fmt.Errorf("MUTUAL EXCLUSION VIOLATED %d times", v)
	}
	total := 0
	for _, c := range counts {
		total += c
	}

	// (c) hand-off, between two of the contending clients
	var ho []time.Duration
	for i := 0; i < handoffs; i++ {
		rel, err := ls[0].Lock(ctx, run+"/c")
		if err != nil {
			return result{}, err
		}
		got := make(chan time.Time, 1)
		released := make(chan error, 1)
		go func() {
			rel2, err := ls[1].Lock(ctx, run+"/c")
			got <- time.Now()
			if err == nil {
				err = rel2()
			}
			released <- err
		}()
		time.Sleep(20 * time.Millisecond) // let the waiter block
		start := time.Now()
		if err := rel(); err != nil {
			return result{}, err
		}
		ho = append(ho, (<-got).Sub(start))
		if err := <-released; err != nil {
			return result{}, err
		}
	}
	for _, l := range ls {
		l.Close()
	}
	return result{
		p50: pct(lat, 50), p99: pct(lat, 99),
		opsPerSec: float64(total) / dur.Seconds(), minOps: slices.Min(counts), maxOps: slices.Max(counts),
		hoP50: pct(ho, 50), hoP95: pct(ho, 95),
	}, nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
