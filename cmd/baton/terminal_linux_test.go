package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKilledBatonTakesItsCommandOnTerminal does the same with baton in
// the foreground of a terminal, where the command stays in baton's process
// group: on Linux the kernel kills the command when baton dies.
func TestKilledBatonTakesItsCommandOnTerminal(t *testing.T) {
	t.Parallel()
	ptm, pts := openPTY(t)
	e := sqliteEnv(t)
	dir := t.TempDir()
	cmd := e.command(cmdline([]string{"run", "job", "--ttl", "2s"}, helperArgv("sleeper", dir)...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	// A session of its own with the terminal as its controlling terminal:
	// baton is then its foreground process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	go func() { // drain the terminal
		buf := make([]byte, 4096)
		for {
			if _, err := ptm.Read(buf); err != nil {
				return
			}
		}
	}()
	waitFile(t, filepath.Join(dir, "grandchild")) // the sleeper is the command here
	_ = cmd.Process.Kill()
	<-done
	b, _ := os.ReadFile(filepath.Join(dir, "grandchild"))
	pid, _ := strconv.Atoi(string(b))
	waitFor(t, "the command to die with baton", func() bool { return !running(pid) })
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	ptm = os.NewFile(uintptr(fd), "/dev/ptmx")
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pts.Close() })
	return ptm, pts
}

// TestWaitNoticeOnTerminal: on a terminal, a baton that waits more than a
// second says once who holds the lock, without --verbose.
func TestWaitNoticeOnTerminal(t *testing.T) {
	t.Parallel()
	ptm, pts := openPTY(t)
	e := sqliteEnv(t)
	dir := t.TempDir()
	holder := e.start(t, cmdline([]string{"run", "x", "--owner", "bob-2"}, helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	cmd := e.command(cmdline([]string{"run", "x", "--timeout", "2"}, helperArgv("exit", "0")...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pts, pts, pts
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	go func() { _, _ = io.Copy(&out, ptm) }()
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != exitNotAcquired {
		t.Errorf("waiter: %v, want exit %d", err, exitNotAcquired)
	}
	writeFileAtomic(filepath.Join(dir, "stop"), "")
	holder.wait(t)
	waitFor(t, "the terminal's output", func() bool { return strings.Contains(out.String(), "timed out") })
	if got := out.String(); strings.Count(got, `baton: waiting for lock "x", held by bob-2 on `) != 1 || !strings.Contains(got, "--verbose says more") {
		t.Errorf("terminal got %q, want one notice of who holds the lock", got)
	}
}
