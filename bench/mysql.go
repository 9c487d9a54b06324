package main

// MySQL/MariaDB peer, for -target KIND=mysql://user:pass@host:port/db:
//
//	mysql-getlock  GET_LOCK(name, timeout) / RELEASE_LOCK(name) through
//	               go-sql-driver, one dedicated connection per client, with
//	               prepared statements (one round trip each): blocking in
//	               the server, no TTL (the lock lives as long as the
//	               session).
//	mysql-queue    the least fair lease with a fencing token MySQL gives, a
//	               floor rather than a peer, built as baton's fast table is
//	               (an InnoDB row per name locked FOR UPDATE, which flushes
//	               nothing; the state in MEMORY tables): a row per name
//	               (holder, token, expiry by the server's clock, the
//	               queue's ticket, length and tail) and a queue table. A
//	               refused acquire queues and waits for the bell (a
//	               GET_LOCK) of the entry just ahead; a release hands the
//	               lock to the head of the queue and then lets its own bell
//	               go, which wakes the head, whose wait reads its token. No
//	               sessions, metadata, shared modes, epochs or grace
//	               periods; an expired holder is not replaced while others
//	               wait, and a Lock whose context ends while it waits
//	               leaves its queue entry behind: a floor to measure, not a
//	               lock to use.
//
// baton=mysql://… (or mariadb://…) needs no kind of its own: importing the
// store registers its URL schemes.

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"

	mysqldrv "github.com/go-sql-driver/mysql"

	_ "github.com/baton-go/baton/mysql"
)

func init() {
	kinds["mysql-getlock"] = mysqlGetLockTarget
	kinds["mysql-queue"] = mysqlQueueTarget
}

func mysqlGetLockTarget(url string) Target {
	return Target{Name: "mysql-getlock", New: func(ctx context.Context) (Locker, error) {
		db, err := mysqlOpen(url)
		if err != nil {
			return nil, err
		}
		g := &getLock{db: db, turn: make(chan struct{}, 1)}
		if g.conn, err = db.Conn(ctx); err == nil {
			if g.get, err = g.conn.PrepareContext(ctx, "SELECT GET_LOCK(?, 60)"); err == nil {
				g.rel, err = g.conn.PrepareContext(ctx, "SELECT RELEASE_LOCK(?)")
			}
		}
		if err != nil {
			g.Close()
			return nil, err
		}
		return g, nil
	}}
}

// mysqlOpen opens mysql://user:pass@host:port/db with go-sql-driver (TCP
// only; the bench needs nothing else).
func mysqlOpen(raw string) (*sql.DB, error) {
	u, err := neturl.Parse(raw)
	if err != nil {
		return nil, err
	}
	cfg := mysqldrv.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	connector, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

type getLock struct {
	db       *sql.DB
	conn     *sql.Conn
	get, rel *sql.Stmt
	// turn is held from Lock to the end of its release: the connection
	// runs one statement at a time, and GET_LOCK is re-entrant, so a Lock
	// made before the client's previous release finished (the hand-off
	// loop does that) must wait for it rather than be granted at once.
	turn chan struct{}
}

func (g *getLock) Lock(ctx context.Context, name string) (func() error, error) {
	select {
	case g.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for {
		var got sql.NullInt64
		if err := g.get.QueryRowContext(ctx, name).Scan(&got); err != nil {
			<-g.turn
			return nil, err
		}
		if got.Int64 == 1 {
			break
		}
		if err := ctx.Err(); err != nil {
			<-g.turn
			return nil, err
		}
	}
	return func() error {
		defer func() { <-g.turn }()
		var ok sql.NullInt64
		if err := g.rel.QueryRowContext(ctx, name).Scan(&ok); err != nil {
			return err
		}
		if ok.Int64 != 1 {
			return fmt.Errorf("RELEASE_LOCK(%q): not held", name)
		}
		return nil
	}, nil
}

func (g *getLock) Close() error {
	for _, st := range []*sql.Stmt{g.get, g.rel} {
		if st != nil {
			st.Close()
		}
	}
	if g.conn != nil {
		g.conn.Close()
	}
	return g.db.Close()
}

// mysqlQueueSchema makes mysql-queue's tables and procedures, one
// statement at a time, once per server and bench process.
var mysqlQueueSchema = []string{
	`DROP PROCEDURE IF EXISTS bench_myq_acquire`,
	`DROP PROCEDURE IF EXISTS bench_myq_wait`,
	`DROP PROCEDURE IF EXISTS bench_myq_release`,
	`CREATE TABLE IF NOT EXISTS bench_myq_name (name VARBINARY(255) PRIMARY KEY) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS bench_myq_lock (name VARBINARY(255) PRIMARY KEY, holder VARBINARY(64) NULL,
		token BIGINT NOT NULL DEFAULT 0, expires DATETIME(6) NULL, ticket BIGINT NOT NULL DEFAULT 0,
		waiting INT NOT NULL DEFAULT 0, tail VARBINARY(64) NULL) ENGINE=MEMORY`,
	`CREATE TABLE IF NOT EXISTS bench_myq_queue (name VARBINARY(255) NOT NULL, ticket BIGINT NOT NULL,
		bell VARBINARY(64) NOT NULL, PRIMARY KEY (name, ticket) USING BTREE) ENGINE=MEMORY`,
	// acquire takes the caller's bell b (also its owner), then grants or
	// queues; it returns the token (0 when queued) and the bell to wait for.
	`CREATE PROCEDURE bench_myq_acquire(IN n VARBINARY(255), IN b VARCHAR(64))
	BEGIN
		DECLARE x INT DEFAULT NULL;
		DECLARE h, tl VARBINARY(64) DEFAULT NULL;
		DECLARE e DATETIME(6) DEFAULT NULL;
		DECLARE w INT DEFAULT 0;
		DECLARE t, tk BIGINT DEFAULT 0;
		DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
		DO GET_LOCK(b, 0);
		START TRANSACTION;
		SELECT 1 INTO x FROM bench_myq_name WHERE name = n FOR UPDATE;
		IF x IS NULL THEN
			-- A new name: its rows inserted by statements of their own
			-- (two transactions' INSERT IGNORE of one row deadlock), the
			-- state's first, so that a name's row never exists without it.
			COMMIT;
			INSERT IGNORE INTO bench_myq_lock (name) VALUES (n);
			INSERT IGNORE INTO bench_myq_name (name) VALUES (n);
			START TRANSACTION;
			SELECT 1 INTO x FROM bench_myq_name WHERE name = n FOR UPDATE;
		END IF;
		SELECT holder, expires, waiting, token, ticket, tail INTO h, e, w, t, tk, tl FROM bench_myq_lock WHERE name = n;
		IF (h IS NULL OR e <= UTC_TIMESTAMP(6)) AND w = 0 THEN
			UPDATE bench_myq_lock SET holder = b, token = t + 1, expires = UTC_TIMESTAMP(6) + INTERVAL 15 SECOND WHERE name = n;
			COMMIT;
			SELECT t + 1, '';
		ELSE
			UPDATE bench_myq_lock SET ticket = tk + 1, waiting = w + 1, tail = b WHERE name = n;
			INSERT INTO bench_myq_queue (name, ticket, bell) VALUES (n, tk + 1, b);
			COMMIT;
			SELECT 0, IF(w > 0, tl, h);
		END IF;
	END`,
	// wait waits for the bell p of the entry ahead and returns the token
	// of the caller's hold (0 if it is not the holder yet).
	`CREATE PROCEDURE bench_myq_wait(IN n VARBINARY(255), IN b VARCHAR(64), IN p VARCHAR(64))
	BEGIN
		DECLARE t BIGINT DEFAULT 0;
		DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
		IF GET_LOCK(p, 60) = 1 THEN
			DO RELEASE_LOCK(p);
		END IF;
		SELECT token INTO t FROM bench_myq_lock WHERE name = n AND holder = b;
		SELECT t;
	END`,
	// release hands the lock to the head of the queue, commits, then lets
	// the caller's bell go; it returns 1 if the caller held the lock.
	`CREATE PROCEDURE bench_myq_release(IN n VARBINARY(255), IN b VARCHAR(64))
	proc: BEGIN
		DECLARE x INT DEFAULT NULL;
		DECLARE h, nx VARBINARY(64) DEFAULT NULL;
		DECLARE qt BIGINT DEFAULT NULL;
		DECLARE CONTINUE HANDLER FOR NOT FOUND BEGIN END;
		START TRANSACTION;
		SELECT 1 INTO x FROM bench_myq_name WHERE name = n FOR UPDATE;
		SELECT holder INTO h FROM bench_myq_lock WHERE name = n;
		IF h IS NULL OR h <> b THEN
			ROLLBACK;
			DO RELEASE_LOCK(b);
			SELECT 0;
			LEAVE proc;
		END IF;
		SELECT ticket, bell INTO qt, nx FROM bench_myq_queue WHERE name = n ORDER BY ticket LIMIT 1;
		IF nx IS NULL THEN
			UPDATE bench_myq_lock SET holder = NULL WHERE name = n;
		ELSE
			DELETE FROM bench_myq_queue WHERE name = n AND ticket = qt;
			UPDATE bench_myq_lock SET holder = nx, token = token + 1, expires = UTC_TIMESTAMP(6) + INTERVAL 15 SECOND,
			       waiting = waiting - 1 WHERE name = n;
		END IF;
		COMMIT;
		DO RELEASE_LOCK(b);
		SELECT 1;
	END`,
}

// mysqlQueueSchemaMu guards mysqlQueueMade, the URLs whose server has
// mysqlQueueSchema.
var (
	mysqlQueueSchemaMu sync.Mutex
	mysqlQueueMade     = map[string]bool{}
)

func mysqlQueueTarget(url string) Target {
	return Target{Name: "mysql-queue", New: func(ctx context.Context) (Locker, error) {
		db, err := mysqlOpen(url)
		if err != nil {
			return nil, err
		}
		var id [8]byte
		rand.Read(id[:])
		q := &mysqlQueue{db: db, owner: "bq" + hex.EncodeToString(id[:])}
		if q.conn, err = q.db.Conn(ctx); err == nil {
			// As baton's procedures do for each transaction: a missing
			// name's row then takes no gap lock.
			_, err = q.conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
		}
		if err == nil {
			mysqlQueueSchemaMu.Lock()
			for _, st := range mysqlQueueSchema {
				if mysqlQueueMade[url] {
					break
				}
				if _, err = q.conn.ExecContext(ctx, st); err != nil {
					break
				}
			}
			mysqlQueueMade[url] = err == nil
			mysqlQueueSchemaMu.Unlock()
		}
		for i, text := range []string{"CALL bench_myq_acquire(?, ?)", "CALL bench_myq_wait(?, ?, ?)", "CALL bench_myq_release(?, ?)"} {
			if err != nil {
				break
			}
			q.st[i], err = q.conn.PrepareContext(ctx, text)
		}
		if err != nil {
			q.Close()
			return nil, err
		}
		return q, nil
	}}
}

// mysqlQueue serializes the use of its connection, as pgQueue does; a
// Lock waiting for its bell keeps it. Each Lock has a bell of its own, so
// that the waiter woken by the previous release, which takes that bell
// for a moment, never holds up the next Lock.
type mysqlQueue struct {
	mu    sync.Mutex
	db    *sql.DB
	conn  *sql.Conn
	st    [3]*sql.Stmt // acquire, wait, release
	owner string
	n     int
}

func (q *mysqlQueue) Lock(ctx context.Context, name string) (func() error, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n++
	bell := q.owner + "_" + strconv.Itoa(q.n)
	var token int64
	var pred sql.NullString
	if err := q.st[0].QueryRowContext(ctx, name, bell).Scan(&token, &pred); err != nil {
		return nil, err
	}
	for token == 0 {
		if err := q.st[1].QueryRowContext(ctx, name, bell, pred.String).Scan(&token); err != nil {
			return nil, err
		}
		if err := ctx.Err(); err != nil && token == 0 {
			return nil, err
		}
	}
	return func() error {
		var ok int
		q.mu.Lock()
		defer q.mu.Unlock()
		if err := q.st[2].QueryRowContext(ctx, name, bell).Scan(&ok); err != nil {
			return err
		}
		if ok != 1 {
			return fmt.Errorf("mysql-queue: %q was not held", name)
		}
		return nil
	}, nil
}

func (q *mysqlQueue) Close() error {
	for _, st := range q.st {
		if st != nil {
			st.Close()
		}
	}
	if q.conn != nil {
		q.conn.Close()
	}
	return q.db.Close()
}
