package mysql

import (
	"context"
	"time"

	"github.com/baton-go/baton/driver"
)

// reclaimEvery reclaims idle names about every period until the store
// closes: each client of the table tries, and the first that finds the
// last reclaim a period old does the work.
func (s *Store) reclaimEvery(period time.Duration) {
	defer s.janitor.Done()
	for driver.Sleep(s.ctx, driver.Jitter(period)) == nil {
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		_, _ = s.reclaim(ctx, period)
		cancel()
	}
}

// reclaim runs the table's reclaim procedure, unless a client of the
// table ran it less than every ago; it returns how many idle names' rows
// went, or -1 if it did not run.
func (s *Store) reclaim(ctx context.Context, every time.Duration) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := retry(ctx, func() error {
		return s.db.QueryRowContext(ctx, s.st.reclaim, every.Microseconds()).Scan(&n)
	})
	return n, wrap("reclaim", err)
}
