package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/mem"
)

// The common case: one job at a time across every process that shares the
// store. mem:// keeps the example self-contained; use sqlite:///path, or
// the URL of a shared store, to lock across processes.
func Example() {
	ctx := context.Background()
	client, err := baton.Open(ctx, "mem://", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	lease, err := client.Lock(ctx, "nightly-report", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	// Pass the fencing token to whatever the job writes to, and stop when
	// the lease may be lost.
	select {
	case <-lease.Done():
		log.Print("lease lost: ", lease.Err())
	default:
		fmt.Println("holding nightly-report with token", lease.Token())
	}
	// Output: holding nightly-report with token 1
}

// TryLock does not wait: it fails with ErrLocked when someone else holds
// the lock.
func ExampleClient_TryLock() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	first, _ := client.TryLock(ctx, "cron", nil)
	_, err := client.TryLock(ctx, "cron", nil)
	fmt.Println(err)
	first.Release(ctx)
	// Output: baton: lock is held: lock "cron"
}

// Do runs a function under the lock, with a context that ends if the lease
// may be lost (Kestra's doInLock); ctx bounds the wait and the function.
func ExampleClient_Do() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	err := client.Do(ctx, "migrate", nil, func(ctx context.Context, l *baton.Lease) error {
		fmt.Println("migrating under token", l.Token())
		return nil
	})
	fmt.Println("err:", err)
	// Output:
	// migrating under token 1
	// err: <nil>
}

// Shared locks and semaphores: many readers, or at most N holders.
func ExampleLockOptions() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	r1, _ := client.TryLock(ctx, "catalog", &baton.LockOptions{Shared: true})
	r2, _ := client.TryLock(ctx, "catalog", &baton.LockOptions{Shared: true})
	_, err := client.TryLock(ctx, "catalog", nil) // a writer must wait
	fmt.Println("two readers:", r1.Token(), r2.Token(), "writer:", err)

	slots := &baton.LockOptions{Limit: 2} // a semaphore of 2
	s1, _ := client.TryLock(ctx, "gpu", slots)
	s2, _ := client.TryLock(ctx, "gpu", slots)
	_, err = client.TryLock(ctx, "gpu", slots)
	fmt.Println("two slots:", s1.Token(), s2.Token(), "third:", err)
	// Output:
	// two readers: 1 2 writer: baton: lock is held: lock "catalog"
	// two slots: 1 2 third: baton: lock is held: lock "gpu"
}

// Locks taken with one owner form a group that is renewed or released in
// one call (mongo-lock's lock ids).
func ExampleClient_ReleaseOwner() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	owner := baton.NewOwner()
	for _, name := range []string{"invoice/1", "invoice/2"} {
		if _, err := client.Lock(ctx, name, &baton.LockOptions{Owner: owner}); err != nil {
			log.Fatal(err)
		}
	}
	released, _ := client.ReleaseOwner(ctx, owner)
	fmt.Println("released", len(released), "locks")
	// Output: released 2 locks
}

// A leader loop: Run campaigns, calls the function while leading, and
// campaigns again if leadership is lost, until ctx ends.
func ExampleElection_Run() {
	ctx, cancel := context.WithCancel(context.Background())
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	e, err := client.Election("scheduler", &baton.ElectionOptions{Value: "10.0.0.7:8080"})
	if err != nil {
		log.Fatal(err)
	}
	err = e.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
		leader, _ := e.Leader(ctx)
		fmt.Println("leading as", leader.Value, "with token", l.Token())
		cancel() // a real leader works until ctx ends
		return nil
	})
	fmt.Println("run:", err)
	// Output:
	// leading as 10.0.0.7:8080 with token 1
	// run: <nil>
}

// Status lists holders, with mongo-lock's filters.
func ExampleClient_Status() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://", &baton.Options{Host: "web-1"})
	defer client.Close()

	client.Lock(ctx, "jobs/a", &baton.LockOptions{Meta: map[string]string{"job": "export"}})
	client.Lock(ctx, "other", nil)
	infos, _ := client.Status(ctx, &baton.Filter{Prefix: "jobs/"})
	for _, i := range infos {
		fmt.Println(i.Name, i.Mode, i.Token, i.Host, i.Meta["job"])
	}
	// Output: jobs/a exclusive 1 web-1 export
}

// Purge deletes the holds of holders that died (they expired unreleased)
// and lists them; fencing tokens keep growing.
func ExampleClient_Purge() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://purge", nil)
	defer client.Close()

	// A hold that a crashed process left behind: granted, then neither
	// renewed nor released (made here through the store's driver).
	crashed := mem.Open("purge")
	crashed.Acquire(ctx, &driver.Request{Name: "report", Owner: "worker-7", Mode: driver.Exclusive, TTL: 20 * time.Millisecond})
	crashed.Close()
	time.Sleep(30 * time.Millisecond)

	purged, _ := client.Purge(ctx)
	for _, h := range purged {
		fmt.Println("purged", h.Name, "of", h.Owner)
	}
	next, _ := client.Lock(ctx, "report", nil)
	fmt.Println("next token:", next.Token())
	// Output:
	// purged report of worker-7
	// next token: 2
}

// RenewOwner renews every hold of an owner (mongo-lock's lock id) in one
// call, for holders that renew by hand.
func ExampleClient_RenewOwner() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	group := &baton.LockOptions{Owner: baton.NewOwner(), TTL: time.Minute, NoKeepAlive: true}
	client.Lock(ctx, "orders/17", group)
	client.Lock(ctx, "orders/18", group)
	renewed, err := client.RenewOwner(ctx, group.Owner, 2*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range renewed {
		fmt.Println("renewed", h.Name, "for", h.TTL)
	}
	// Output:
	// renewed orders/17 for 2m0s
	// renewed orders/18 for 2m0s
}

// WatchHolders follows who holds a lock, without taking it: each grant,
// release and expiry, as the store reports it.
func ExampleClient_WatchHolders() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	holders, err := client.WatchHolders(ctx, "reports/nightly", 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holders at first:", len(<-holders))

	lease, _ := client.TryLock(ctx, "reports/nightly", &baton.LockOptions{Owner: "cron-a"})
	hs := <-holders
	fmt.Println("held by", hs[0].Owner, "with token", hs[0].Token == lease.Token())

	lease.Release(ctx)
	fmt.Println("holders after the release:", len(<-holders))
	// Output:
	// holders at first: 0
	// held by cron-a with token true
	// holders after the release: 0
}

// An election by hand: Campaign waits to lead, Proclaim changes the value
// the leader announces, Observe follows the leader, Resign steps down.
func ExampleElection() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	e, _ := client.Election("primary", &baton.ElectionOptions{Value: "db-1:5432"})
	follower, _ := client.Election("primary", nil)
	leaders := follower.Observe(ctx, 10*time.Millisecond)

	if _, err := e.Campaign(ctx); err != nil {
		log.Fatal(err)
	}
	for l := <-leaders; l == nil; l = <-leaders {
		// nobody led yet when the observer first looked
	}
	if err := e.Proclaim(ctx, "db-2:5432"); err != nil {
		log.Fatal(err)
	}
	for l := <-leaders; ; l = <-leaders {
		if l != nil && l.Value == "db-2:5432" {
			fmt.Println("the leader announces", l.Value)
			break
		}
	}
	e.Resign(ctx)
	for l := <-leaders; l != nil; l = <-leaders {
	}
	fmt.Println("no leader after Resign")
	// Output:
	// the leader announces db-2:5432
	// no leader after Resign
}

// Ask asks the holder to let go; a holder that follows asks (here a Do with
// Revocable) sees its function's context end, with the ask as the cause.
func ExampleClient_Ask() {
	ctx := context.Background()
	client, _ := baton.Open(ctx, "mem://", nil)
	defer client.Close()

	started := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- client.Do(ctx, "reindex", &baton.LockOptions{Revocable: true}, func(ctx context.Context, l *baton.Lease) error {
			close(started)
			<-ctx.Done() // a long job that stops when asked (or when the lease may be lost)
			return context.Cause(ctx)
		})
	}()
	<-started
	n, _ := client.Ask(ctx, "reindex", &baton.AskOptions{Reason: "deploy at 10:00"})
	fmt.Println("asked", n, "holder")
	err := <-done
	fmt.Println(errors.Is(err, baton.ErrAsked), err)
	// Output:
	// asked 1 holder
	// true baton: asked to release lock "reindex": deploy at 10:00
}
