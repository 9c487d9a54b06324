// Package otel reports what baton does to OpenTelemetry: metrics of
// acquisitions, waits, holds and renewals, and a span per Lock, TryLock,
// Do, Release and renewal with the store calls inside. It is a module of
// its own, so that baton's core needs no OpenTelemetry:
//
//	client, err := baton.Open(ctx, url, &baton.Options{Observer: otel.New(nil)})
//
// With nil options it uses the global providers (otel.GetMeterProvider,
// otel.GetTracerProvider).
//
// Metrics (meter "github.com/baton-go/baton"):
//
//	baton.lock.acquisitions      counter    {acquisition}  by baton.operation (lock, trylock) and baton.outcome (granted, busy, canceled, error)
//	baton.lock.acquire.duration  histogram  s              a Lock or TryLock from call to return, by baton.operation and baton.outcome
//	baton.lock.wait.duration     histogram  s              the wait of a Lock, from its first refusal, by baton.outcome
//	baton.lock.waiting           updown     {request}      requests waiting now
//	baton.lock.hold.duration     histogram  s              leases from grant to their end, by baton.lease.end (released, lost, expired)
//	baton.lease.renewals         counter    {renewal}      by baton.outcome (renewed, failed)
//	baton.lease.time_left        histogram  s              the time a lease had left when its renewal was sent
//	baton.lease.lost             counter    {lease}        leases that ended lost or expired, not released
//
// Lock names are not metric attributes (a service that locks per entity
// would have one series per entity) unless Options.NameAttribute is set;
// spans always carry the name (baton.lock.name).
package otel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// Scope is the instrumentation scope of the meter and the tracer.
const Scope = "github.com/baton-go/baton"

// Options configure an Observer. The zero value (or nil) works.
type Options struct {
	MeterProvider  metric.MeterProvider // otel.GetMeterProvider() if nil
	TracerProvider trace.TracerProvider // otel.GetTracerProvider() if nil
	// NameAttribute adds the lock name to the metrics' attributes
	// (baton.lock.name): only for a small, fixed set of names.
	NameAttribute bool
}

// Observer is a baton.Observer that reports to OpenTelemetry.
type Observer struct {
	tracer   trace.Tracer
	names    bool
	acq      metric.Int64Counter
	acqDur   metric.Float64Histogram
	waitDur  metric.Float64Histogram
	waiting  metric.Int64UpDownCounter
	holdDur  metric.Float64Histogram
	renewals metric.Int64Counter
	left     metric.Float64Histogram
	lost     metric.Int64Counter
}

// New returns an Observer for baton.Options.Observer.
func New(o *Options) (*Observer, error) {
	if o == nil {
		o = &Options{}
	}
	mp, tp := o.MeterProvider, o.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(Scope)
	ob := &Observer{tracer: tp.Tracer(Scope), names: o.NameAttribute}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	ob.acq, err = m.Int64Counter("baton.lock.acquisitions", metric.WithUnit("{acquisition}"),
		metric.WithDescription("Lock and TryLock calls, by outcome"))
	add(err)
	ob.acqDur, err = m.Float64Histogram("baton.lock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a Lock or TryLock call to its return"))
	add(err)
	ob.waitDur, err = m.Float64Histogram("baton.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a Lock waited, from its first refused attempt"))
	add(err)
	ob.waiting, err = m.Int64UpDownCounter("baton.lock.waiting", metric.WithUnit("{request}"),
		metric.WithDescription("Lock calls waiting now"))
	add(err)
	ob.holdDur, err = m.Float64Histogram("baton.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a grant to the end of its lease"))
	add(err)
	ob.renewals, err = m.Int64Counter("baton.lease.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals, by outcome"))
	add(err)
	ob.left, err = m.Float64Histogram("baton.lease.time_left", metric.WithUnit("s"),
		metric.WithDescription("Time a lease had left when its renewal was sent"))
	add(err)
	ob.lost, err = m.Int64Counter("baton.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases that ended lost or expired, not released"))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return ob, nil
}

var _ baton.Observer = (*Observer)(nil)

// Op implements baton.Observer: a span per operation, and the acquisition
// metrics.
func (ob *Observer) Op(ctx context.Context, op baton.Op) (context.Context, func(baton.OpResult)) {
	ctx, span := ob.tracer.Start(ctx, "baton."+spanName(op.Kind), trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("baton.lock.name", op.Name),
			attribute.String("baton.lock.mode", op.Mode.String()),
			attribute.Int("baton.lock.limit", op.Limit),
			attribute.Int("baton.lease.count", op.Count)))
	start := time.Now()
	return ctx, func(r baton.OpResult) {
		outcome := outcomeOf(op.Kind, r.Err)
		if r.Token != 0 {
			span.SetAttributes(attribute.Int64("baton.lock.token", int64(r.Token)))
		}
		if r.Waited > 0 {
			span.SetAttributes(attribute.Float64("baton.lock.waited", r.Waited.Seconds()))
		}
		if r.Err != nil && outcome != "busy" && outcome != "canceled" {
			span.RecordError(r.Err)
			span.SetStatus(codes.Error, r.Err.Error())
		}
		span.SetAttributes(attribute.String("baton.outcome", outcome))
		span.End()
		if op.Kind != "lock" && op.Kind != "trylock" {
			return
		}
		attrs := metric.WithAttributes(ob.attrs(op.Name,
			attribute.String("baton.operation", op.Kind), attribute.String("baton.outcome", outcome))...)
		ob.acq.Add(ctx, 1, attrs)
		ob.acqDur.Record(ctx, time.Since(start).Seconds(), attrs)
		if r.Waited > 0 {
			ob.waiting.Add(ctx, -1, metric.WithAttributes(ob.attrs(op.Name)...))
			ob.waitDur.Record(ctx, r.Waited.Seconds(), metric.WithAttributes(ob.attrs(op.Name, attribute.String("baton.outcome", outcome))...))
		}
	}
}

// Call implements baton.Observer: a span per store call.
func (ob *Observer) Call(ctx context.Context, call, name string) func(error) {
	_, span := ob.tracer.Start(ctx, "baton.store."+call, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("baton.lock.name", name)))
	return func(err error) {
		if err != nil && !errors.Is(err, driver.ErrNotGranted) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Event implements baton.Observer: the lease and wait metrics.
func (ob *Observer) Event(e baton.Event) {
	ctx := context.Background()
	attrs := ob.attrs(e.Name)
	switch e.Kind {
	case baton.EventWaiting:
		ob.waiting.Add(ctx, 1, metric.WithAttributes(attrs...))
	case baton.EventRenewed:
		ob.renewals.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("baton.outcome", "renewed"))...))
		if e.Left > 0 {
			ob.left.Record(ctx, e.Left.Seconds(), metric.WithAttributes(attrs...))
		}
	case baton.EventRenewFailed:
		ob.renewals.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("baton.outcome", "failed"))...))
	case baton.EventReleased, baton.EventLost, baton.EventExpired:
		ob.holdDur.Record(ctx, e.Held.Seconds(), metric.WithAttributes(append(attrs, attribute.String("baton.lease.end", string(e.Kind)))...))
		if e.Kind != baton.EventReleased {
			ob.lost.Add(ctx, 1, metric.WithAttributes(attrs...))
		}
	}
}

func (ob *Observer) attrs(name string, more ...attribute.KeyValue) []attribute.KeyValue {
	if ob.names {
		more = append(more, attribute.String("baton.lock.name", name))
	}
	return more
}

func spanName(kind string) string {
	switch kind {
	case "lock":
		return "Lock"
	case "trylock":
		return "TryLock"
	case "do":
		return "Do"
	case "release":
		return "Release"
	case "renew":
		return "Renew"
	}
	return kind
}

// outcomeOf classifies an operation's error.
func outcomeOf(kind string, err error) string {
	switch {
	case err == nil && (kind == "lock" || kind == "trylock" || kind == "do"):
		return "granted"
	case err == nil:
		return "ok"
	case errors.Is(err, baton.ErrLocked):
		return "busy"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}
