//go:build unix

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// How the command runs on Unix, so that it never outlives baton:
//
//   - From a terminal's foreground (baton's process group owns the
//     terminal), the command stays in baton's process group, so that it
//     reads the terminal and gets ^C and ^Z as usual. On Linux the kernel
//     kills it (SIGKILL) when baton dies; processes it started are not
//     killed then.
//   - Otherwise (cron, systemd, scripts, pipes), baton starts a guard: baton
//     itself again, as the leader of a new process group, which runs the
//     command in that group. The guard holds the read end of a pipe whose
//     write end only baton holds; when baton dies, however it dies, the
//     kernel closes that end, and the guard kills the whole group with
//     SIGKILL: the command and every process it started that stayed in
//     its group. baton sends its signals (and the lease-lost SIGTERM and
//     SIGKILL) to the group as a whole.

// guardEnv marks baton's guard process; the guard removes it from the
// command's environment.
const guardEnv = "BATON_INTERNAL_GUARD"

// guardFD is the guard's end of the pipe to baton (its first extra file).
const guardFD = 3

type child struct {
	cmd    *exec.Cmd
	group  bool // cmd leads a process group of its own: signal the group
	pipe   *os.File
	exited chan struct{}
}

// startChild starts argv with env, as the comment above says.
func startChild(argv, env []string) (*child, error) {
	if inForeground() {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.Env = env
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		setPdeathsig(cmd.SysProcAttr)
		c := &child{cmd: cmd, exited: make(chan struct{})}
		return c, startLocked(cmd, c.exited)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find baton's own executable to guard the command: %w", err)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, err // as exec.Command would report it
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(env, guardEnv+"=1")
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c := &child{cmd: cmd, group: true, pipe: w, exited: make(chan struct{})}
	err = startLocked(cmd, c.exited)
	r.Close()
	if err != nil {
		w.Close()
		return nil, err
	}
	return c, nil
}

// startLocked starts cmd and waits for it on a goroutine locked to its OS
// thread: the parent-death signal is sent when the thread that forked the
// child exits, so that thread must outlive the child.
func startLocked(cmd *exec.Cmd, exited chan struct{}) error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	return <-started
}

// signal sends s to the command (to its whole group when it has one).
func (c *child) signal(s os.Signal) {
	if c.group {
		if n, ok := s.(syscall.Signal); ok {
			_ = syscall.Kill(-c.cmd.Process.Pid, n)
			return
		}
	}
	_ = c.cmd.Process.Signal(s)
}

func (c *child) kill() { c.signal(syscall.SIGKILL) }

// done releases what the child held, once it exited.
func (c *child) done() {
	if c.pipe != nil {
		c.pipe.Close()
	}
}

// inForeground tells whether baton's process group is the foreground group
// of its controlling terminal.
func inForeground() bool {
	for fd := 0; fd <= 2; fd++ {
		if fg, err := tcgetpgrp(fd); err == nil {
			return fg == unix.Getpgrp()
		}
	}
	return false
}

// isGuard tells whether this process is baton's guard of a command.
func isGuard() bool { return os.Getenv(guardEnv) == "1" }

// guardMain runs the command of os.Args[1:] in the guard's process group
// and exits with its code (128+N if signal N killed it); it kills the
// group when baton, its parent, dies.
func guardMain() int {
	argv := os.Args[1:]
	// The signals baton sends the group reach the guard too: it waits for
	// the command instead of dying. (Caught, not ignored, so that the
	// command starts with the default dispositions.)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for range sigs {
		}
	}()
	syscall.CloseOnExec(guardFD) // not the command's
	pipe := os.NewFile(guardFD, "baton")
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, guardEnv+"=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	setPdeathsig(cmd.SysProcAttr) // the guard killed: its command dies too
	exited := make(chan struct{})
	if err := startLocked(cmd, exited); err != nil {
		return cannotRun(argv[0], err)
	}
	go func() {
		// baton never writes: this returns when baton is gone.
		_, _ = io.Copy(io.Discard, pipe)
		_ = syscall.Kill(-os.Getpid(), syscall.SIGKILL)
	}()
	<-exited
	return exitCode(cmd.ProcessState)
}
