package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// ErrTxLockLost is returned by InLockedTx in the unlikely case that the
// hold it was granted expired before its transaction could lock the name
// (more than 15 seconds between the two).
var ErrTxLockLost = errors.New("postgres: the lock expired before the transaction could take it")

// InLockedTx runs fn in a database transaction that holds the lock name:
// no lease is granted on name, and no other InLockedTx runs on it, from
// before fn is called until the transaction ends. fn receives the
// transaction and a fencing token from the name's counter, larger than
// every token handed out for name before (to leases or transactions). If
// fn returns nil the transaction commits, otherwise it rolls back and
// InLockedTx returns fn's error; either way the lock is free once
// InLockedTx returns. fn must neither commit nor roll back tx itself, nor
// use it after returning.
//
// InLockedTx waits its turn as an exclusive Lock does: in the name's FIFO
// queue (so shared holders cannot starve it), woken by notifications, until
// ctx ends. Once granted, it begins a transaction whose first statement
// takes the name's counters row with SELECT … FOR UPDATE and drops the
// hold it was granted: from then on the row lock keeps every other grant
// out until commit or rollback. While fn runs, acquires of name by others
// (TryLock included) wait in the database for the transaction to end (or
// until a second after their context ends), each holding a connection of
// its pool. The token
// is never handed out again, even if the transaction rolls back or the
// server crashes (see Durability).
//
// Status shows the transaction as a holder of name whose owner starts with
// "tx-", until its grant's TTL (15s) runs out.
func (s *Store) InLockedTx(ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx, token uint64) error) error {
	if err := baton.CheckName(name); err != nil {
		return err
	}
	if fn == nil {
		return errors.New("postgres: InLockedTx: fn is nil")
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	return s.newLockedTx().Run(ctx, name, fn)
}

// newLockedTx gives driver.LockedTx the store's steps.
func (s *Store) newLockedTx() *driver.LockedTx[pgx.Tx] {
	return &driver.LockedTx[pgx.Tx]{
		Store: s,
		Watch: func(_ context.Context, req *driver.Request) (driver.Watch, error) {
			return s.hub.watch(req.Name, req.Owner)
		},
		Begin: func(ctx context.Context, name, owner string, token uint64) (pgx.Tx, error) {
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				return nil, wrap("begin transaction", err)
			}
			var ok bool
			if err := tx.QueryRow(ctx, s.q.bind, name, owner, int64(token)).Scan(&ok); err != nil || !ok {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				tx.Rollback(rctx)
				cancel()
				if err != nil {
					return nil, wrap("lock in transaction", err)
				}
				return nil, ErrTxLockLost
			}
			return tx, nil
		},
		Commit: func(ctx context.Context, tx pgx.Tx) error {
			if err := tx.Commit(ctx); err != nil {
				return wrap("commit", err)
			}
			return nil
		},
		Rollback: func(ctx context.Context, tx pgx.Tx) { tx.Rollback(ctx) },
	}
}
