package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"

	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/mysql"
)

// BenchmarkServerFloor measures what bounds an uncontended lock on each
// test server, whatever its design; ns/op is one acquire and release:
//   - get-lock: GET_LOCK and RELEASE_LOCK on one connection (the bare
//     primitive: no durability, no TTL);
//   - innodb-update: two autocommitted single-row UPDATEs of an InnoDB
//     table, the least a durable grant and release cost (a log flush each);
//   - innodb-call: the same UPDATEs each in a one-statement procedure
//     returning a row, as a CALL;
//   - memory-update: the UPDATEs on a MEMORY table (no flush, nothing
//     survives a restart);
//   - memory-call: two CALLs that lock an InnoDB row and write a MEMORY
//     table, as a fast table does;
//   - call-row: two CALLs of a procedure that only returns a row, the
//     least a CALL-based lock costs;
//   - call-vars: the same, declaring 47 variables as T_grant does;
//   - call-block: the same, the 47 declared in a block the CALL does not
//     enter, as T_grant's uncontended path leaves 18 of them;
//   - call-none: two CALLs of a procedure that returns no row;
//   - store-procs: the store's own T_grant and T_release on a name of a
//     fast table, without a bell, as the store calls them;
//   - store-bell: the same with a bell, which T_grant takes and T_release
//     releases, as on a Store's bell connection;
//   - store-plain-release: T_grant with a bell, then a prepared DELETE of
//     the hold and a DO RELEASE_LOCK of the bell in place of T_release
//     (two round trips instead of one CALL);
//   - store-take: T_take and T_release, with a bell;
//   - store-route: T_take and T_release_one, with a bell: the calls a
//     Store makes for an uncontended exclusive acquire and its release.
//
// BENCHMARKS.md quotes it.
func BenchmarkServerFloor(b *testing.B) {
	for _, s := range drivertest.Servers(serversEnv) {
		b.Run(s.Name, func(b *testing.B) {
			ctx := context.Background()
			db, err := sql.Open("mysql", dsn(b))
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			must := func(q string) {
				if _, err := db.ExecContext(ctx, q); err != nil {
					b.Fatal(q, ": ", err)
				}
			}
			for _, engine := range []string{"InnoDB", "MEMORY"} {
				tb := "baton_floor_" + engine
				must("DROP TABLE IF EXISTS " + tb)
				must("CREATE TABLE " + tb + " (name VARBINARY(255) PRIMARY KEY, owner VARBINARY(128), seq BIGINT UNSIGNED NOT NULL DEFAULT 0, expires DATETIME(6)) ENGINE=" + engine)
				must("INSERT INTO " + tb + " (name) VALUES ('x')")
				defer db.ExecContext(ctx, "DROP TABLE IF EXISTS "+tb)
			}
			must("DROP PROCEDURE IF EXISTS baton_floor_set")
			must(`CREATE PROCEDURE baton_floor_set(IN p_owner VARBINARY(128))
				MODIFIES SQL DATA SQL SECURITY INVOKER
				BEGIN
					UPDATE baton_floor_InnoDB SET owner = p_owner, seq = seq + 1, expires = UTC_TIMESTAMP(6) + INTERVAL 15 SECOND WHERE name = 'x';
					SELECT ROW_COUNT();
				END`)
			defer db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS baton_floor_set")
			must("DROP TABLE IF EXISTS baton_floor_mholds")
			must("CREATE TABLE baton_floor_mholds (name VARBINARY(255) NOT NULL, owner VARBINARY(128) NOT NULL, token BIGINT UNSIGNED NOT NULL, expires DATETIME(6) NOT NULL, PRIMARY KEY (name, owner)) ENGINE=MEMORY")
			defer db.ExecContext(ctx, "DROP TABLE IF EXISTS baton_floor_mholds")
			must("DROP PROCEDURE IF EXISTS baton_floor_mset")
			must(`CREATE PROCEDURE baton_floor_mset(IN p_owner VARBINARY(128), IN p_acquire TINYINT)
				MODIFIES SQL DATA SQL SECURITY INVOKER
				BEGIN
					DECLARE v_seq BIGINT UNSIGNED;
					DECLARE v_n INT;
					DECLARE v_now DATETIME(6);
					SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
					START TRANSACTION;
					SELECT seq INTO v_seq FROM baton_floor_InnoDB WHERE name = 'x' FOR UPDATE;
					SET v_now = UTC_TIMESTAMP(6);
					SELECT COUNT(*) INTO v_n FROM baton_floor_mholds WHERE name = 'x' AND expires > v_now;
					IF p_acquire THEN
						UPDATE baton_floor_MEMORY SET seq = seq + 1 WHERE name = 'x';
						INSERT INTO baton_floor_mholds VALUES ('x', p_owner, v_seq, v_now + INTERVAL 15 SECOND);
					ELSE
						DELETE FROM baton_floor_mholds WHERE name = 'x' AND owner = p_owner;
					END IF;
					COMMIT;
					SELECT v_n;
				END`)
			defer db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS baton_floor_mset")

			must("DROP PROCEDURE IF EXISTS baton_floor_none")
			must("CREATE PROCEDURE baton_floor_none(IN p_owner VARBINARY(128)) SQL SECURITY INVOKER DO 0")
			defer db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS baton_floor_none")
			must("DROP PROCEDURE IF EXISTS baton_floor_row")
			must("CREATE PROCEDURE baton_floor_row(IN p_owner VARBINARY(128)) SQL SECURITY INVOKER SELECT 1")
			defer db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS baton_floor_row")
			var decls strings.Builder
			for i := range 47 {
				fmt.Fprintf(&decls, "DECLARE v_%d BIGINT DEFAULT 0;\n", i)
			}
			must("DROP PROCEDURE IF EXISTS baton_floor_vars")
			must("CREATE PROCEDURE baton_floor_vars(IN p_owner VARBINARY(128)) SQL SECURITY INVOKER BEGIN " + decls.String() + " SELECT 1; END")
			defer db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS baton_floor_vars")
			must("DROP PROCEDURE IF EXISTS baton_floor_block")
			must("CREATE PROCEDURE baton_floor_block(IN p_owner VARBINARY(128)) SQL SECURITY INVOKER BEGIN IF p_owner = '' THEN BEGIN " + decls.String() + " SET v_0 = 1; END; END IF; SELECT 1; END")
			defer db.ExecContext(ctx, "DROP PROCEDURE IF EXISTS baton_floor_block")
			// The store's procedures, on a table of their own.
			tb := freshTable(b)
			st, err := mysql.Open(ctx, dsn(b), &mysql.Options{Table: tb})
			if err != nil {
				b.Fatal(err)
			}
			st.Close()
			// The grace period covers the TTL (else T_grant asks for this).
			var maxTTL sql.NullInt64
			if err := db.QueryRowContext(ctx, "CALL "+tb+"_raise(15000000000, -1)").Scan(&maxTTL); err != nil {
				b.Fatal(err)
			}

			conn, err := db.Conn(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			b.Run("get-lock", func(b *testing.B) {
				var x sql.NullInt64
				for b.Loop() {
					if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('baton_floor', 1)").Scan(&x); err != nil || x.Int64 != 1 {
						b.Fatal(err, x)
					}
					if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK('baton_floor')").Scan(&x); err != nil {
						b.Fatal(err)
					}
				}
			})
			for _, engine := range []string{"InnoDB", "MEMORY"} {
				tb := "baton_floor_" + engine
				acquire, err := conn.PrepareContext(ctx, "UPDATE "+tb+" SET owner = ?, seq = seq + 1, expires = UTC_TIMESTAMP(6) + INTERVAL 15 SECOND WHERE name = 'x'")
				if err != nil {
					b.Fatal(err)
				}
				release, err := conn.PrepareContext(ctx, "UPDATE "+tb+" SET owner = NULL WHERE name = 'x' AND owner = ?")
				if err != nil {
					b.Fatal(err)
				}
				b.Run(map[string]string{"InnoDB": "innodb-update", "MEMORY": "memory-update"}[engine], func(b *testing.B) {
					for b.Loop() {
						if _, err := acquire.ExecContext(ctx, "own1"); err != nil {
							b.Fatal(err)
						}
						if _, err := release.ExecContext(ctx, "own1"); err != nil {
							b.Fatal(err)
						}
					}
				})
				acquire.Close()
				release.Close()
			}
			call, err := conn.PrepareContext(ctx, "CALL baton_floor_set(?)")
			if err != nil {
				b.Fatal(err)
			}
			defer call.Close()
			mcall, err := conn.PrepareContext(ctx, "CALL baton_floor_mset('own1', ?)")
			if err != nil {
				b.Fatal(err)
			}
			defer mcall.Close()
			b.Run("memory-call", func(b *testing.B) {
				var n int64
				for b.Loop() {
					for _, acquire := range []int{1, 0} {
						if err := mcall.QueryRowContext(ctx, acquire).Scan(&n); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
			for _, p := range []string{"row", "vars", "block"} {
				c, err := conn.PrepareContext(ctx, "CALL baton_floor_"+p+"(?)")
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				b.Run("call-"+p, func(b *testing.B) {
					var n int64
					for b.Loop() {
						for range 2 {
							if err := c.QueryRowContext(ctx, "own1").Scan(&n); err != nil {
								b.Fatal(err)
							}
						}
					}
				})
			}
			none, err := conn.PrepareContext(ctx, "CALL baton_floor_none(?)")
			if err != nil {
				b.Fatal(err)
			}
			defer none.Close()
			b.Run("call-none", func(b *testing.B) {
				for b.Loop() {
					for range 2 {
						if _, err := none.ExecContext(ctx, "own1"); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
			grant, err := conn.PrepareContext(ctx, "CALL "+tb+"_grant(?, ?, 1, 0, 15000000000, 0, 0, 'h', NULL, 0, ?, '')")
			if err != nil {
				b.Fatal(err)
			}
			defer grant.Close()
			take, err := conn.PrepareContext(ctx, "CALL "+tb+"_take(?, ?, 1, 0, 15000000000, 0, 0, 'h', NULL, 0, ?, '')")
			if err != nil {
				b.Fatal(err)
			}
			defer take.Close()
			releaseOne, err := conn.PrepareContext(ctx, "CALL "+tb+"_release_one(?, ?, ?, 0)")
			if err != nil {
				b.Fatal(err)
			}
			defer releaseOne.Close()
			release, err := conn.PrepareContext(ctx, "CALL "+tb+"_release(?)")
			if err != nil {
				b.Fatal(err)
			}
			defer release.Close()
			del, err := conn.PrepareContext(ctx, "DELETE FROM "+tb+"_holds WHERE name = ? AND owner = ? AND queued = 0 AND flags = 0 AND expires > UTC_TIMESTAMP(6)")
			if err != nil {
				b.Fatal(err)
			}
			defer del.Close()
			ring, err := conn.PrepareContext(ctx, "DO RELEASE_LOCK(?)")
			if err != nil {
				b.Fatal(err)
			}
			defer ring.Close()
			for _, sub := range []string{"store-procs", "store-bell", "store-plain-release", "store-take", "store-route"} {
				bell := ""
				if sub != "store-procs" {
					bell = "baton:floor"
				}
				b.Run(sub, func(b *testing.B) {
					name, owner := "floor/x", "own1"
					keys := fmt.Sprintf(`[["%x","%x","%s"]]`, name, owner, bell)
					var status, token, created, renewed, expires, after, bQueued, bToken, flags int64
					var bOwner []byte
					var out string
					acquire := grant
					if sub == "store-take" || sub == "store-route" {
						acquire = take
					}
					for b.Loop() {
						err := acquire.QueryRowContext(ctx, name, owner, bell).Scan(&status, &token, &created, &renewed, &expires, &after, &bOwner, &bQueued, &bToken, &flags)
						if err != nil || status != 0 || (bell != "") != (flags&1 == 1) {
							b.Fatal(err, status, flags)
						}
						if sub == "store-route" {
							if err := releaseOne.QueryRowContext(ctx, name, owner, bell).Scan(&out); err != nil || out != "1,1;" {
								b.Fatal(err, out)
							}
							continue
						}
						if sub != "store-plain-release" {
							if err := release.QueryRowContext(ctx, keys).Scan(&out); err != nil || out != "1,1;" {
								b.Fatal(err, out)
							}
							continue
						}
						res, err := del.ExecContext(ctx, name, owner)
						if err != nil {
							b.Fatal(err)
						}
						if n, err := res.RowsAffected(); err != nil || n != 1 {
							b.Fatal(err, n)
						}
						if _, err := ring.ExecContext(ctx, bell); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
			b.Run("innodb-call", func(b *testing.B) {
				var n int64
				for b.Loop() {
					for _, owner := range []any{"own1", nil} {
						if err := call.QueryRowContext(ctx, owner).Scan(&n); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		})
	}
}
