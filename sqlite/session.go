package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/baton-go/baton/driver/lockstate"
)

// Sessions live in a table of their own next to the lock table, made by
// Open (or, with Options.NoCreate, used if it exists): one row per
// session, with the boot it was made in and its expiry by the store's
// clock. A Store binds the holds its client keeps alive to its session
// and renews that row in place of every hold (records.Sessions).

func sessionsDDL(table string) string {
	return `CREATE TABLE IF NOT EXISTS "` + table + `_sessions" (
	id      TEXT NOT NULL PRIMARY KEY,
	boot    TEXT NOT NULL,
	expires INTEGER NOT NULL
) WITHOUT ROWID`
}

var errPartitioned = errors.New("sqlite: cut off from the file (a test's partition)")

// sessionDB is a db whose file has the sessions table: the Records a
// Store works on then implement records.Sessions.
type sessionDB struct{ *db }

// KeepSession implements records.Sessions: one write transaction.
func (d sessionDB) KeepSession(ctx context.Context, id string, ttl time.Duration, create bool) (bool, error) {
	if err := d.checkOpen(); err != nil {
		return false, err
	}
	if d.partitioned.Load() {
		return false, errPartitioned
	}
	if err := d.sh.lockWrite(ctx); err != nil {
		return false, d.opErr(err)
	}
	defer d.sh.unlockWrite()
	var kept bool
	err := d.retry(ctx, func() error {
		tx, err := d.sql.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		now := d.clock().now.UnixNano()
		var res sql.Result
		if create {
			// Rows of ended sessions go when a session starts.
			if _, err := tx.ExecContext(ctx, d.qEndedSessions, d.boot, now); err != nil {
				return err
			}
			res, err = tx.ExecContext(ctx, d.qNewSession, id, d.boot, now+int64(ttl))
		} else {
			res, err = tx.ExecContext(ctx, d.qKeepSession, now+int64(ttl), id, d.boot, now)
		}
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		kept = n == 1
		return tx.Commit()
	})
	if err != nil {
		return false, d.opErr(err)
	}
	return kept, nil
}

// EndSession implements records.Sessions.
func (d sessionDB) EndSession(ctx context.Context, id string) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if err := d.sh.lockWrite(ctx); err != nil {
		return d.opErr(err)
	}
	defer d.sh.unlockWrite()
	err := d.retry(ctx, func() error {
		_, err := d.sql.ExecContext(ctx, d.qEndSession, id)
		return err
	})
	if err != nil {
		return d.opErr(err)
	}
	return nil
}

// applySessions applies, at now, the expiries of the live sessions that
// holders of rs are bound to, read through q (the transaction of an
// Update): of those past their own expiry (lockstate.State.Sessions).
func (d *db) applySessions(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, rs []*lockstate.State, now time.Time) error {
	var ids []string
	for _, r := range rs {
		ids = r.Sessions(ids, now)
	}
	if len(ids) == 0 {
		return nil
	}
	if !d.sessions.Load() {
		// Opened with NoCreate before another Store made the table: a
		// holder bound to a session says it exists now.
		var n int
		if err := q.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, d.table+"_sessions").Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil // no session is live: the holders live by their own TTL
		}
		d.sessions.Store(true)
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	rows, err := q.QueryContext(ctx, d.qSessions, d.boot, string(list))
	if err != nil {
		return err
	}
	defer rows.Close()
	exp := make(map[string]time.Time, len(ids))
	for rows.Next() {
		var id string
		var ns int64
		if err := rows.Scan(&id, &ns); err != nil {
			return err
		}
		exp[id] = time.Unix(0, ns).UTC()
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range rs {
		r.ApplySessions(func(id string) (time.Time, bool) {
			t, ok := exp[id]
			return t, ok
		})
	}
	return nil
}

// setupSessions creates the sessions table, unless noCreate is set; then
// the Store keeps sessions only if the table exists.
func (d *db) setupSessions(ctx context.Context, noCreate bool) error {
	if !noCreate {
		if err := d.retry(ctx, func() error {
			_, err := d.sql.ExecContext(ctx, sessionsDDL(d.table))
			return err
		}); err != nil {
			return d.openErr(fmt.Sprintf("create table %q", d.table+"_sessions"), err)
		}
		d.sessions.Store(true)
		return nil
	}
	return d.retry(ctx, func() error {
		rows, err := d.sql.QueryContext(ctx, `SELECT id, boot, expires FROM "`+d.table+`_sessions" LIMIT 0`)
		if err != nil && !isBusy(err) {
			return nil // no sessions: every hold is renewed on its own
		} else if err != nil {
			return err
		}
		d.sessions.Store(true)
		return rows.Close()
	})
}

// states returns the states of rs.
func states(rs []*record) []*lockstate.State {
	out := make([]*lockstate.State, len(rs))
	for i, r := range rs {
		out[i] = &r.State
	}
	return out
}

// boundRecord is a record with a holder bound to a session. It writes its
// epoch as a string, which versions of this package from before sessions
// refuse to read: they would take such a holder for expired once its own
// TTL ran out, though its session keeps it, and grant its name to
// another. They fail on that name instead, until its holders leave.
type boundRecord struct {
	Boot  string            `json:"boot"`
	Wall  int64             `json:"wall"`
	Epoch string            `json:"e"`
	Bells map[string]string `json:"bells,omitempty"`
	lockstate.State
}

// epochN is a record's epoch: a JSON number, or a string in a boundRecord.
type epochN uint64

func (e *epochN) UnmarshalJSON(b []byte) error {
	if len(b) >= 2 && b[0] == '"' {
		b = b[1 : len(b)-1]
	}
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("invalid epoch %q", b)
	}
	*e = epochN(n)
	return nil
}

// bound reports whether a holder of st is bound to a session.
func bound(st *lockstate.State) bool {
	for _, h := range st.Holders {
		if h.Session != "" {
			return true
		}
	}
	return false
}
