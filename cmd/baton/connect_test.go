//go:build unix

package main

import (
	"strings"
	"testing"
	"time"
)

// TestUnreachableStores: connecting to a store that nothing answers is
// bounded by --timeout, and fails with one line naming the store.
func TestUnreachableStores(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "SPANNER_EMULATOR_HOST=127.0.0.1:1")
	for _, url := range []string{
		"zk://127.0.0.1:1/locks",
		"etcd://127.0.0.1:1/locks",
		"redis://127.0.0.1:1/0",
		"postgres://u@127.0.0.1:1/db",
		"mysql://u:secret@127.0.0.1:1/db",
		"mongodb://127.0.0.1:1/db",
		"elasticsearch://127.0.0.1:1/locks",
		"spanner://projects/p/instances/i/databases/d",
		"nats://127.0.0.1:1/locks",
	} {
		for _, args := range [][]string{
			{"status", "--store", url, "--timeout", "2s"},
			cmdline([]string{"run", "x", "--store", url, "--timeout", "2"}, helperArgv("exit", "0")...),
		} {
			start := time.Now()
			r := e.baton(t, args...)
			took := time.Since(start)
			if r.code != exitError || took > 6*time.Second {
				t.Errorf("baton %q: exit %d after %v, want %d within about 2s; stderr %q", args[:4], r.code, took.Round(time.Millisecond), exitError, r.stderr)
			}
			checkOneLine(t, r, false)
			scheme, rest, _ := strings.Cut(url, "://")
			if !strings.Contains(r.stderr, scheme+"://") || !strings.Contains(r.stderr, rest[strings.Index(rest, "@")+1:]) || strings.Contains(r.stderr, "secret") {
				t.Errorf("baton %q: stderr %q does not name the store %s (without its password)", args[:4], r.stderr, redact(url))
			}
		}
	}
}
