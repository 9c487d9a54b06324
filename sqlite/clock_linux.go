//go:build linux

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// clockIsWall is false: the store's clock is the machine's monotonic clock.
const clockIsWall = false

// monoNow reads CLOCK_MONOTONIC: system-wide (every process on the machine
// reads the same clock, the one Go's runtime uses), never set or stepped,
// and restarted at each boot. A process in a time namespace of its own (a
// container, a CRIU restore) reads it shifted by its namespace's offset,
// which is taken off, so that every process of the machine agrees.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("sqlite: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano() - monoOffset()
}

// monoOffset is the CLOCK_MONOTONIC offset of this process's time
// namespace, relative to the machine's. A multi-threaded process (every Go
// program) cannot change its time namespace, so it is read once.
var monoOffset = sync.OnceValue(func() int64 {
	b, err := os.ReadFile("/proc/self/timens_offsets")
	if err != nil {
		return 0 // a kernel without time namespaces (before 5.6): no offset
	}
	return parseMonoOffset(string(b))
})

// parseMonoOffset reads the monotonic line of a timens_offsets file
// ("monotonic <seconds> <nanoseconds>").
func parseMonoOffset(s string) int64 {
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "monotonic" {
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 == nil && err2 == nil {
			return sec*1e9 + nsec
		}
	}
	return 0
}

// readBootID returns the kernel's id of the current boot. Without it the
// store could not tell holders of an earlier boot, whose monotonic times
// mean nothing now, from live ones.
func readBootID() (string, error) {
	const file = "/proc/sys/kernel/random/boot_id"
	b, err := os.ReadFile(file)
	id := strings.TrimSpace(string(b))
	if err == nil && id == "" {
		err = errors.New("file is empty")
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: cannot read the boot id from %s, which the store needs to tell holds of an earlier boot from live ones: %w", file, err)
	}
	return id, nil
}
