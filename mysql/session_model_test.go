package mysql_test

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// TestSessionModel runs drivertest.SessionModel on the table's procedures
// (renewals of two names go through T_renew's batch path). Time passes by
// moving every time the tables hold back, which is what the server's
// clock moving on looks like to them.
func TestSessionModel(t *testing.T) {
	drivertest.EachServer(t, serversEnv, sessionModel("_grant"))
}

// TestSessionModelTake runs the walk with every request sent to T_take,
// which decides the uncontended exclusive ones and hands the others to
// T_grant.
func TestSessionModelTake(t *testing.T) {
	drivertest.EachServer(t, serversEnv, sessionModel("_take"))
}

// TestSessionModelMissedDeletes runs the walk on procedures whose
// deletions miss rows: a MariaDB MEMORY table was seen to delete one of a
// name's two expired entries, and the grant's INSERT then met the other
// (seed 1321693904236546118 of TestSessionModel on MariaDB 10.11). No
// decision may depend on a deletion of several rows.
func TestSessionModelMissedDeletes(t *testing.T) {
	mysql.MissDeletes(t)
	drivertest.EachServer(t, serversEnv, sessionModel("_grant"))
}

// sessionModel returns the walk on the acquire procedure T+proc.
func sessionModel(proc string) func(*testing.T, drivertest.Server) {
	return func(t *testing.T, _ drivertest.Server) { sessionModelOn(t, proc) }
}

func sessionModelOn(t *testing.T, proc string) {
	ctx := ctxFor(t, 3*time.Minute)
	tb := freshTable(t)
	open(t, tb).Close() // the schema
	db := rawDB(t)
	// Grace periods cover the walk's TTLs; the incarnation starts.
	var max int64
	if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(?, -1)", int64(mysql.DefaultMaxGrace)).Scan(&max); err != nil {
		t.Fatal(err)
	}
	// entry is one element of a batch: [hex name, hex owner, rest].
	entry := func(name, owner string, rest any) string {
		return fmt.Sprintf(`["%s","%s",%v]`, hex.EncodeToString([]byte(name)), hex.EncodeToString([]byte(owner)), rest)
	}
	exec := func(t testing.TB, q string, args ...any) {
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	drivertest.SessionModel(t, drivertest.SessionModelConfig{
		Acquire: func(t testing.TB, req *driver.Request, sid string) (*driver.Grant, bool, error) {
			var status, flags int8
			var token uint64
			var y any
			err := db.QueryRowContext(ctx, "CALL "+tb+proc+"(?, ?, ?, ?, ?, 0, 0, 'h', NULL, 0, '', ?)",
				req.Name, req.Owner, int8(req.Mode), int32(req.Limit), int64(req.TTL), sid).
				Scan(&status, &token, &y, &y, &y, &y, &y, &y, &y, &flags)
			if err != nil {
				t.Fatal(err)
			}
			g, err := drivertest.AcquireStatus(int(status), token)
			return g, flags&2 != 0, err
		},
		Renew: func(t testing.TB, names []string, owner string, ttl time.Duration) []bool {
			es := make([]string, len(names))
			for i, n := range names {
				es[i] = entry(n, owner, int64(ttl))
			}
			var res string
			if err := db.QueryRowContext(ctx, "CALL "+tb+"_renew(?)", "["+strings.Join(es, ",")+"]").Scan(&res); err != nil {
				t.Fatal(err)
			}
			renewed := make([]bool, len(names))
			for r := range strings.SplitSeq(res, ";") {
				var i int
				if _, err := fmt.Sscanf(r, "%d,", &i); err == nil {
					renewed[i-1] = true
				}
			}
			return renewed
		},
		Release: func(t testing.TB, name, owner string) bool {
			var res string
			if err := db.QueryRowContext(ctx, "CALL "+tb+"_release(?)", "["+entry(name, owner, `""`)+"]").Scan(&res); err != nil {
				t.Fatal(err)
			}
			return strings.Contains(res, ",1;")
		},
		KeepSession: func(t testing.TB, sid string, ttl time.Duration, create bool) bool {
			var status int8
			if err := db.QueryRowContext(ctx, "CALL "+tb+"_session(?, ?, ?)", sid, int64(ttl), create).Scan(&status); err != nil {
				t.Fatal(err)
			}
			return status == 1
		},
		Pass: func(t testing.TB, d time.Duration) {
			us := d.Microseconds()
			exec(t, "UPDATE "+tb+"_holds SET created = created - INTERVAL ? MICROSECOND, renewed = renewed - INTERVAL ? MICROSECOND, expires = expires - INTERVAL ? MICROSECOND", us, us, us)
			exec(t, "UPDATE "+tb+"_sessions SET expires = expires - INTERVAL ? MICROSECOND", us)
			exec(t, "UPDATE "+tb+"_state SET grace = grace - INTERVAL ? MICROSECOND WHERE name = ''", us)
		},
		Live: func(t testing.TB, name string) map[string]time.Duration {
			got := map[string]time.Duration{}
			rows, err := db.QueryContext(ctx, "SELECT owner, mode, lim, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires) FROM "+tb+"_holds WHERE name = ? AND queued = 0", name)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var o string
				var mode, lim int
				var left int64
				if err := rows.Scan(&o, &mode, &lim, &left); err != nil {
					t.Fatal(err)
				}
				if left > 0 {
					got[fmt.Sprintf("%s %d %d", o, mode, lim)] = time.Duration(left) * time.Microsecond
				}
			}
			if rows.Close(); rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			return got
		},
	})
}
