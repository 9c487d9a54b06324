package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
)

const (
	// txReserveTTL bounds how long the hold through which InLockedTx
	// waited its turn outlives a process that dies between the grant and
	// the start of its transaction (two round trips), or whose rollback
	// could not be followed by a release.
	txReserveTTL = 15 * time.Second
	// txMaxPoll and txQueueTTL are InLockedTx's fallback poll and queue
	// entry TTL, as baton's defaults for Lock.
	txMaxPoll  = 500 * time.Millisecond
	txQueueTTL = 10 * txMaxPoll
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
// for their context), each holding a connection of its pool. The token
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
	host, _ := os.Hostname()
	req := &driver.Request{
		Name: name, Owner: "tx-" + rand.Text(), Mode: driver.Exclusive, TTL: txReserveTTL,
		Queue: true, QueueTTL: txQueueTTL, Host: host,
	}
	key := []driver.Key{{Name: name, Owner: req.Owner}}
	abandon := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = s.Release(rctx, key)
	}
	g, err := s.waitTurn(ctx, req)
	if err != nil {
		abandon()
		return err
	}

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		abandon()
		return wrap("begin transaction", err)
	}
	done := false
	defer func() {
		if !done { // fn panicked
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			tx.Rollback(rctx)
			cancel()
			abandon()
		}
	}()
	var ok bool
	if err := tx.QueryRow(ctx, s.q.bind, name, req.Owner, int64(g.Token)).Scan(&ok); err != nil || !ok {
		done = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		tx.Rollback(rctx)
		cancel()
		abandon()
		if err != nil {
			return wrap("lock in transaction", err)
		}
		return ErrTxLockLost
	}
	ferr := fn(ctx, tx, g.Token)
	done = true
	if ferr != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		tx.Rollback(rctx)
		cancel()
		abandon() // the rollback brought the grant back
		return ferr
	}
	if err := tx.Commit(ctx); err != nil {
		abandon()
		return wrap("commit", err)
	}
	return nil
}

// waitTurn acquires req, waiting as baton's Lock does.
func (s *Store) waitTurn(ctx context.Context, req *driver.Request) (*driver.Grant, error) {
	w, err := s.hub.watch(req.Name, req.Owner)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return driver.AcquireWaiting(ctx, s, w, req, txMaxPoll)
}
