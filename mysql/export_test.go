package mysql

import (
	"context"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Test hooks.

// DropSQL returns the statements that drop every object of a lock table
// (tests use fresh tables).
func DropSQL(table string) []string {
	o := newObjects(table)
	out := []string{"DROP TABLE IF EXISTS " + strings.Join(o.tables(), ", ")}
	for _, p := range o.procedures() {
		out = append(out, "DROP PROCEDURE IF EXISTS "+p)
	}
	return out
}

// Statements returns the DDL of table, one statement per element.
func Statements(table string, durable bool) []string {
	return newObjects(table).statements(durable)
}

// ParseURL converts a mysql:// or mariadb:// URL to a go-sql-driver DSN
// and the Options its baton_ parameters set.
func ParseURL(rawURL string) (dsn string, opts *Options, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, err
	}
	return parseURL(u)
}

// AlwaysTake makes s call T_take for every exclusive request it may
// decide (no name counts as busy), so that a model walk checks T_take's
// decisions as well as T_grant's. Call it before s is used.
func AlwaysTake(s *Store) { s.busy.For = 0 }

// HeldBells is the number of bells s holds.
func HeldBells(s *Store) int { return s.bells.heldCount() }

// BellConns is the number of bell connections s has opened.
func BellConns(s *Store) int {
	s.bells.mu.Lock()
	defer s.bells.mu.Unlock()
	return len(s.bells.conns)
}

// BreakBells closes s's bell connections behind its back, as a network
// failure would: every bell of s is released by the server.
func BreakBells(s *Store) {
	s.bells.mu.Lock()
	conns := s.bells.conns
	s.bells.mu.Unlock()
	for _, bc := range conns {
		bc.mu.Lock()
		if bc.conn != nil {
			_ = bc.conn.Raw(func(any) error { return sqldriverErrBadConn })
			// The Conn stays set, as if nobody had noticed yet: its next
			// use fails, and the store opens a new one.
		}
		bc.mu.Unlock()
	}
}

// Watches is the number of open watches of s.
func Watches(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watches)
}

// Reclaim runs s's reclaim of idle names unless one ran less than every
// ago.
func Reclaim(ctx context.Context, s *Store, every time.Duration) (int64, error) {
	return s.reclaim(ctx, every)
}

// SetMaxBells bounds the bells s holds (0: no bound).
func SetMaxBells(s *Store, n int) {
	s.bells.mu.Lock()
	s.bells.max = n
	s.bells.mu.Unlock()
}

// Faulty is a store with the test hook drivertest looks for
// (drivertest.Partitioner): a partition fails its session renewals.
type Faulty struct{ *Store }

func (f Faulty) SetPartitioned(down bool) { f.Store.partitioned.Store(down) }

// holdsDelete matches the procedures' DELETE statements.
var holdsDelete = regexp.MustCompile(`DELETE (h )?FROM [^;]*;`)

// MissDeletes makes the tables created until t ends delete less than they
// ask for, as MariaDB's MEMORY tables were seen to (one row of two; see
// T_grant): a deletion of entries removes only the first row it finds,
// and one of expired entries across names removes none.
func MissDeletes(t testing.TB) {
	old := ddlTemplate
	ddlTemplate = holdsDelete.ReplaceAllStringFunc(old, func(d string) string {
		switch {
		case !strings.Contains(d, "{HOLDS}"):
			return d
		case strings.HasPrefix(d, "DELETE h "):
			if strings.Contains(d, "expires <= v_now") {
				return "DO 0;"
			}
			return d
		}
		return strings.TrimSuffix(d, ";") + " LIMIT 1;"
	})
	t.Cleanup(func() { ddlTemplate = old })
}

// KeepsSessions reports whether s binds its keep-alive holds to sessions.
func KeepsSessions(s *Store) bool { return s.sessions != nil }
