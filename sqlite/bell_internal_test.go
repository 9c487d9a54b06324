//go:build unix

package sqlite

import (
	"os"
	"path/filepath"
	"testing"
)

// A doorbell's id comes from the file, which anyone who can write it may
// have written: only ids as makeBell makes them reach a path.
func TestRingNamesOnlyBells(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "sub", "locks.db")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A regular file where a doorbell would be is not written to either.
	plain := db + "-wake-" + "bbbbbbbbbbbbbbbbbbbbbbbbbb"
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ringBells(db, []string{"/../../victim", "x/../../../victim", "", "BBBBBBBBBBBBBBBBBBBBBBBBBB", "bbbbbbbbbbbbbbbbbbbbbbbbbb"})
	for _, f := range []string{victim, plain} {
		if b, err := os.ReadFile(f); err != nil || string(b) != "x" {
			t.Errorf("%s: %q, %v; want it untouched", f, b, err)
		}
	}
	for _, id := range []string{"aaaaaaaaaaaaaaaaaaaaaaaaaa", "abcdefghijklmnopqrstuvwxyz", "234567abcdefghijklmnopqrst"} {
		if !validBellID(id) {
			t.Errorf("validBellID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "a", "aaaaaaaaaaaaaaaaaaaaaaaaa/", "AAAAAAAAAAAAAAAAAAAAAAAAAA", "aaaaaaaaaaaaaaaaaaaaaaaaa1", "aaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		if validBellID(id) {
			t.Errorf("validBellID(%q) = true", id)
		}
	}
}
