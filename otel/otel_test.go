package otel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/baton-go/baton"
	batonotel "github.com/baton-go/baton/otel"
)

// TestMetricsAndSpans drives a client through a grant, a refusal, a wait,
// renewals and a lost lease, and reads back what OpenTelemetry got, with
// the SDK's in-memory reader and span recorder.
func TestMetricsAndSpans(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	ob, err := batonotel.New(&batonotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		t.Fatal(err)
	}
	open := func() *baton.Client {
		c, err := baton.Open(ctx, "mem://otel", &baton.Options{Observer: ob, TTL: 300 * time.Millisecond, MaxPoll: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := open(), open()

	l, err := a.Lock(ctx, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "x", nil); !errors.Is(err, baton.ErrLocked) {
		t.Fatalf("TryLock: %v", err)
	}
	time.Sleep(250 * time.Millisecond) // two renewals or so
	go func() {
		time.Sleep(100 * time.Millisecond)
		l.Release(ctx)
	}()
	if err := b.Do(ctx, "x", nil, func(context.Context, *baton.Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	// A lease that expires unrenewed.
	e, err := a.Lock(ctx, "y", &baton.LockOptions{NoKeepAlive: true, TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	<-e.Done()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != batonotel.Scope {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	count := func(name string, attrs map[string]string) int64 {
		var n int64
		switch d := got[name].(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if match(p.Attributes.ToSlice(), attrs) {
					n += p.Value
				}
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				if match(p.Attributes.ToSlice(), attrs) {
					n += int64(p.Count)
				}
			}
		default:
			t.Errorf("metric %s missing (%T)", name, got[name])
		}
		return n
	}
	checks := []struct {
		metric string
		attrs  map[string]string
		min    int64
	}{
		{"baton.lock.acquisitions", map[string]string{"baton.operation": "lock", "baton.outcome": "granted"}, 3},
		{"baton.lock.acquisitions", map[string]string{"baton.operation": "trylock", "baton.outcome": "busy"}, 1},
		{"baton.lock.acquire.duration", nil, 4},
		{"baton.lock.wait.duration", map[string]string{"baton.outcome": "granted"}, 1},
		{"baton.lock.hold.duration", map[string]string{"baton.lease.end": "released"}, 2},
		{"baton.lock.hold.duration", map[string]string{"baton.lease.end": "expired"}, 1},
		{"baton.lease.renewals", map[string]string{"baton.outcome": "renewed"}, 1},
		{"baton.lease.time_left", nil, 1},
		{"baton.lease.lost", nil, 1},
	}
	for _, c := range checks {
		if n := count(c.metric, c.attrs); n < c.min {
			t.Errorf("%s %v = %d, want at least %d", c.metric, c.attrs, n, c.min)
		}
	}
	if w, ok := got["baton.lock.waiting"].(metricdata.Sum[int64]); !ok || len(w.DataPoints) != 1 || w.DataPoints[0].Value != 0 {
		t.Errorf("baton.lock.waiting = %+v, want 0 once every wait ended", got["baton.lock.waiting"])
	}

	names := map[string]int{}
	for _, s := range spans.Ended() {
		names[s.Name()]++
		if s.Name() == "baton.store.acquire" && s.Parent().SpanID() == [8]byte{} {
			t.Error("a store call's span has no parent operation")
		}
	}
	for _, n := range []string{"baton.Lock", "baton.TryLock", "baton.Do", "baton.Release", "baton.Renew", "baton.store.acquire", "baton.store.release", "baton.store.renew"} {
		if names[n] == 0 {
			t.Errorf("no span %s (spans: %v)", n, names)
		}
	}
}

func match(kvs []attribute.KeyValue, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, kv := range kvs {
			if string(kv.Key) == k && kv.Value.AsString() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}
