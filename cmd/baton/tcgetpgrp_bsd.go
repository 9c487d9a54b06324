//go:build unix && !linux

package main

import "golang.org/x/sys/unix"

// tcgetpgrp is the foreground process group of the terminal open as fd.
func tcgetpgrp(fd int) (int, error) {
	return unix.IoctlGetInt(fd, unix.TIOCGPGRP)
}
