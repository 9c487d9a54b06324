package sqlite

import (
	"context"
	"time"

	"github.com/baton-go/baton/driver/lockstate"
)

// Test hooks.

// SetBootID makes s act as if the machine were in boot id.
func SetBootID(s *Store, id string) { s.db.boot = id }

// ParseURL is parseURL.
var ParseURL = parseURL

// Path is the cleaned path of s's file.
func (s *Store) Path() string { return s.db.path }

// Watching reports whether this process runs a file-system watcher for
// the database file at path.
func Watching(path string) bool {
	registryMu.Lock()
	sh := registry[path]
	registryMu.Unlock()
	if sh == nil {
		return false
	}
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	return sh.watcher != nil
}

// SetBoot makes the stores opened until restore runs act as if the
// machine were in boot id.
func SetBoot(id string) (restore func()) {
	old := bootID
	bootID = func() (string, error) { return id, nil }
	return func() { bootID = old }
}

// SetCounter sets the fencing counter of name (its last token) to seq.
func SetCounter(ctx context.Context, s *Store, name string, seq uint64) error {
	return s.db.Update(ctx, []string{name}, func(_ int, st *lockstate.State, _ time.Time) error {
		st.Seq, st.Dirty = seq, true
		return nil
	})
}

// Epoch is the epoch s hands out tokens in.
func Epoch(s *Store) uint64 { return s.db.epoch.Load() }

// AfterEpochRaise sets a function to run after the flushed commit that
// records a raised epoch; it returns a function that restores the last.
func AfterEpochRaise(f func()) (restore func()) {
	old := afterEpochRaise
	afterEpochRaise = f
	return func() { afterEpochRaise = old }
}

// Reclaim runs s's reclaim of idle names unless one ran less than every
// ago.
func Reclaim(ctx context.Context, s *Store, every time.Duration) (int64, error) {
	return s.db.reclaim(ctx, every)
}

// Faulty is a store with the test hook drivertest looks for
// (drivertest.Partitioner): a partition fails its session renewals.
type Faulty struct{ *Store }

func (f Faulty) SetPartitioned(down bool) { f.Store.db.partitioned.Store(down) }

// OpenApart opens a Store of path whose process-wide state (its write
// turn, doorbells and watcher) is its own, as another process's would be.
func OpenApart(ctx context.Context, path string, o *Options, tag string) (*Store, error) {
	registryMu.Lock()
	apart = "\x00" + tag
	registryMu.Unlock()
	defer func() {
		registryMu.Lock()
		apart = ""
		registryMu.Unlock()
	}()
	return Open(ctx, path, o)
}

// Heard counts the wake-ups that s's process-wide state had from other
// processes: rings of its own doorbell, or of the common one it follows.
func Heard(s *Store) int64 { return s.db.sh.heard.Load() }

// FollowsCommon reports whether s's process-wide state follows the
// common doorbell (runs a file-system watcher).
func FollowsCommon(s *Store) bool {
	s.db.sh.wmu.Lock()
	defer s.db.sh.wmu.Unlock()
	return s.db.sh.watcher != nil
}
