package sqlite_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// BenchmarkCloseMany takes b.N locks in one client, then closes it, and
// reports how long Close took and how many holds it left to expire
// (run with -benchtime 100000x). docs/benchmarks-history.md quotes it.
func BenchmarkCloseMany(b *testing.B) {
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(b.TempDir(), "close.db")
	c, err := baton.Open(ctx, url, &baton.Options{TTL: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		if _, err := c.TryLock(ctx, "hold-"+strconv.Itoa(i), nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	c.Close()
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "close-ms")
	b.StopTimer()
	c2, err := baton.Open(ctx, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c2.Close()
	hs, err := c2.Status(ctx, &baton.Filter{Prefix: "hold-"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(hs)), "left")
}
