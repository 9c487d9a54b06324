//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// treeHelper writes its pid to DIR/child, starts a grandchild (the
// "sleeper" helper) and waits for a minute: the command of a baton that
// the test kills.
func treeHelper(dir string) int {
	gc := exec.Command(os.Args[0], "sleeper", dir)
	if err := gc.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	writeFileAtomic(filepath.Join(dir, "child"), strconv.Itoa(os.Getpid()))
	time.Sleep(time.Minute)
	return 0
}

// sleeperHelper writes its pid to DIR/grandchild and sleeps for a minute.
func sleeperHelper(dir string) int {
	writeFileAtomic(filepath.Join(dir, "grandchild"), strconv.Itoa(os.Getpid()))
	time.Sleep(time.Minute)
	return 0
}

// probeHelper, the command of the baton granted next, writes to
// DIR/probe which of the killed baton's processes still ran when it
// started.
func probeHelper(dir string) int {
	var alive []string
	for _, f := range []string{"child", "grandchild"} {
		b, _ := os.ReadFile(filepath.Join(dir, f))
		if pid, err := strconv.Atoi(string(b)); err == nil && running(pid) {
			alive = append(alive, f)
		}
	}
	writeFileAtomic(filepath.Join(dir, "probe"), "alive: "+strings.Join(alive, " "))
	return 0
}

// running tells whether pid is a live process (not a zombie).
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runtime.GOOS != "linux" // no /proc: take it as running
	}
	// pid (comm) STATE ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestKilledBatonTakesItsCommand kills baton with SIGKILL while its
// command runs, with a process the command started: both must be gone
// before another baton is granted the lock (a TTL later).
func TestKilledBatonTakesItsCommand(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	dir := t.TempDir()
	a := e.start(t, cmdline([]string{"run", "job", "--ttl", "2s"}, helperArgv("tree", dir)...)...)
	waitFile(t, filepath.Join(dir, "child"))
	waitFile(t, filepath.Join(dir, "grandchild"))
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	b := e.baton(t, cmdline([]string{"run", "job", "--timeout", "30s"}, helperArgv("probe", dir)...)...)
	if b.code != 0 {
		t.Fatalf("the next baton exited %d: %s", b.code, b.stderr)
	}
	if got := readString(t, filepath.Join(dir, "probe")); got != "alive: " {
		t.Errorf("when the next baton was granted the lock, the killed baton's processes still ran: %q", got)
	}
}
