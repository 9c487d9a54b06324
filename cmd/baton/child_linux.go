package main

import "syscall"

// setPdeathsig makes the kernel kill the child when its parent dies.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
