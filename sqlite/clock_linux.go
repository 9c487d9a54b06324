//go:build linux

package sqlite

import (
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// clockIsWall is false: the store's clock is the machine's monotonic clock.
const clockIsWall = false

// monoNow reads CLOCK_MONOTONIC: system-wide (every process on the machine
// reads the same clock, the one Go's runtime uses), never set or stepped,
// and restarted at each boot.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("sqlite: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

// readBootID returns the kernel's id of the current boot, or "" if it
// cannot be read.
func readBootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
