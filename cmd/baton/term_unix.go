//go:build unix

package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fromTerminal tells whether s was most likely sent by baton's controlling
// terminal (^C, ^\) rather than by kill(1): the terminal sends SIGINT and
// SIGQUIT to its whole foreground process group, so when baton is in that
// group, the command (which is in baton's group) got s too.
func fromTerminal(s os.Signal) bool {
	if s != os.Interrupt && s != syscall.SIGQUIT {
		return false
	}
	for fd := 0; fd <= 2; fd++ {
		if fg, err := tcgetpgrp(fd); err == nil {
			return fg == unix.Getpgrp()
		}
	}
	return false
}
