package main

// PostgreSQL peers, for -target KIND=postgres://…:
//
//	pg-advisory  pg_advisory_lock(hashtext(name)) through pgx, one dedicated
//	             connection per client: blocking, FIFO in the server, no TTL
//	             (the lock lives as long as the session).
//	pglock       cirello.io/pglock v1.16.1 over lib/pq, 1 s lease and 300 ms
//	             heartbeat as in shared/notes/peer-baselines.md, in a table of
//	             its own (bench_pglock).
//	pg-queue     the least fair lease with a fencing token PostgreSQL
//	             gives, a floor rather than a peer: a row per name (holder,
//	             token, expiry by the server's clock, the queue's ticket and
//	             length) and a queue table; a refused acquire queues, and a
//	             release hands the lock to the head of the queue and
//	             notifies its owner, who listens on its own connection.
//	             Asynchronous commit, as baton's default. No sessions,
//	             metadata, shared modes, epochs or grace periods; an
//	             expired holder is not replaced while others wait, and a
//	             Lock whose context ends while it waits leaves its queue
//	             entry behind: a floor to measure, not a lock to use.
//
// baton=postgres://… needs no kind of its own: importing the store
// registers its URL schemes.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5"
	_ "github.com/lib/pq"

	_ "github.com/baton-go/baton/postgres"
)

func init() {
	kinds["pg-advisory"] = pgAdvisoryTarget
	kinds["pglock"] = pglockTarget
	kinds["pg-queue"] = pgQueueTarget
}

func pgAdvisoryTarget(url string) Target {
	return Target{Name: "pg-advisory", New: func(ctx context.Context) (Locker, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, err
		}
		return &pgAdvisory{conn: conn}, nil
	}}
}

// pgAdvisory serializes the use of its connection, which pgx does not
// allow concurrently: the hand-off measurement starts a client's next Lock
// in a new goroutine while the previous goroutine may still be reading the
// reply to its unlock.
type pgAdvisory struct {
	mu   sync.Mutex
	conn *pgx.Conn
}

func (a *pgAdvisory) Lock(ctx context.Context, name string) (func() error, error) {
	a.mu.Lock()
	_, err := a.conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", name)
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return func() error {
		var ok bool
		a.mu.Lock()
		err := a.conn.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtext($1))", name).Scan(&ok)
		a.mu.Unlock()
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pg_advisory_unlock(%q): not held", name)
		}
		return nil
	}, nil
}

func (a *pgAdvisory) Close() error { return a.conn.Close(context.Background()) }

const pglockTable = "bench_pglock"

func pglockTarget(url string) Target {
	return Target{Name: "pglock", New: func(ctx context.Context) (Locker, error) {
		db, err := sql.Open("postgres", url)
		if err != nil {
			return nil, err
		}
		db.SetMaxOpenConns(4)
		c, err := pglock.New(db,
			pglock.WithCustomTable(pglockTable),
			pglock.WithLeaseDuration(time.Second),
			pglock.WithHeartbeatFrequency(300*time.Millisecond))
		if err != nil {
			db.Close()
			return nil, err
		}
		if err := c.TryCreateTable(); err != nil {
			db.Close()
			return nil, err
		}
		return &pglockLocker{db: db, c: c}, nil
	}}
}

type pglockLocker struct {
	db *sql.DB
	c  *pglock.Client
}

func (p *pglockLocker) Lock(ctx context.Context, name string) (func() error, error) {
	l, err := p.c.AcquireContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return func() error {
		if err := p.c.ReleaseContext(ctx, l); err != nil && !errors.Is(err, pglock.ErrLockAlreadyReleased) {
			return err
		}
		return nil
	}, nil
}

func (p *pglockLocker) Close() error { return p.db.Close() }

// pgQueueSchema makes pg-queue's tables and functions; each statement is
// idempotent, so every client runs it.
const pgQueueSchema = `
CREATE TABLE IF NOT EXISTS bench_pgq_lock (name text PRIMARY KEY, holder text, token bigint NOT NULL DEFAULT 0,
	expires timestamptz, ticket bigint NOT NULL DEFAULT 0, waiting int NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS bench_pgq_queue (name text, ticket bigint, owner text NOT NULL, PRIMARY KEY (name, ticket));
CREATE OR REPLACE FUNCTION bench_pgq_acquire(n text, o text) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE r bench_pgq_lock%ROWTYPE; t bigint;
BEGIN
	SELECT * INTO r FROM bench_pgq_lock WHERE name = n FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO bench_pgq_lock (name) VALUES (n) ON CONFLICT DO NOTHING;
		SELECT * INTO r FROM bench_pgq_lock WHERE name = n FOR UPDATE;
	END IF;
	IF (r.holder IS NULL OR r.expires <= clock_timestamp()) AND r.waiting = 0 THEN
		UPDATE bench_pgq_lock SET holder = o, token = token + 1, expires = clock_timestamp() + interval '15 seconds'
		 WHERE name = n RETURNING token INTO t;
		RETURN t;
	END IF;
	UPDATE bench_pgq_lock SET ticket = ticket + 1, waiting = waiting + 1 WHERE name = n RETURNING ticket INTO t;
	INSERT INTO bench_pgq_queue (name, ticket, owner) VALUES (n, t, o);
	RETURN 0;
END $$;
CREATE OR REPLACE FUNCTION bench_pgq_release(n text, o text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE nx text; t bigint;
BEGIN
	PERFORM 1 FROM bench_pgq_lock WHERE name = n AND holder = o FOR UPDATE;
	IF NOT FOUND THEN RETURN false; END IF;
	DELETE FROM bench_pgq_queue WHERE name = n AND ticket = (SELECT min(ticket) FROM bench_pgq_queue WHERE name = n)
	RETURNING owner INTO nx;
	IF nx IS NULL THEN
		UPDATE bench_pgq_lock SET holder = NULL WHERE name = n;
	ELSE
		UPDATE bench_pgq_lock SET holder = nx, token = token + 1, expires = clock_timestamp() + interval '15 seconds',
		       waiting = waiting - 1 WHERE name = n RETURNING token INTO t;
		PERFORM pg_notify('bench_pgq_' || nx, t::text);
	END IF;
	RETURN true;
END $$;
`

// pgQueueSchemaMu lets one client at a time run pgQueueSchema: concurrent
// CREATE OR REPLACE of one function can fail.
var pgQueueSchemaMu sync.Mutex

func pgQueueTarget(url string) Target {
	return Target{Name: "pg-queue", New: func(ctx context.Context) (Locker, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return nil, err
		}
		var owner string
		err = conn.QueryRow(ctx, "SELECT md5(random()::text)").Scan(&owner)
		if err == nil {
			_, err = conn.Exec(ctx, "SET synchronous_commit = off")
		}
		if err == nil {
			pgQueueSchemaMu.Lock()
			_, err = conn.Exec(ctx, pgQueueSchema)
			pgQueueSchemaMu.Unlock()
		}
		if err == nil {
			_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{"bench_pgq_" + owner}.Sanitize())
		}
		if err != nil {
			conn.Close(context.Background())
			return nil, err
		}
		return &pgQueue{conn: conn, owner: owner}, nil
	}}
}

// pgQueue serializes the use of its connection, as pgAdvisory does; a Lock
// waiting for its notification keeps it.
type pgQueue struct {
	mu    sync.Mutex
	conn  *pgx.Conn
	owner string
}

func (q *pgQueue) Lock(ctx context.Context, name string) (func() error, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var token int64
	if err := q.conn.QueryRow(ctx, "SELECT bench_pgq_acquire($1, $2)", name, q.owner).Scan(&token); err != nil {
		return nil, err
	}
	if token == 0 {
		// Queued: the release that hands the lock over notifies this
		// client's channel, only ever with a grant of the one name it
		// waits for.
		if _, err := q.conn.WaitForNotification(ctx); err != nil {
			return nil, err
		}
	}
	return func() error {
		var ok bool
		q.mu.Lock()
		defer q.mu.Unlock()
		if err := q.conn.QueryRow(ctx, "SELECT bench_pgq_release($1, $2)", name, q.owner).Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pg-queue: %q was not held", name)
		}
		return nil
	}, nil
}

func (q *pgQueue) Close() error { return q.conn.Close(context.Background()) }
