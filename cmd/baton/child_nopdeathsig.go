//go:build unix && !linux

package main

import "syscall"

// setPdeathsig does nothing: only Linux has a parent-death signal. A
// command run from a terminal's foreground is then not killed if baton
// dies; otherwise its guard kills it (see child_unix.go).
func setPdeathsig(*syscall.SysProcAttr) {}
