package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/baton-go/baton/driver"
)

// reclaimEvery reclaims idle names about every period until ctx ends:
// each Store of the file tries, and the first that finds the last reclaim
// a period old does the work.
func (d *db) reclaimEvery(ctx context.Context, period time.Duration) {
	defer d.janitor.Done()
	for driver.Sleep(ctx, driver.Jitter(period)) == nil {
		_, _ = d.reclaim(ctx, period)
	}
}

// reclaim deletes the rows of idle names (neither holders nor queue
// entries, expired ones included), unless a Store of the file did less
// than every ago, and returns how many went (-1: it did not run). In the
// same flushed commit it starts a new epoch: a name used again gets a new
// row in it (see update), so its tokens start above every token it had.
func (d *db) reclaim(ctx context.Context, every time.Duration) (int64, error) {
	if err := d.checkOpen(); err != nil {
		return 0, err
	}
	if err := d.sh.lockWrite(ctx); err != nil {
		return 0, d.opErr(err)
	}
	defer d.sh.unlockWrite()
	n := int64(-1)
	err := d.retry(ctx, func() error {
		n = -1
		now := time.Now().UnixNano()
		return d.flushedEpoch(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, d.qIdle)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		}, func(e *epochRow, _ bool) bool {
			if e.Reclaimed > now-int64(every) && e.Reclaimed <= now {
				return false
			}
			e.Epoch++
			e.Reclaimed = now
			return true
		})
	})
	if err != nil {
		return n, d.opErr(err)
	}
	return n, nil
}
