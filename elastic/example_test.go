package elastic_test

import (
	"context"
	"fmt"

	"github.com/baton-go/baton"
	_ "github.com/baton-go/baton/elastic"
)

func Example() {
	ctx := context.Background()
	// e.g. opensearch://127.0.0.1:9200/my-locks, or elasticsearch+https://user:pass@host:9243
	url := "opensearch://127.0.0.1:9200/baton-example"
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
