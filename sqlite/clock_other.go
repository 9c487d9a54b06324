//go:build !linux

package sqlite

import "time"

// clockIsWall is true: outside Linux the store's clock is the wall clock,
// so a step of the system clock shortens or lengthens the holds alive at
// that moment (see the package documentation).
const clockIsWall = true

func monoNow() int64 { return time.Now().UnixNano() }

func readBootID() (string, error) { return "", nil }
