package fenced_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/baton-go/baton/faultcheck/fenced"
)

func TestResourceOverHTTP(t *testing.T) {
	var res fenced.Resource
	srv := httptest.NewServer(&res)
	defer srv.Close()
	ctx := context.Background()
	steps := []struct {
		name  string
		token uint64
		stale bool
	}{
		{"a", 5, false}, {"a", 5, false}, {"a", 7, false}, {"a", 6, true}, {"b", 1, false}, {"a", 7, false},
	}
	for i, s := range steps {
		err := fenced.Post(ctx, srv.Client(), srv.URL, s.name, s.token, "d")
		if got := errors.Is(err, fenced.ErrStale); got != s.stale || (!s.stale && err != nil) {
			t.Fatalf("step %d (%s, %d): err %v, want stale=%v", i, s.name, s.token, err, s.stale)
		}
	}
	log := res.Log()
	if len(log) != len(steps) || log[3].Accepted || log[3].Highest != 7 {
		t.Fatalf("log: %+v", log)
	}
}
