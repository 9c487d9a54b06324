package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/driver"
)

// The janitor goroutine of a Store reclaims idle names now and then, and
// vacuums the holds table when this Store has queued many requests.

// A contended name's queue entries are rows that die as they leave, and
// its lookups walk the index entries of all its dead rows until a vacuum
// removes them: on a hot name, throughput fell by a third within a minute,
// faster than autovacuum (a visit a minute per database by default) comes
// by, and a vacuum of the table, a few milliseconds, brought it back. So a
// Store that has queued vacuumCheck requests since it last looked reads
// the table's dead rows, counted by all its clients, from the server's
// statistics, and vacuums the table when they are vacuumDead or more.
var (
	vacuumCheck int64 = 250
	vacuumDead  int64 = 2000
)

// janitorLoop runs until the Store closes.
func (s *Store) janitorLoop() {
	defer s.janitor.Done()
	var t *time.Timer
	var reclaim <-chan time.Time // nil, never ready, when reclaim is off
	if s.opts.Reclaim > 0 {
		t = time.NewTimer(driver.Jitter(s.opts.Reclaim))
		defer t.Stop()
		reclaim = t.C
	}
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-reclaim:
			ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
			_, _ = s.reclaim(ctx, s.opts.Reclaim)
			cancel()
			t.Reset(driver.Jitter(s.opts.Reclaim))
		case <-s.vacuumDue:
			s.vacuum()
		}
	}
}

// queued counts a refused request that queued, and wakes the janitor to
// look at the dead rows every vacuumCheck of them.
func (s *Store) queued() {
	if s.nQueued.Add(1)%vacuumCheck == 0 {
		select {
		case s.vacuumDue <- struct{}{}:
		default:
		}
	}
}

// vacuum vacuums the holds table if it has vacuumDead dead rows or more
// and the store's role owns it (otherwise VACUUM only warns, in the
// server's log: autovacuum is all there is), unless another session is
// vacuuming it.
func (s *Store) vacuum() {
	if s.mayVacuum < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
	defer cancel()
	var dead int64
	if err := s.pool.QueryRow(ctx, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass",
		s.obj.holds).Scan(&dead); err != nil || dead < vacuumDead {
		return
	}
	if s.mayVacuum == 0 {
		var owner bool
		if err := s.pool.QueryRow(ctx, "SELECT pg_has_role(c.relowner, 'USAGE') FROM pg_class c WHERE c.oid = $1::regclass",
			s.obj.holds).Scan(&owner); err != nil {
			return
		}
		s.mayVacuum = -1
		if owner {
			s.mayVacuum = 1
		}
	}
	if s.mayVacuum > 0 {
		_, _ = s.pool.Exec(ctx, "VACUUM (SKIP_LOCKED) "+s.obj.holds, pgx.QueryExecModeSimpleProtocol)
	}
}

// reclaim runs the table's reclaim function, unless a client of the table
// ran it less than every ago; it returns how many idle names' rows went,
// or -1 if it did not run.
func (s *Store) reclaim(ctx context.Context, every time.Duration) (int64, error) {
	if err := s.begin(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := retry(ctx, func() error { return s.pool.QueryRow(ctx, s.q.reclaim, ns(every)).Scan(&n) })
	return n, wrap("reclaim", err)
}
