package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

// ErrTxLockLost is returned by InLockedTx in the unlikely case that the
// hold it was granted expired before its transaction could take the name
// (more than 15 seconds between the two).
var ErrTxLockLost = errors.New("mysql: the lock expired before the transaction could take it")

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
// queue (so shared holders cannot starve it), woken by the bell of the
// entry ahead, until ctx ends. Once granted, it begins a transaction (at
// the session's isolation level) whose first statement takes the name's
// counters row with SELECT … FOR UPDATE (on a fast table, where names
// otherwise have none, the row is made first if missing: a flushed commit)
// and drops the hold it was granted: from then on the row lock keeps every
// other grant out until commit or rollback. While fn runs, an acquire of
// name by another (TryLock included) waits in the database for at most a
// second, then answers "not granted", naming the transaction's hold as the
// entry to wait for (on a durable table; a fast table's hold is gone, and
// the acquire asks again).
// The token is never handed out again, even if the transaction rolls
// back: on a durable table it was committed before fn runs, and on a fast
// one a restart of the server moves tokens to a new epoch.
//
// Status shows the transaction as a holder of name whose owner starts with
// "tx-" until it ends.
func (s *Store) InLockedTx(ctx context.Context, name string, fn func(ctx context.Context, tx *sql.Tx, token uint64) error) error {
	if err := baton.CheckName(name); err != nil {
		return err
	}
	if fn == nil {
		return errors.New("mysql: InLockedTx: fn is nil")
	}
	if err := s.begin(ctx); err != nil {
		return err
	}
	return s.newLockedTx().Run(ctx, name, fn)
}

// newLockedTx gives driver.LockedTx the store's steps.
func (s *Store) newLockedTx() *driver.LockedTx[*sql.Tx] {
	return &driver.LockedTx[*sql.Tx]{
		Store: s,
		Watch: s.Watch,
		Begin: func(ctx context.Context, name, owner string, token uint64) (*sql.Tx, error) {
			if s.fast {
				// The row the transaction will hold: a fast table's grants
				// serialize on stripes, which the transaction must not hold.
				if err := retry(ctx, func() error {
					_, err := s.db.ExecContext(ctx, s.st.txrow, name)
					return err
				}); err != nil {
					return nil, wrap("lock in transaction", err)
				}
			}
			tx, err := s.db.BeginTx(ctx, nil)
			if err != nil {
				return nil, wrap("begin transaction", err)
			}
			var ok int64
			if err := tx.StmtContext(ctx, s.st.bind).QueryRowContext(ctx, name, owner, token).Scan(&ok); err != nil || ok != 1 {
				_ = tx.Rollback()
				if err != nil {
					return nil, wrap("lock in transaction", err)
				}
				return nil, ErrTxLockLost
			}
			return tx, nil
		},
		Commit: func(_ context.Context, tx *sql.Tx) error {
			if err := tx.Commit(); err != nil {
				return wrap("commit", err)
			}
			return nil
		},
		Rollback: func(_ context.Context, tx *sql.Tx) { _ = tx.Rollback() },
		// The hold left with the commit: ring its bell.
		Committed: func(name, owner string) { s.bells.drop(s.bellName(name, owner)) },
	}
}
