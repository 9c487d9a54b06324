//go:build unix

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests need several baton processes to share a store: SQLite.

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// holder runs "baton run" with args in the background, its command
// waiting in dir until stop is called.
type holder struct {
	*bg
	dir string
}

func (e *env) hold(t *testing.T, args ...string) *holder {
	t.Helper()
	dir := t.TempDir()
	b := e.start(t, cmdline(append([]string{"run"}, args...), helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	return &holder{b, dir}
}

func (h *holder) stop(t *testing.T) result {
	t.Helper()
	writeFileAtomic(filepath.Join(h.dir, "stop"), "")
	return h.wait(t)
}

func (e *env) statusJSON(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	r := e.baton(t, append([]string{"status", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("baton status --json: exit %d, stderr %s", r.code, r.stderr)
	}
	var out []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("baton status --json: %v\n%s", err, r.stdout)
	}
	return out
}

func TestHeldAndStatus(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	h := e.hold(t, "build", "--owner", "alice", "--ttl", "20s")
	s1 := e.hold(t, "uploads", "-n", "3", "--owner", "bob")
	s2 := e.hold(t, "--shared", "uploads", "-n", "3", "--owner", "carol")

	// Held, --wait=false: exit 3 at once, saying who holds it.
	r := e.baton(t, cmdline([]string{"run", "build", "--wait=false"}, helperArgv("exit", "0")...)...)
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "alice") {
		t.Errorf("--wait=false on a held lock: exit %d, stderr %q", r.code, r.stderr)
	}
	checkOneLine(t, r, false)
	// Held, --timeout: exit 3 after the timeout.
	start := time.Now()
	r = e.baton(t, cmdline([]string{"run", "build", "--timeout", "300ms"}, helperArgv("exit", "0")...)...)
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "timed out") {
		t.Errorf("--timeout on a held lock: exit %d, stderr %q", r.code, r.stderr)
	}
	checkOneLine(t, r, false)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("--timeout 300ms gave up after %v", d)
	}
	// A third slot of the semaphore is free; the request is granted.
	if r := e.baton(t, cmdline([]string{"run", "uploads", "-n", "3", "--wait=false"}, helperArgv("exit", "5")...)...); r.code != 5 {
		t.Errorf("free semaphore slot: exit %d, stderr %q", r.code, r.stderr)
	}

	// The table.
	r = e.baton(t, "status")
	if r.code != 0 {
		t.Fatalf("status: exit %d, stderr %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !slices.Equal(strings.Fields(lines[0]), []string{"NAME", "MODE", "OWNER", "TOKEN", "HOST", "LEFT", "AGE"}) {
		t.Fatalf("status table:\n%s", r.stdout)
	}
	host, _ := os.Hostname()
	for i, want := range [][]string{{"build", "exclusive", "alice"}, {"uploads", "shared/3", "bob"}, {"uploads", "shared/3", "carol"}} {
		f := strings.Fields(lines[i+1])
		if len(f) != 7 || !slices.Equal(f[:3], want) || (host != "" && f[4] != host) {
			t.Errorf("status row %d: %q, want %q…", i+1, lines[i+1], want)
		}
	}
	// With a prefix.
	if r := e.baton(t, "status", "upl"); strings.Count(r.stdout, "\n") != 3 || strings.Contains(r.stdout, "build") {
		t.Errorf("status upl:\n%s", r.stdout)
	}
	if r := e.baton(t, "status", "nothing-"); r.code != 0 || r.stdout != "" {
		t.Errorf("status with no match: exit %d, stdout %q", r.code, r.stdout)
	}

	// JSON.
	js := e.statusJSON(t)
	if len(js) != 3 {
		t.Fatalf("status --json: %d entries, want 3: %v", len(js), js)
	}
	keys := []string{"created", "expires", "host", "left_ms", "limit", "meta", "mode", "name", "owner", "queued", "renewed", "token", "ttl_ms"}
	for _, j := range js {
		var got []string
		for k := range j {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Errorf("status --json keys %q, want %q", got, keys)
		}
	}
	b := js[0]
	if b["name"] != "build" || b["owner"] != "alice" || b["mode"] != "exclusive" || b["limit"] != 0.0 ||
		b["ttl_ms"] != 20000.0 || b["queued"] != false || b["token"].(float64) < 1 || b["left_ms"].(float64) <= 0 {
		t.Errorf("status --json entry: %v", b)
	}
	for _, k := range []string{"created", "renewed", "expires"} {
		if _, err := time.Parse(time.RFC3339Nano, b[k].(string)); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if u := js[1]; u["mode"] != "shared" || u["limit"] != 3.0 {
		t.Errorf("status --json semaphore entry: %v", u)
	}
	if js := e.statusJSON(t, "none-"); js == nil || len(js) != 0 {
		t.Errorf("status --json with no match: %v, want []", js)
	}

	// A waiter shows with --all; ^C while waiting leaves the queue.
	w := e.start(t, cmdline([]string{"run", "build"}, helperArgv("exit", "0")...)...)
	waitFor(t, "the waiter in the queue", func() bool {
		for _, j := range e.statusJSON(t, "--all", "build") {
			if j["queued"] == true {
				return true
			}
		}
		return false
	})
	if r := e.baton(t, "status", "--all", "build"); !strings.Contains(r.stdout, "(queued)") {
		t.Errorf("status --all:\n%s", r.stdout)
	}
	_ = w.cmd.Process.Signal(syscall.SIGINT)
	if r := w.wait(t); r.code != 128+int(syscall.SIGINT) {
		t.Errorf("^C while waiting: exit %d, stderr %q", r.code, r.stderr)
	}
	if js := e.statusJSON(t, "--all", "build"); len(js) != 1 {
		t.Errorf("after ^C, the waiter is still listed: %v", js)
	}

	for _, h := range []*holder{h, s1, s2} {
		if r := h.stop(t); r.code != 0 || r.stderr != "" {
			t.Errorf("holder: exit %d, stderr %q", r.code, r.stderr)
		}
	}
	if js := e.statusJSON(t, "--all"); len(js) != 0 {
		t.Errorf("after the holders exited: %v", js)
	}
	// The lock is free, and the token grew.
	r = e.baton(t, cmdline([]string{"run", "build", "--wait=false"}, helperArgv("env")...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "BATON_TOKEN=") {
		t.Errorf("free lock: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestLeaseLost(t *testing.T) {
	t.Parallel()
	for _, ignore := range []bool{false, true} {
		e := sqliteEnv(t)
		dir := t.TempDir()
		args := []string{"run", "job", "--ttl", "1500ms", "--owner", "dave", "--grace", "300ms"}
		argv := helperArgv("wait", dir)
		if ignore {
			argv = append(argv, "ignore")
		}
		b := e.start(t, cmdline(args, argv...)...)
		waitFile(t, filepath.Join(dir, "started"))

		if r := e.baton(t, "release", "job", "--owner", "nobody"); r.code != exitError || !strings.Contains(r.stderr, "nobody") {
			t.Errorf("release by an owner that holds nothing: exit %d, stderr %q", r.code, r.stderr)
		}
		r := e.baton(t, "release", "job", "--owner", "dave")
		if r.code != 0 || !strings.Contains(r.stderr, "warning") || !strings.Contains(r.stderr, "renewal") {
			t.Errorf("release: exit %d, stderr %q", r.code, r.stderr)
		}
		r = b.wait(t)
		if r.code != exitLeaseLost {
			t.Errorf("ignore=%v: baton exited %d after its lease was released, want %d; stderr %q", ignore, r.code, exitLeaseLost, r.stderr)
		}
		if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "baton: lost the lease") {
			t.Errorf("ignore=%v: stderr %q, want one line about the lost lease", ignore, r.stderr)
		}
		if got := readString(t, filepath.Join(dir, "signal")); got != "terminated\n" {
			t.Errorf("ignore=%v: the command got %q, want SIGTERM", ignore, got)
		}
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	if r := e.baton(t, "purge"); r.code != 0 || r.stdout != "nothing to purge\n" {
		t.Errorf("purge of an empty store: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// A baton that dies (SIGKILL) leaves its hold to expire.
	h := e.hold(t, "stale", "--ttl", "100ms", "--owner", "erin")
	_ = h.cmd.Process.Kill()
	writeFileAtomic(filepath.Join(h.dir, "stop"), "") // the orphaned command
	h.wait(t)
	waitFor(t, "the hold to expire", func() bool { return len(e.statusJSON(t)) == 0 })
	if js := e.statusJSON(t, "--all"); len(js) != 1 || js[0]["owner"] != "erin" || js[0]["left_ms"].(float64) > 0 {
		t.Errorf("status --all after expiry: %v", js)
	}
	if r := e.baton(t, "status", "--all"); !strings.Contains(r.stdout, "expired") {
		t.Errorf("status --all after expiry:\n%s", r.stdout)
	}
	r := e.baton(t, "purge")
	if r.code != 0 || !strings.Contains(r.stdout, `"stale" by erin`) || !strings.HasSuffix(r.stdout, "purged 1 expired entry\n") {
		t.Errorf("purge: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if js := e.statusJSON(t, "--all"); len(js) != 0 {
		t.Errorf("status --all after purge: %v", js)
	}
}

// TestDefaultStore checks where the default store is: in $XDG_STATE_HOME,
// else in ~/.local/state.
func TestDefaultStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if r := e.baton(t, cmdline([]string{"run", "x"}, helperArgv("env")...)...); r.code != 0 {
		t.Fatalf("exit %d, stderr %s", r.code, r.stderr)
	} else if db := filepath.Join(e.home, ".local", "state", "baton", "baton.db"); !strings.Contains(r.stdout, "BATON_STORE=sqlite://"+db+"\n") {
		t.Errorf("default store without XDG_STATE_HOME: %s, want %s", r.stdout, db)
	}
	state := t.TempDir()
	e = newEnv(t, "XDG_STATE_HOME="+state)
	r := e.baton(t, cmdline([]string{"run", "x"}, helperArgv("env")...)...)
	db := filepath.Join(state, "baton", "baton.db")
	if r.code != 0 || !strings.Contains(r.stdout, "BATON_STORE=sqlite://"+db+"\n") {
		t.Errorf("default store with XDG_STATE_HOME: exit %d, %s %s, want %s", r.code, r.stdout, r.stderr, db)
	}
	if _, err := os.Stat(db); err != nil {
		t.Error(err)
	}
}

// TestAsk: 'baton release NAME --ask' asks the holder, which signals its
// command (--on-ask) and releases the lock when the command exits; a holder
// run with --on-ask none keeps it.
func TestAsk(t *testing.T) {
	t.Parallel()
	e := sqliteEnv(t)
	if r := e.baton(t, "release", "free", "--ask"); r.code != 0 || !strings.Contains(r.stdout, "not held") {
		t.Errorf("ask of a free lock: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	dir := t.TempDir()
	b := e.start(t, cmdline([]string{"run", "job", "--grace", "2s"}, helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	r := e.baton(t, "release", "job", "--ask", "--reason", "deploy at 10:00", "--wait", "20s")
	if r.code != 0 || !strings.Contains(r.stdout, "was released") || !strings.Contains(r.stderr, "asked 1 holder") {
		t.Errorf("release --ask: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	rb := b.wait(t)
	if rb.code != 42 || !strings.Contains(rb.stderr, `asked to release lock "job" (deploy at 10:00)`) {
		t.Errorf("the asked baton run: exit %d, stderr %q; want the command's 42 and a line about the ask", rb.code, rb.stderr)
	}
	if got := readString(t, filepath.Join(dir, "signal")); got != "terminated\n" {
		t.Errorf("the command got %q, want SIGTERM", got)
	}

	dir = t.TempDir()
	b = e.start(t, cmdline([]string{"run", "job", "--on-ask", "none"}, helperArgv("wait", dir)...)...)
	waitFile(t, filepath.Join(dir, "started"))
	r = e.baton(t, "release", "job", "--ask", "--wait", "1s")
	if r.code != exitError || !strings.Contains(r.stderr, "still held") {
		t.Errorf("release --ask of a holder with --on-ask none: exit %d, stderr %q", r.code, r.stderr)
	}
	writeFileAtomic(filepath.Join(dir, "stop"), "")
	if rb := b.wait(t); rb.code != 0 {
		t.Errorf("baton run --on-ask none: exit %d, stderr %q", rb.code, rb.stderr)
	}
}
