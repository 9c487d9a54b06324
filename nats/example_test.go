package nats_test

import (
	"context"
	"fmt"

	"github.com/baton-go/baton"
	_ "github.com/baton-go/baton/nats"
)

func Example() {
	ctx := context.Background()
	// e.g. nats://10.0.0.5:4222/my-locks, or nats+tls://user:pass@host:4222?ca_file=/etc/nats/ca.pem
	url := "nats://127.0.0.1:4222/baton-example"
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
