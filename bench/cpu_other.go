//go:build !unix

package main

import "time"

// cpuTime is unknown here.
func cpuTime() time.Duration { return -1 }
