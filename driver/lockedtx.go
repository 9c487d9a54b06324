package driver

import (
	"context"
	"crypto/rand"
	"os"
	"time"
)

const (
	// txReserveTTL bounds how long the hold through which a locked
	// transaction waited its turn outlives a process that dies between the
	// grant and its transaction's first statement (two round trips), or
	// whose rollback could not be followed by a release.
	txReserveTTL = 15 * time.Second
	// txMaxPoll and txQueueTTL are the fallback poll and queue entry TTL,
	// as baton's defaults for Lock.
	txMaxPoll  = 500 * time.Millisecond
	txQueueTTL = 10 * txMaxPoll
)

// LockedTx is the flow of a SQL store's transactional mode (InLockedTx),
// written once: wait for an exclusive hold of a name in its FIFO queue,
// begin a transaction that takes the hold over (so that it ends with the
// transaction), run the caller's function, commit or roll back, and
// release the hold where the transaction did not end it. The store gives
// the transaction's steps.
type LockedTx[Tx any] struct {
	Store Store
	// Watch returns the wake-ups of req while it waits its turn.
	Watch func(ctx context.Context, req *Request) (Watch, error)
	// Begin begins a transaction and binds to it the hold granted to owner
	// on name with token. On an error it has rolled back what it began.
	Begin func(ctx context.Context, name, owner string, token uint64) (Tx, error)
	// Commit commits tx. Rollback rolls it back, with a context that
	// outlives the caller's cancellation.
	Commit   func(ctx context.Context, tx Tx) error
	Rollback func(ctx context.Context, tx Tx)
	// Committed, if set, runs after a commit ended the hold of owner.
	Committed func(name, owner string)
}

// Run runs fn in a transaction that holds the lock name, with a fencing
// token from the name's counter. If fn returns nil the transaction
// commits, otherwise it rolls back and Run returns fn's error; either way
// the lock is free once Run returns. Status shows the transaction as a
// holder whose owner starts with "tx-".
func (l *LockedTx[Tx]) Run(ctx context.Context, name string, fn func(ctx context.Context, tx Tx, token uint64) error) error {
	host, _ := os.Hostname()
	req := &Request{
		Name: name, Owner: "tx-" + rand.Text(), Mode: Exclusive, TTL: txReserveTTL,
		Queue: true, QueueTTL: txQueueTTL, Host: host,
	}
	bounded := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	}
	abandon := func() { // the hold, or its queue entry, is still there
		rctx, cancel := bounded()
		defer cancel()
		_, _ = l.Store.Release(rctx, []Key{{Name: name, Owner: req.Owner}})
	}
	rollback := func(tx Tx) {
		rctx, cancel := bounded()
		l.Rollback(rctx, tx)
		cancel()
		abandon() // the rollback brought the grant back
	}

	g, err := l.wait(ctx, req)
	if err != nil {
		abandon()
		return err
	}
	tx, err := l.Begin(ctx, name, req.Owner, g.Token)
	if err != nil {
		abandon()
		return err
	}
	done := false
	defer func() {
		if !done { // fn panicked
			rollback(tx)
		}
	}()
	ferr := fn(ctx, tx, g.Token)
	done = true
	if ferr != nil {
		rollback(tx)
		return ferr
	}
	if err := l.Commit(ctx, tx); err != nil {
		abandon()
		return err
	}
	if l.Committed != nil {
		l.Committed(name, req.Owner)
	}
	return nil
}

// wait acquires req, waiting as baton's Lock does.
func (l *LockedTx[Tx]) wait(ctx context.Context, req *Request) (*Grant, error) {
	w, err := l.Watch(ctx, req)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	return AcquireWaiting(ctx, l.Store, w, req, txMaxPoll)
}
