package spanner_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"cloud.google.com/go/spanner"

	"github.com/baton-go/baton"
	batonspanner "github.com/baton-go/baton/spanner"
)

// A leader loop on Spanner, as with spindle: Run campaigns until ctx ends,
// IsLeader says at any moment whether this process leads, with which
// fencing token (a commit timestamp). Here the database is the tests'
// (the emulator at SPANNER_EMULATOR_HOST); in
// production it is projects/P/instances/I/databases/D, and the table was
// created beforehand with the statement from DDL.
func Example_election() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, err := spanner.NewClient(ctx, testDB) // your client: credentials, endpoint
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := batonspanner.New(db, &batonspanner.Options{Table: table})
	if err != nil {
		log.Fatal(err)
	}
	client, err := baton.New(store, &baton.Options{TTL: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	e, err := client.Election("example/mylock", &baton.ElectionOptions{Value: "10.0.0.7:8080"})
	if err != nil {
		log.Fatal(err)
	}
	leading := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- e.Run(ctx, func(ctx context.Context, l *baton.Lease) error {
			close(leading)
			<-ctx.Done() // lead until cancelled, or until leadership is lost
			return nil
		})
	}()
	<-leading
	ok, token := e.IsLeader()
	fmt.Println("leading:", ok)
	fmt.Println("token is a recent commit timestamp:", time.Since(time.UnixMicro(int64(token))) < time.Minute)
	cancel()
	<-done
	ok, _ = e.IsLeader()
	fmt.Println("leading after cancel:", ok)
	// Output:
	// leading: true
	// token is a recent commit timestamp: true
	// leading after cancel: false
}

// Opening a store by URL, with its options as query parameters.
func Example_open() {
	ctx := context.Background()
	client, err := baton.Open(ctx, "spanner://"+testDB+"?table="+table+"&poll=50ms", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	lease, err := client.Lock(ctx, "example/nightly-report", &baton.LockOptions{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("holding", lease.Name())
	// Output: holding example/nightly-report
}

// The table's statement, for your schema tooling.
func ExampleDDL() {
	ddl, err := batonspanner.DDL(nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ddl)
	// Output:
	// CREATE TABLE `baton_locks` (
	//   name  STRING(MAX) NOT NULL,
	//   state BYTES(MAX),
	//   stamp TIMESTAMP OPTIONS (allow_commit_timestamp = true),
	// ) PRIMARY KEY (name)
}
