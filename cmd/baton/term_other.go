//go:build !unix

package main

import "os"

// fromTerminal is false where there are no process groups: baton passes
// every signal on.
func fromTerminal(os.Signal) bool { return false }
