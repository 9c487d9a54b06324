package main

// MySQL/MariaDB peer, for -target KIND=mysql://user:pass@host:port/db:
//
//	mysql-getlock  GET_LOCK(name, timeout) / RELEASE_LOCK(name) through
//	               go-sql-driver, one dedicated connection per client, with
//	               prepared statements (one round trip each): blocking in
//	               the server, no TTL (the lock lives as long as the
//	               session).
//
// baton=mysql://… (or mariadb://…) needs no kind of its own: importing the
// store registers its URL schemes.

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	neturl "net/url"
	"strings"

	mysqldrv "github.com/go-sql-driver/mysql"

	_ "github.com/baton-go/baton/mysql"
)

func init() {
	kinds["mysql-getlock"] = mysqlGetLockTarget
}

func mysqlGetLockTarget(url string) Target {
	return Target{Name: "mysql-getlock", New: func(ctx context.Context) (Locker, error) {
		cfg, err := mysqlConfig(url)
		if err != nil {
			return nil, err
		}
		connector, err := mysqldrv.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(connector)
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

// mysqlConfig turns mysql://user:pass@host:port/db into go-sql-driver's
// configuration (TCP only; the bench needs nothing else).
func mysqlConfig(raw string) (*mysqldrv.Config, error) {
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
	return cfg, nil
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
