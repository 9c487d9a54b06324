package main

import "golang.org/x/sys/unix"

// tcgetpgrp is the foreground process group of the terminal open as fd.
func tcgetpgrp(fd int) (int, error) {
	pg, err := unix.IoctlGetUint32(fd, unix.TIOCGPGRP)
	return int(pg), err
}
