package faultcheck

import (
	"time"

	"golang.org/x/sys/unix"
)

// Mono reads CLOCK_MONOTONIC in nanoseconds: one clock for every process
// on the machine (Go's own monotonic readings are per process, and wall
// time may step), so that the harness can order events of many workers.
// A worker started in a time namespace subtracts its offset (see
// WorkerConfig.MonoOffset).
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("faultcheck: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// monoAt converts t, a time of this process's clock, to Mono.
func monoAt(t time.Time) int64 { return Mono() + int64(time.Until(t)) }

func ms(ns int64) string { return time.Duration(ns).Round(time.Millisecond).String() }
