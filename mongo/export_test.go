package mongo

import "time"

// SetBusyFor sets how long a name skips the small commands after one
// found entries, and returns a function that restores it.
func SetBusyFor(d time.Duration) func() {
	old := busyFor
	busyFor = d
	return func() { busyFor = old }
}
