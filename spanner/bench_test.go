package spanner_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// BenchmarkSideBySide runs the workloads of the repository's bench tool
// (see BENCHMARKS.md) on the store the tests use, the in-process fake by
// default, and logs one row of its table: (a) uncontended Lock+Release,
// one client, 500 times; (b) 8 clients, each with its own Spanner client,
// on one name for 5 s; (c) hand-off from Release to a blocked waiter's
// Lock returning, 40 times. Run it once:
//
//	go test -run '^$' -bench SideBySide -benchtime 1x
//
// On the fake the figures measure the client library, gRPC and the fake,
// not Spanner.
func BenchmarkSideBySide(b *testing.B) {
	for i := 0; i < b.N; i++ {
		row, err := sideBySide(b, 500, 8, 5*time.Second, 40)
		if err != nil {
			b.Fatal(err)
		}
		b.Log("\n" + row)
	}
}

func sideBySide(b *testing.B, n, clients int, dur time.Duration, handoffs int) (string, error) {
	ctx := context.Background()
	run := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	newClient := func() *baton.Client { return client(b, open(b), nil) }

	// (a) uncontended
	c := newClient()
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		l, err := c.Lock(ctx, run+"/a", nil)
		if err != nil {
			return "", err
		}
		if err := l.Release(ctx); err != nil {
			return "", err
		}
		lat = append(lat, time.Since(start))
	}

	// (b) contended
	cs := make([]*baton.Client, clients)
	for i := range cs {
		cs[i] = newClient()
	}
	counts := make([]int, clients)
	var inside, violations atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	deadline := time.Now().Add(dur)
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				l, err := c.Lock(ctx, run+"/b", nil)
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				counts[i]++
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return "", err
	}
	if v := violations.Load(); v > 0 {
		return "", fmt.Errorf("MUTUAL EXCLUSION VIOLATED %d times", v)
	}
	total := 0
	for _, k := range counts {
		total += k
	}

	// (c) hand-off
	var ho []time.Duration
	for i := 0; i < handoffs; i++ {
		l, err := cs[0].Lock(ctx, run+"/c", nil)
		if err != nil {
			return "", err
		}
		got := make(chan time.Time, 1)
		released := make(chan error, 1)
		go func() {
			l2, err := cs[1].Lock(ctx, run+"/c", nil)
			got <- time.Now()
			if err == nil {
				err = l2.Release(ctx)
			}
			released <- err
		}()
		time.Sleep(20 * time.Millisecond) // let the waiter block
		start := time.Now()
		if err := l.Release(ctx); err != nil {
			return "", err
		}
		ho = append(ho, (<-got).Sub(start))
		if err := <-released; err != nil {
			return "", err
		}
	}
	name := "baton-spanner (spannertest fake, in-process)"
	if !fake {
		name = "baton-spanner (" + testDB + ")"
	}
	return fmt.Sprintf("| %s | %.0f/%.0f | %.0f (%d–%d) | %.2f/%.2f |", name,
		us(pct(lat, 50)), us(pct(lat, 99)),
		float64(total)/dur.Seconds(), slices.Min(counts), slices.Max(counts),
		ms(pct(ho, 50)), ms(pct(ho, 95))), nil
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
