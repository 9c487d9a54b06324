package main

// PostgreSQL peers, for -target KIND=postgres://…:
//
//	pg-advisory  pg_advisory_lock(hashtext(name)) through pgx, one dedicated
//	             connection per client: blocking, FIFO in the server, no TTL
//	             (the lock lives as long as the session).
//	pglock       cirello.io/pglock v1.16.1 over lib/pq, 1 s lease and 300 ms
//	             heartbeat as in shared/notes/peer-baselines.md, in a table of
//	             its own (bench_pglock).
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
