//go:build unix

package baton_test

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/mem"
)

// freeRenewer is a mem store whose Renew costs next to nothing and counts
// the holds it renewed: what is left of a renewal's cost is keepalive's.
type freeRenewer struct {
	*mem.Store
	renewed atomic.Int64
}

func (s *freeRenewer) Renew(ctx context.Context, hs []driver.Hold) ([]*driver.Grant, error) {
	now := time.Now()
	gs := make([]driver.Grant, len(hs))
	out := make([]*driver.Grant, len(hs))
	for i, h := range hs {
		gs[i] = driver.Grant{Token: 1, Created: now, Renewed: now, Expires: now.Add(h.TTL)}
		out[i] = &gs[i]
	}
	s.renewed.Add(int64(len(hs)))
	return out, nil
}

// BenchmarkKeepalive holds 20,000 leases of a 3 s TTL, which keepalive
// renews 20,000 times a second (as 100,000 of 15 s), for a second per
// iteration, against a store whose renewals cost nothing. It reports the
// process's CPU time (user and system, the garbage collector's included)
// and the heap allocations per lease renewed: keepalive's own cost.
func BenchmarkKeepalive(b *testing.B) {
	ctx := context.Background()
	s := &freeRenewer{Store: mem.New()}
	c, err := baton.New(s, &baton.Options{TTL: 3 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for i := range 20000 {
		if _, err := c.TryLock(ctx, "hold-"+strconv.Itoa(i), nil); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // every lease renewed once: a steady state
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := cpuTime(b)
	n0 := s.renewed.Load()
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	cpu, n := cpuTime(b)-cpu0, s.renewed.Load()-n0
	runtime.ReadMemStats(&m1)
	if n == 0 {
		b.Fatal("no renewals")
	}
	b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/renewal")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(n), "allocs/renewal")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n), "B/renewal")
	b.ReportMetric(float64(cpu)/float64(b.Elapsed())*100, "%core")
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
