//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestCounter is the acceptance test: 8 loops run "baton run counter" 50
// times each, at once, on the default store (no --store, no BATON_STORE:
// HOME and XDG_STATE_HOME point to a temporary directory). The command
// checks that it runs alone and that its fencing token is above the last
// one, and increments a counter in a file.
func TestCounter(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: 400 runs of baton (scripts/test -short skips multi-process tests)")
	}
	const loops, runs = 8, 50
	state := t.TempDir()
	e := newEnv(t, "XDG_STATE_HOME="+state)
	dir := t.TempDir()
	argv := cmdline([]string{"run", "counter"}, helperArgv("counter", dir)...)

	var wg sync.WaitGroup
	errs := make(chan string, loops*runs)
	for range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range runs {
				r, err := e.run(argv...)
				switch {
				case err != nil:
					errs <- err.Error()
				case r.code != 0:
					errs <- fmt.Sprintf("exit %d: %s", r.code, strings.TrimSpace(r.stderr))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Errorf("baton run counter: %s", err)
		}
	}
	if n > 5 {
		t.Errorf("… %d failed runs in all", n)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "failures")); err == nil {
		t.Errorf("the command failed:\n%s", b)
	}
	if got := strings.TrimSpace(readString(t, filepath.Join(dir, "counter"))); got != strconv.Itoa(loops*runs) {
		t.Errorf("counter is %s, want %d", got, loops*runs)
	}
	tokens := strings.Fields(readString(t, filepath.Join(dir, "tokens")))
	if len(tokens) != loops*runs {
		t.Errorf("%d tokens recorded, want %d", len(tokens), loops*runs)
	}
	var last uint64
	for i, s := range tokens {
		tok, err := strconv.ParseUint(s, 10, 64)
		if err != nil || tok <= last {
			t.Fatalf("token %d is %q after %d: not strictly increasing", i, s, last)
		}
		last = tok
	}
	if _, err := os.Stat(filepath.Join(state, "baton", "baton.db")); err != nil {
		t.Errorf("the default store is not where expected: %v", err)
	}
}
