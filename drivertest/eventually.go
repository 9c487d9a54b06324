package drivertest

import (
	"testing"
	"time"
)

// Eventually polls cond every 20ms until it holds, and fails the test
// when d passes first, naming what it waited for.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
