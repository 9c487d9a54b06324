package fence_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-go/baton/fence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGuardRefusesStaleTokens(t *testing.T) {
	ctx := t.Context()
	var g fence.Guard
	for _, tc := range []struct {
		name  string
		token uint64
		stale bool
	}{
		{"a", 5, false},
		{"a", 5, false}, // the same holder again
		{"a", 4, true},
		{"b", 1, false}, // another name: its own fence
		{"a", 7, false},
		{"a", 6, true},
	} {
		ran := false
		err := g.Do(ctx, tc.name, tc.token, func() error { ran = true; return nil })
		if tc.stale {
			var se *fence.StaleError
			if !errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || ran {
				t.Fatalf("%s/%d: err %v, ran %v; want a StaleError and no run", tc.name, tc.token, err, ran)
			}
			if se.Name != tc.name || se.Token != tc.token {
				t.Errorf("StaleError %+v", se)
			}
		} else if err != nil || !ran {
			t.Fatalf("%s/%d: err %v, ran %v", tc.name, tc.token, err, ran)
		}
	}
	if h, _ := g.Highest(ctx, "a"); h != 7 {
		t.Errorf("Highest(a) = %d, want 7", h)
	}
}

func TestGuardAdmitsEvenIfTheWriteFails(t *testing.T) {
	ctx := t.Context()
	var g fence.Guard
	boom := errors.New("boom")
	if err := g.Do(ctx, "x", 3, func() error { return boom }); err != boom {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if err := g.Admit(ctx, "x", 2); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(2) after 3 = %v, want ErrStale", err)
	}
}

// A stale holder that asks while a newer one writes waits for the write,
// then is refused: it never writes in between.
func TestGuardSerializesOneName(t *testing.T) {
	ctx := t.Context()
	var g fence.Guard
	inside := make(chan struct{})
	done := make(chan struct{})
	var mu sync.Mutex
	var order []string
	go func() {
		defer close(done)
		g.Do(ctx, "x", 2, func() error {
			close(inside)
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			order = append(order, "new")
			mu.Unlock()
			return nil
		})
	}()
	<-inside
	err := g.Do(ctx, "x", 1, func() error {
		mu.Lock()
		order = append(order, "stale")
		mu.Unlock()
		return nil
	})
	<-done
	if !errors.Is(err, fence.ErrStale) || len(order) != 1 {
		t.Fatalf("stale Do = %v, writes %v", err, order)
	}
	// Waiting for the turn is bounded by the context.
	hold := make(chan struct{})
	go g.Do(ctx, "y", 1, func() error { <-hold; return nil })
	time.Sleep(10 * time.Millisecond)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := g.Do(wctx, "y", 2, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Do while y is busy = %v, want DeadlineExceeded", err)
	}
	close(hold)
}

func TestMiddleware(t *testing.T) {
	var g fence.Guard
	var writes []string
	h := g.Middleware(func(r *http.Request) string { return r.URL.Path }, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writes = append(writes, r.URL.Path+" "+r.Header.Get(fence.Header))
		w.WriteHeader(http.StatusNoContent)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	send := func(path string, header ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+path, nil)
		for _, v := range header {
			req.Header.Add(fence.Header, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		path   string
		header []string
		status int
	}{
		{"/a", []string{"10"}, 204},
		{"/a", []string{"9"}, 409},
		{"/b", []string{"9"}, 204},
		{"/a", nil, 428},
		{"/a", []string{"ten"}, 400},
		{"/a", []string{"-1"}, 400},
		{"/a", []string{"11", "12"}, 400},
		{"/a", []string{"18446744073709551616"}, 400},
		{"/a", []string{"11"}, 204},
	} {
		resp := send(tc.path, tc.header...)
		if resp.StatusCode != tc.status {
			t.Errorf("%s %v: status %d, want %d", tc.path, tc.header, resp.StatusCode, tc.status)
		}
		tok, _ := strconv.ParseUint(append(tc.header, "0")[0], 10, 64)
		err := fence.ResponseError(resp, tok)
		if (tc.status == 409) != errors.Is(err, fence.ErrStale) {
			t.Errorf("%s %v: ResponseError = %v", tc.path, tc.header, err)
		}
		if tc.status == 409 {
			if se := err.(*fence.StaleError); se.Highest != 10 || se.Token != 9 {
				t.Errorf("ResponseError = %+v", se)
			}
		}
	}
	if want := []string{"/a 10", "/b 9", "/a 11"}; len(writes) != len(want) || writes[0] != want[0] || writes[1] != want[1] || writes[2] != want[2] {
		t.Errorf("writes %q, want %q", writes, want)
	}
}

func TestTableNames(t *testing.T) {
	for _, tc := range []struct {
		t    fence.Table
		want string // "" for an error
	}{
		{fence.Table{Dialect: fence.Postgres}, `"baton_fences"`},
		{fence.Table{Dialect: fence.MySQL, Name: "app.fences"}, "`app`.`fences`"},
		{fence.Table{Dialect: fence.SQLite, Name: "f_1"}, `"f_1"`},
		{fence.Table{Dialect: fence.Postgres, Name: `x"; DROP TABLE y; --`}, ""},
		{fence.Table{Dialect: fence.Postgres, Name: "a.b.c"}, ""},
		{fence.Table{Dialect: fence.Postgres, Name: "1x"}, ""},
		{fence.Table{Name: "x"}, ""},
	} {
		s, err := tc.t.CreateSQL()
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%+v: CreateSQL = %q, want an error", tc.t, s)
		case tc.want != "" && (err != nil || !strings.Contains(s, " "+tc.want+" ")):
			t.Errorf("%+v: CreateSQL = %q, %v; want it to name %s", tc.t, s, err, tc.want)
		}
	}
}

// Admit refuses bad input before it reaches the database: query is never
// called.
func TestAdmitBadInput(t *testing.T) {
	never := func(context.Context, string, ...any) fence.Row { t.Fatal("query called"); return nil }
	tb := fence.Table{Dialect: fence.Postgres}
	long := string(make([]byte, fence.MaxNameLen+1))
	for _, tc := range []struct {
		t     fence.Table
		name  string
		token uint64
	}{
		{tb, "", 1},
		{tb, long, 1},
		{tb, "x", 1 << 63},
		{fence.Table{Dialect: fence.Postgres, Name: "bad name"}, "x", 1},
		{fence.Table{}, "x", 1},
	} {
		if err := fence.Admit(t.Context(), never, tc.t, tc.name, tc.token); err == nil {
			t.Errorf("Admit(%+v, %.10q, %d) = nil, want an error", tc.t, tc.name, tc.token)
		}
	}
}
