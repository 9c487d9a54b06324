package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// TestSessionNotRevived checks that a session that expired is never
// renewed again: the holds bound to it may have gone to others.
func TestSessionNotRevived(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "locks.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d := sessionDB{st.db}
	if ok, err := d.KeepSession(ctx, "s1", 50*time.Millisecond, true); !ok || err != nil {
		t.Fatalf("create: %v, %v", ok, err)
	}
	if ok, err := d.KeepSession(ctx, "s1", 50*time.Millisecond, false); !ok || err != nil {
		t.Fatalf("renew a live session: %v, %v", ok, err)
	}
	time.Sleep(100 * time.Millisecond)
	if ok, err := d.KeepSession(ctx, "s1", time.Minute, false); ok || err != nil {
		t.Errorf("renew an expired session: %v, %v; want false", ok, err)
	}
	if ok, err := d.KeepSession(ctx, "s2", time.Minute, false); ok || err != nil {
		t.Errorf("renew a session never made: %v, %v; want false", ok, err)
	}
}
