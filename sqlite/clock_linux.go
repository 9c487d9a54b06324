//go:build linux

package sqlite

import (
	"errors"
	"fmt"
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
