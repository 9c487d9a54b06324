package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/baton-go/baton/drivertest"
)

// TestSessionNotRevived: see drivertest.SessionNotRevived (SQLite has no
// grace period, so no bound on a session's TTL).
func TestSessionNotRevived(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Open(ctx, filepath.Join(t.TempDir(), "locks.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	drivertest.SessionNotRevived(t, sessionDB{st.db}, 0)
}
