//go:build unix

package main

import (
	"flag"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cmdline joins baton's arguments, "--" and a command.
func cmdline(args []string, argv ...string) []string {
	return append(append(args[:len(args):len(args)], "--"), argv...)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "--help"}, {c.name, "-h"}, {"help", c.name}} {
			r := e.baton(t, args...)
			if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: baton "+c.name) || r.stderr != "" {
				t.Errorf("baton %q: exit %d, stdout %.60q…, stderr %q", args, r.code, r.stdout, r.stderr)
			}
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		r := e.baton(t, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Exit codes:") || r.stderr != "" {
			t.Errorf("baton %q: exit %d, stdout %.60q…, stderr %q", args, r.code, r.stdout, r.stderr)
		}
	}
	// --help works after a name too, and wins over missing arguments.
	if r := e.baton(t, "run", "x", "--help"); r.code != 0 {
		t.Errorf("baton run x --help: exit %d", r.code)
	}
	if r := e.baton(t); r.code != exitUsage || !strings.Contains(r.stderr, "Commands:") {
		t.Errorf("baton without arguments: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.baton(t, "version"); r.code != 0 || !strings.HasPrefix(r.stdout, "baton ") {
		t.Errorf("baton version: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestHelpListsFlags checks that each flag of run is in its help text.
func TestHelpListsFlags(t *testing.T) {
	var f runFlags
	runFlagSet(&f).VisitAll(func(fl *flag.Flag) {
		dash := "--"
		if len(fl.Name) == 1 {
			dash = "-"
		}
		f := dash + fl.Name
		if !strings.Contains(runHelp, "  "+f+" ") && !strings.Contains(runHelp, "  "+f+", ") && !strings.Contains(runHelp, ", "+f+" ") {
			t.Errorf("baton run --help does not document %s%s", dash, fl.Name)
		}
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "BATON_STORE=mem://")
	ok := helperArgv("exit", "0")
	for _, tc := range []struct {
		args  []string
		code  int
		usage bool
	}{
		{cmdline([]string{"run", "x", "-n", "0"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "-n", "-3", "x"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--ttl", "-1s"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--ttl", "0"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--ttl", "banana"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--timeout", "-1s"}, ok...), exitUsage, true},
		{cmdline([]string{"run", ""}, ok...), exitUsage, true},
		{cmdline([]string{"run"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--bogus"}, ok...), exitUsage, true},
		{[]string{"run", "x"}, exitUsage, true},
		{[]string{"run", "x", "--"}, exitUsage, true},
		{[]string{"run", "x", "echo", "hi"}, exitUsage, true},
		{[]string{"run"}, exitUsage, true},
		{cmdline([]string{"run", "x", "--store", "foo://bar"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--store", "no-scheme"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "--store", "postgres://%zz"}, ok...), exitUsage, true},
		{cmdline([]string{"run", "   "}, ok...), exitUsage, true},
		{cmdline([]string{"run", "x", "-E", "256"}, ok...), exitUsage, true},
		{[]string{"status", "--timeout", "0"}, exitUsage, true},
		{cmdline([]string{"run", "x\x01y"}, ok...), exitUsage, false},
		{cmdline([]string{"run", "x", "--owner", "has space"}, ok...), exitUsage, false},
		{[]string{"status", "--store", "foo://bar"}, exitUsage, true},
		{[]string{"status", "a", "b"}, exitUsage, true},
		{[]string{"status", "--bogus"}, exitUsage, true},
		{[]string{"release", "x"}, exitUsage, true},
		{[]string{"release", "--owner", "o"}, exitUsage, true},
		{[]string{"release", "x", "--owner", "o"}, exitError, false}, // held nothing
		{[]string{"release", "x", "--ask", "--owner", "o"}, exitUsage, true},
		{[]string{"release", "x", "--reason", "r", "--owner", "o"}, exitUsage, true},
		{[]string{"release", "--ask"}, exitUsage, true},
		{[]string{"release", "x", "--ask", "--wait", "0"}, exitUsage, true},
		{[]string{"release", "x", "--ask", "--reason", strings.Repeat("r", 2000)}, exitUsage, false},
		{cmdline([]string{"run", "x", "--on-ask", "BOGUS"}, ok...), exitUsage, true},
		{[]string{"purge", "extra"}, exitUsage, true},
		{[]string{"bogus"}, exitUsage, true},
		{[]string{"help", "bogus"}, exitUsage, true},
		{[]string{"--store", "x", "status"}, exitUsage, true},
	} {
		r := e.baton(t, tc.args...)
		if r.code != tc.code {
			t.Errorf("baton %q: exit %d, want %d; stderr:\n%s", tc.args, r.code, tc.code, r.stderr)
		}
		checkOneLine(t, r, tc.usage)
		if r.stdout != "" {
			t.Errorf("baton %q: stdout %q", tc.args, r.stdout)
		}
	}
	// With BATON_STORE pointing to an unknown store, the message says so.
	r := newEnv(t, "BATON_STORE=foo://x").baton(t, cmdline([]string{"run", "x"}, ok...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, "BATON_STORE") || !strings.Contains(r.stderr, `"foo"`) {
		t.Errorf("unknown store from BATON_STORE: exit %d, stderr %q", r.code, r.stderr)
	}
	checkOneLine(t, r, true)
}

// TestConventions: durations in plain seconds, the conflict exit code,
// messages that spell flags as the help does, blank names.
func TestConventions(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	ok := helperArgv("exit", "0")
	if r := e.baton(t, cmdline([]string{"run", "x", "--timeout", "5", "--ttl", "2.5", "--grace", "1"}, ok...)...); r.code != 0 {
		t.Errorf("durations in seconds: exit %d, stderr %q", r.code, r.stderr)
	}
	r := e.baton(t, cmdline([]string{"run", "x", "--ttl", "banana"}, ok...)...)
	if !strings.Contains(r.stderr, "--ttl") || strings.Contains(r.stderr, " -ttl") {
		t.Errorf("bad --ttl: stderr %q, want the flag spelled --ttl", r.stderr)
	}
	r = e.baton(t, cmdline([]string{"run", "x", "--bogus"}, ok...)...)
	if !strings.Contains(r.stderr, "unknown flag: --bogus") {
		t.Errorf("unknown flag: stderr %q", r.stderr)
	}
	r = e.baton(t, cmdline([]string{"run", "  "}, ok...)...)
	if !strings.Contains(r.stderr, "blank") {
		t.Errorf("name of spaces: stderr %q, want it called blank", r.stderr)
	}
	// The lock held: --wait=false and --timeout exit with -E's code.
	dir := t.TempDir()
	holder := e.start(t, cmdline([]string{"run", "x"}, helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	for _, args := range [][]string{
		{"run", "x", "--wait=false", "-E", "9"},
		{"run", "x", "--timeout", "0.2", "--conflict-exit-code", "9"},
	} {
		if r := e.baton(t, cmdline(args, ok...)...); r.code != 9 {
			t.Errorf("baton %q: exit %d, want 9; stderr %q", args, r.code, r.stderr)
		}
	}
	if r := e.baton(t, cmdline([]string{"run", "x", "--wait=false"}, ok...)...); r.code != exitNotAcquired {
		t.Errorf("held, --wait=false: exit %d, want %d", r.code, exitNotAcquired)
	}
	writeFileAtomic(filepath.Join(dir, "stop"), "")
	holder.wait(t)
}

func TestExitCodePassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, code := range []int{0, 1, 3, 7, 42, 255} {
		r := e.baton(t, cmdline([]string{"run", "x", "--store", "mem://"}, helperArgv("exit", strconv.Itoa(code))...)...)
		if r.code != code || r.stderr != "" {
			t.Errorf("command exited %d: baton exited %d, stderr %q", code, r.code, r.stderr)
		}
	}
	r := e.baton(t, cmdline([]string{"run", "x", "--store", "mem://"}, helperArgv("kill-self")...)...)
	if r.code != 128+int(syscall.SIGKILL) {
		t.Errorf("command killed by SIGKILL: baton exited %d, want %d", r.code, 128+int(syscall.SIGKILL))
	}
	r = e.baton(t, "run", "x", "--store", "mem://", "--", filepath.Join(t.TempDir(), "missing"))
	if r.code != exitNotFound {
		t.Errorf("missing command: exit %d, want %d", r.code, exitNotFound)
	}
	checkOneLine(t, r, false)
	r = e.baton(t, "run", "x", "--store", "mem://", "--", t.TempDir())
	if r.code != exitCannotRun {
		t.Errorf("directory as command: exit %d, want %d", r.code, exitCannotRun)
	}
	checkOneLine(t, r, false)
}

func TestChildEnv(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "BATON_STORE=mem://", "BATON_TOKEN=stale")
	for _, tc := range []struct {
		flags []string
		mode  string
	}{
		// Flags go before and after the name.
		{[]string{"--owner", "Owner-1", "job", "--ttl", "30s"}, "exclusive"},
		{[]string{"--shared", "job", "--owner", "Owner-1", "--ttl", "30s"}, "shared"},
		{[]string{"-n", "3", "--owner", "Owner-1", "--ttl=30s", "job"}, "shared"},
	} {
		args := cmdline(append([]string{"run"}, tc.flags...), helperArgv("env")...)
		r := e.baton(t, args...)
		if r.code != 0 {
			t.Fatalf("baton %q: exit %d, stderr %s", args, r.code, r.stderr)
		}
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			k, v, _ := strings.Cut(line, "=")
			if _, dup := got[k]; dup {
				t.Errorf("%s twice in the environment", k)
			}
			got[k] = v
		}
		want := map[string]string{
			"BATON_NAME": "job", "BATON_OWNER": "Owner-1", "BATON_TTL": "30s",
			"BATON_MODE": tc.mode, "BATON_STORE": "mem://",
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%v: %s=%q, want %q", tc.flags, k, got[k], v)
			}
		}
		if n, err := strconv.ParseUint(got["BATON_TOKEN"], 10, 64); err != nil || n == 0 {
			t.Errorf("%v: BATON_TOKEN=%q", tc.flags, got["BATON_TOKEN"])
		}
	}
}

// TestSignals checks that baton passes SIGTERM and SIGINT on to its
// command, waits for it, and exits with its code; and that a command that
// ignores the signal is killed after --grace.
func TestSignals(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		e := newEnv(t)
		dir := t.TempDir()
		b := e.start(t, cmdline([]string{"run", "x", "--store", "mem://"}, helperArgv("wait", dir)...)...)
		waitFile(t, filepath.Join(dir, "started"))
		if err := b.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		r := b.wait(t)
		if r.code != 42 {
			t.Errorf("%v: baton exited %d, want the command's 42; stderr %q", sig, r.code, r.stderr)
		}
		if got := readString(t, filepath.Join(dir, "signal")); got != sig.String()+"\n" {
			t.Errorf("%v: the command got %q", sig, got)
		}
	}

	e := newEnv(t)
	dir := t.TempDir()
	b := e.start(t, cmdline([]string{"run", "x", "--store", "mem://", "--grace", "200ms"}, helperArgv("wait", dir, "ignore")...)...)
	waitFile(t, filepath.Join(dir, "started"))
	start := time.Now()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	r := b.wait(t)
	if r.code != 128+int(syscall.SIGKILL) {
		t.Errorf("command that ignores SIGTERM: baton exited %d, want %d; stderr %q", r.code, 128+int(syscall.SIGKILL), r.stderr)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("command killed %v after SIGTERM, before the grace of 200ms", d)
	}
	if got := readString(t, filepath.Join(dir, "signal")); got != "terminated\n" {
		t.Errorf("the command got %q", got)
	}
}

// TestVerbose: a waiting baton run --verbose says who holds the lock (owner,
// host, since when, token, time left), then what happens to its lease.
func TestVerbose(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	dir := t.TempDir()
	holder := e.start(t, cmdline([]string{"run", "x", "--owner", "alice-1"}, helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	w := e.start(t, cmdline([]string{"run", "x", "--verbose", "--ttl", "1s", "--timeout", "20"}, helperArgv("exit", "0")...)...)
	waitFor(t, "the waiter to say who holds the lock", func() bool {
		return strings.Contains(w.stderrText(), `waiting for lock "x", held by alice-1 on `)
	})
	time.Sleep(1500 * time.Millisecond) // the holder renews: nothing new to say
	writeFileAtomic(filepath.Join(dir, "stop"), "")
	holder.wait(t)
	r := w.wait(t)
	if r.code != 0 {
		t.Fatalf("waiter exited %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{`waiting for lock "x", held by alice-1 on `, "(token 1, ", " left)", `acquired lock "x", token 2`, `released lock "x" after `} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if n := strings.Count(r.stderr, "waiting for lock"); n != 1 {
		t.Errorf("said %d times what it waits for, want once (the holder did not change):\n%s", n, r.stderr)
	}
}

// TestLimitConflict: joining a semaphore with another -n, or --shared, is
// refused with one line that says so, instead of exceeding its limit.
func TestLimitConflict(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	dir := t.TempDir()
	holder := e.start(t, cmdline([]string{"run", "pool", "-n", "2"}, helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	for _, args := range [][]string{{"run", "pool", "--shared"}, {"run", "pool", "-n", "3"}} {
		r := e.baton(t, cmdline(args, helperArgv("exit", "0")...)...)
		if r.code != exitError || !strings.Contains(r.stderr, "semaphore of 2") || !strings.Contains(r.stderr, "exceed") {
			t.Errorf("baton %q: exit %d, stderr %q; want a refusal naming the semaphore of 2", args, r.code, r.stderr)
		}
		checkOneLine(t, r, false)
	}
	if r := e.baton(t, cmdline([]string{"run", "pool", "-n", "2"}, helperArgv("exit", "0")...)...); r.code != 0 {
		t.Errorf("the second slot of the semaphore: exit %d, stderr %q", r.code, r.stderr)
	}
	writeFileAtomic(filepath.Join(dir, "stop"), "")
	holder.wait(t)
}

// TestMinHold: with --min-hold, a command that exits at once leaves the
// lock held until the minimum has passed, after baton itself has exited.
func TestMinHold(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	ok := helperArgv("exit", "0")
	minHold := 2 * time.Second
	start := time.Now()
	if r := e.baton(t, cmdline([]string{"run", "x", "--min-hold", "2"}, ok...)...); r.code != 0 {
		t.Fatalf("--min-hold 2: exit %d, stderr %q", r.code, r.stderr)
	}
	if time.Since(start) < minHold/2 {
		if r := e.baton(t, cmdline([]string{"run", "x", "--wait=false"}, ok...)...); r.code != exitNotAcquired {
			t.Errorf("within the minimum hold, --wait=false: exit %d, want %d", r.code, exitNotAcquired)
		}
	}
	if r := e.baton(t, cmdline([]string{"run", "x", "--timeout", "30"}, ok...)...); r.code != 0 || time.Since(start) < minHold {
		t.Errorf("after the minimum hold: exit %d after %v, want 0 after %v; stderr %q", r.code, time.Since(start), minHold, r.stderr)
	}
	if r := e.baton(t, cmdline([]string{"run", "x", "--min-hold", "-1"}, ok...)...); r.code == 0 || !strings.Contains(r.stderr, "--min-hold") {
		t.Errorf("negative --min-hold: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestLockDelayFlag: --lock-delay reaches the lock; a release at the
// command's exit is voluntary, so the lock is free at once.
func TestLockDelayFlag(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	ok := helperArgv("exit", "0")
	if r := e.baton(t, cmdline([]string{"run", "x", "--lock-delay", "60"}, ok...)...); r.code != 0 {
		t.Fatalf("--lock-delay 60: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.baton(t, cmdline([]string{"run", "x", "--wait=false"}, ok...)...); r.code != 0 {
		t.Errorf("after a clean exit with --lock-delay, --wait=false: exit %d, stderr %q", r.code, r.stderr)
	}
	if r := e.baton(t, cmdline([]string{"run", "x", "--lock-delay", "-1"}, ok...)...); r.code == 0 || !strings.Contains(r.stderr, "--lock-delay") {
		t.Errorf("negative --lock-delay: exit %d, stderr %q", r.code, r.stderr)
	}
}
