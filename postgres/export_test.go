package postgres

import (
	"context"
	"net/url"
	"time"
)

// DropSQL drops every object of a lock table (tests use fresh tables).
func DropSQL(schema, table string) string {
	o := newObjects(schema, table)
	return "DROP TABLE IF EXISTS " + o.holds + ", " + o.counter + ", " + o.epochs + ", " + o.incarnation + ", " + o.sessions + ";" +
		"DROP FUNCTION IF EXISTS " + o.acquire + "(text, text, smallint, integer, bigint, boolean, bigint, text, jsonb, bigint), " +
		o.acquire + "(text, text, smallint, integer, bigint, boolean, bigint, text, jsonb, bigint, text), " +
		o.acquire + "(text, text, smallint, integer, bigint, boolean, bigint, text, jsonb, bigint, text, text);" +
		"DROP FUNCTION IF EXISTS " + o.session + ", " + o.alive + ", " + o.renew + ", " + o.release + ", " +
		o.list + ", " + o.purge + ", " + o.bind + ", " + o.reclaim + ", " + o.wake + ", " +
		o.newEpoch + ", " + o.raise + ", " + o.begin + ", " + o.take + ", " + o.settle + ", " + o.next + ";"
}

// Listens is how many times the store's listener has started listening.
func Listens(s *Store) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.listens
}

// Heard is how many notifications the store's listener has received.
func Heard(s *Store) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.heardN
}

// ParseURL exposes parseURL.
func ParseURL(u *url.URL) (string, *Options, error) { return parseURL(u) }

// Reclaim runs the table's reclaim unless one ran less than every ago.
func Reclaim(ctx context.Context, s *Store, every time.Duration) (int64, error) {
	return s.reclaim(ctx, every)
}

// SetVacuum sets how many queued requests a Store lets pass before it
// looks at the holds table's dead rows, and how many make it vacuum the
// table, until the returned function restores them.
func SetVacuum(check, dead int64) (restore func()) {
	oldCheck, oldDead := vacuumCheck, vacuumDead
	vacuumCheck, vacuumDead = check, dead
	return func() { vacuumCheck, vacuumDead = oldCheck, oldDead }
}

// Faulty is a store with the test hook drivertest looks for
// (drivertest.Partitioner): a partition fails its session renewals.
type Faulty struct{ *Store }

func (f Faulty) SetPartitioned(down bool) { f.Store.partitioned.Store(down) }
