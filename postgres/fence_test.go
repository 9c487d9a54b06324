package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/fence"
	"github.com/baton-go/baton/fence/fencetest"
)

// The fence kit on PostgreSQL: through database/sql (pgx's stdlib), and
// in a pgx transaction.
func TestFence(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		tb := fence.Table{Dialect: fence.Postgres, Name: fmt.Sprintf("baton_fence_%04x", rand.Uint32N(1<<16))}
		t.Run("DatabaseSQL", func(t *testing.T) {
			cfg, err := pgx.ParseConfig(dsn(t))
			if err != nil {
				t.Fatal(err)
			}
			db := stdlib.OpenDB(*cfg)
			defer db.Close()
			fencetest.Run(t, db, tb)
		})
		t.Run("Pgx", func(t *testing.T) {
			ctx := ctxFor(t, time.Minute)
			p := pool(t)
			create, _ := tb.CreateSQL()
			if _, err := p.Exec(ctx, create); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Exec(context.Background(), "DROP TABLE IF EXISTS "+tb.Name) })
			admit := func(token uint64, commit bool) error {
				tx, err := p.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx)
				if err := fence.Admit(ctx, tx.QueryRow, tb, "pgx", token); err != nil {
					return err
				}
				if commit {
					return tx.Commit(ctx)
				}
				return nil
			}
			for _, s := range []struct {
				token  uint64
				commit bool
				stale  bool
			}{{3, true, false}, {2, true, true}, {5, false, false}, {4, true, false}, {3, true, true}} {
				if err := admit(s.token, s.commit); s.stale != errors.Is(err, fence.ErrStale) || !s.stale && err != nil {
					t.Fatalf("token %d: %v (stale: %v)", s.token, err, s.stale)
				}
			}
		})
	})
}
