package fenced_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/faultcheck/fenced"
)

// A holder paused past its lease resumes and writes with its old token:
// the resource refuses it, because a newer holder has written since.
func Example() {
	ctx := context.Background()
	client, err := baton.Open(ctx, "mem://fenced-example", nil)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	var res fenced.Resource

	first, _ := client.Lock(ctx, "report", nil)
	fmt.Println("first:", res.Write("report", first.Token(), "draft"))

	// Suppose the first holder now stops for longer than its TTL, and the
	// lock is granted again (here: released, to keep the example quick).
	stale := first.Token()
	first.Release(ctx)
	second, _ := client.Lock(ctx, "report", nil)
	fmt.Println("second:", res.Write("report", second.Token(), "final"))
	second.Release(ctx)

	// The first holder wakes up and writes with its old token.
	err = res.Write("report", stale, "draft, again")
	fmt.Println("first, after its pause, refused:", errors.Is(err, fenced.ErrStale))
	// Output:
	// first: <nil>
	// second: <nil>
	// first, after its pause, refused: true
}
