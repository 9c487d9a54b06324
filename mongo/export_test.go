package mongo

import "time"

// SetStaleInsert sets how slow an insert must be to be checked, and a
// function to run between an acquire's read and its insert; it returns
// a function that restores both.
func SetStaleInsert(d time.Duration, before func()) (restore func()) {
	d0, b0 := staleInsert, beforeInsert
	staleInsert, beforeInsert = d, before
	return func() { staleInsert, beforeInsert = d0, b0 }
}

const KeepTickets = keepTickets
