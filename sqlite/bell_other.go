//go:build !unix

package sqlite

import "errors"

// ownBell is a process's own doorbell, which needs FIFOs: elsewhere every
// waiter follows the common doorbell.
type ownBell struct{ id string }

func makeBell(string, func()) (*ownBell, error) {
	return nil, errors.New("sqlite: no FIFOs on this system")
}

func (*ownBell) close() {}

func ringBells(string, []string) {}
