//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests build baton once and drive the binary. The test binary doubles
// as the command baton runs: with BATON_TEST_HELPER set, TestMain runs a
// helper instead of the tests.

var batonBin string

const helperEnv = "BATON_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" && len(os.Args) > 1 {
		os.Exit(helper(os.Args[1], os.Args[2:]))
	}
	dir, err := os.MkdirTemp("", "baton-test-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	batonBin = filepath.Join(dir, "baton")
	build := exec.Command("go", "build", "-tags", "all", "-o", batonBin, ".") // every store
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// helper is the command that baton runs in the tests.
func helper(mode string, args []string) int {
	switch mode {
	case "exit": // exit N
		n, _ := strconv.Atoi(args[0])
		return n
	case "kill-self": // die of SIGKILL
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
		return 1
	case "env": // print the BATON_* variables
		for _, kv := range os.Environ() {
			if strings.HasPrefix(kv, "BATON_") && !strings.HasPrefix(kv, helperEnv+"=") {
				fmt.Println(kv)
			}
		}
		return 0
	case "tree": // tree DIR: see treeHelper
		return treeHelper(args[0])
	case "sleeper": // sleeper DIR: see sleeperHelper
		return sleeperHelper(args[0])
	case "probe": // probe DIR: see probeHelper
		return probeHelper(args[0])
	case "wait": // wait DIR [ignore]: see waitHelper
		return waitHelper(args[0], len(args) > 1 && args[1] == "ignore")
	case "counter": // counter DIR: see counterHelper
		if err := counterHelper(args[0]); err != nil {
			fmt.Fprintln(os.Stderr, "counter helper:", err)
			f, _ := os.OpenFile(filepath.Join(args[0], "failures"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			fmt.Fprintln(f, err)
			f.Close()
			return 1
		}
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown helper", mode)
	return 99
}

// waitHelper writes its pid to DIR/started, then waits until DIR/stop
// exists (exit 0) or a signal comes: it writes the signal's name to
// DIR/signal and exits 42, or, with ignore, goes on waiting.
func waitHelper(dir string, ignore bool) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	writeFileAtomic(filepath.Join(dir, "started"), strconv.Itoa(os.Getpid()))
	tick := time.NewTicker(5 * time.Millisecond)
	parent, deadline := os.Getppid(), time.Now().Add(time.Minute)
	for {
		select {
		case s := <-sigs:
			f, _ := os.OpenFile(filepath.Join(dir, "signal"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
			fmt.Fprintln(f, s)
			f.Close()
			if !ignore {
				return 42
			}
		case <-tick.C:
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				return 0
			}
			if os.Getppid() != parent || time.Now().After(deadline) {
				return 43 // orphaned, or forgotten by a failed test
			}
		}
	}
}

// counterHelper checks that it runs alone and with a fencing token above
// every earlier one, and counts its run.
func counterHelper(dir string) error {
	marker := filepath.Join(dir, "running")
	f, err := os.OpenFile(marker, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("overlap: another run is in progress: %v", err)
	}
	f.Close()
	token, err := strconv.ParseUint(os.Getenv("BATON_TOKEN"), 10, 64)
	if err != nil {
		return fmt.Errorf("BATON_TOKEN: %v", err)
	}
	last, err := readUint(filepath.Join(dir, "last-token"))
	if err != nil {
		return err
	}
	if token <= last {
		return fmt.Errorf("token %d is not above the last token %d", token, last)
	}
	n, err := readUint(filepath.Join(dir, "counter"))
	if err != nil {
		return err
	}
	time.Sleep(time.Millisecond) // widen the window for an overlap
	if err := os.WriteFile(filepath.Join(dir, "counter"), []byte(strconv.FormatUint(n+1, 10)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "last-token"), []byte(strconv.FormatUint(token, 10)), 0o644); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(dir, "tokens"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintln(log, token)
	log.Close()
	return os.Remove(marker)
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

func writeFileAtomic(path, data string) {
	tmp := path + ".tmp"
	_ = os.WriteFile(tmp, []byte(data), 0o644)
	_ = os.Rename(tmp, path)
}

// env is an environment for baton: the test's own minus BATON_* and the
// XDG state directory, with HOME in a temporary directory, plus extra.
type env struct {
	home string
	vars []string
}

func newEnv(t *testing.T, extra ...string) *env {
	t.Helper()
	home := t.TempDir()
	var vars []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "BATON_") || k == "XDG_STATE_HOME" || k == "HOME" {
			continue
		}
		vars = append(vars, kv)
	}
	vars = append(vars, "HOME="+home)
	if os.Getenv("GORACE") == "" {
		// Under -race, the helper would sleep 1s at exit.
		vars = append(vars, "GORACE=atexit_sleep_ms=0")
	}
	return &env{home: home, vars: append(vars, extra...)}
}

// sqliteEnv is an environment whose store is an SQLite file chosen with
// $BATON_STORE.
func sqliteEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, "BATON_STORE=sqlite://"+filepath.ToSlash(filepath.Join(t.TempDir(), "locks.db")))
}

// helperArgv is the command line that runs helper mode: the test binary
// itself (baton passes on its environment, where helperEnv is set).
func helperArgv(mode string, args ...string) []string {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return append([]string{exe, mode}, args...)
}

type result struct {
	code           int
	stdout, stderr string
}

// baton runs baton with args to completion.
func (e *env) baton(t *testing.T, args ...string) result {
	t.Helper()
	r, err := e.run(args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run is baton without a testing.T, for other goroutines.
func (e *env) run(args ...string) (result, error) {
	cmd := e.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return result{}, fmt.Errorf("baton %q: %v", args, err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}, nil
}

func (e *env) command(args ...string) *exec.Cmd {
	cmd := exec.Command(batonBin, args...)
	cmd.Env = append(e.vars[:len(e.vars):len(e.vars)], helperEnv+"=1")
	return cmd
}

// bg is a baton process running in the background.
type bg struct {
	cmd      *exec.Cmd
	out, err syncBuffer
	done     chan struct{}
}

// syncBuffer is a bytes.Buffer that a test may read while a process
// writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stderrText is what the background baton wrote to stderr so far.
func (b *bg) stderrText() string { return b.err.String() }

func (e *env) start(t *testing.T, args ...string) *bg {
	t.Helper()
	b := &bg{cmd: e.command(args...), done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.err
	// Wait returns even if an orphaned command keeps the output open.
	b.cmd.WaitDelay = 2 * time.Second
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

// wait waits for the background baton to exit and returns its result.
func (b *bg) wait(t *testing.T) result {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
		t.Fatalf("baton %q did not exit; stderr: %s", b.cmd.Args[1:], b.err.String())
	}
	return result{b.cmd.ProcessState.ExitCode(), b.out.String(), b.err.String()}
}

// waitFor polls cond until it holds, for at most 15s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	waitFor(t, path, func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
}

// checkOneLine checks that stderr is one line "baton: ..." (plus, for
// usage errors, the hint to run --help).
func checkOneLine(t *testing.T, r result, usage bool) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	want := 1
	if usage {
		want = 2
	}
	if len(lines) != want || !strings.HasPrefix(lines[0], "baton: ") {
		t.Errorf("stderr is not one line \"baton: ...\"%s:\n%s", map[bool]string{true: " and a hint", false: ""}[usage], r.stderr)
	}
	if usage && !strings.Contains(lines[len(lines)-1], "--help") {
		t.Errorf("usage error without a hint to run --help:\n%s", r.stderr)
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Errorf("stderr shows a panic:\n%s", r.stderr)
	}
}
