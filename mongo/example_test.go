package mongo_test

import (
	"context"
	"fmt"

	"github.com/baton-go/baton"
	_ "github.com/baton-go/baton/mongo"
)

func Example() {
	ctx := context.Background()
	// e.g. mongodb://user:pw@db1,db2,db3/locks?replicaSet=rs0&collection=app_locks
	url := "mongodb://127.0.0.1:27017/baton_example?replicaSet=rs0&collection=example_locks"
	client, err := baton.Open(ctx, url, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	err = client.Do(ctx, "reports/nightly", nil, func(ctx context.Context, l *baton.Lease) error {
		fmt.Println("holding", l.Name(), "with a fencing token:", l.Token() > 0)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// holding reports/nightly with a fencing token: true
	// done: <nil>
}
