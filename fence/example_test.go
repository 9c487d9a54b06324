package fence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/fence"
)

// A holder paused past its lease resumes and writes with its old token:
// the guard refuses it, because a newer holder has written since.
func ExampleGuard() {
	ctx := context.Background()
	client, err := baton.Open(ctx, "mem://fence-example", nil)
	if err != nil {
		panic(err)
	}
	defer client.Close()

	var guard fence.Guard
	report := map[string]string{}
	write := func(token uint64, text string) error {
		return guard.Do(ctx, "report", token, func() error {
			report["report"] = text
			return nil
		})
	}

	first, _ := client.Lock(ctx, "report", nil)
	fmt.Println("first:", write(first.Token(), "draft"))
	// Suppose the first holder now stops for longer than its TTL and the
	// lock is granted again (here: released, to keep the example quick).
	stale := first.Token()
	first.Release(ctx)
	second, _ := client.Lock(ctx, "report", nil)
	fmt.Println("second:", write(second.Token(), "final"))
	second.Release(ctx)

	// The first holder wakes up and writes with its old token.
	err = write(stale, "draft, again")
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStale))
	fmt.Println("report:", report["report"])
	// Output:
	// first: <nil>
	// second: <nil>
	// late write refused: true
	// report: final
}

// A resource served over HTTP refuses stale holders with 409 Conflict; the
// holder sends its token in the Fencing-Token header.
func ExampleGuard_Middleware() {
	var guard fence.Guard
	store := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // the write, fenced
	})
	// Each path is a resource, fenced by the lock of the same name.
	srv := httptest.NewServer(guard.Middleware(func(r *http.Request) string { return r.URL.Path }, store))
	defer srv.Close()

	put := func(token uint64) error {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/invoice-42", nil)
		fence.SetToken(req.Header, token) // lease.Token() on the holder's side
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if err := fence.ResponseError(resp, token); err != nil {
			return err
		}
		fmt.Println(token, resp.Status)
		return nil
	}
	put(8)
	fmt.Println(put(7))
	defer http.DefaultClient.CloseIdleConnections()
	// Output:
	// 8 204 No Content
	// fence: stale fencing token 7: 8 was admitted
}
