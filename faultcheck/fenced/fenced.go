// Package fenced is the fault harness's write target: an in-memory
// resource fenced by the fence kit (package fence), which logs every
// write it decides. faultcheck runs one and checks its log: it is the
// judge of "no two exclusive holders at once", so what the harness proves
// of the stores, it proves with the kit users import.
package fenced

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"

	"github.com/baton-go/baton/fence"
)

// ErrStale is fence.ErrStale: the error for a write whose token is smaller
// than the largest token already accepted for its name.
var ErrStale = fence.ErrStale

// Write is one write request, as the resource decided it.
type Write struct {
	Seq      int    // position in the resource's log, from 0
	Name     string // what is written to (a lock name, a row, a file)
	Token    uint64 // the writer's fencing token
	Data     string
	Accepted bool
	Highest  uint64 // the largest token accepted for Name once it was decided
}

// Resource is an in-memory write target fenced by a [fence.Guard]. The
// zero value is ready to use; it is safe for concurrent use.
type Resource struct {
	guard fence.Guard
	mu    sync.Mutex
	log   []Write
}

// Write accepts data for name if token is at least the largest token
// accepted for name so far, and returns a *fence.StaleError otherwise.
func (r *Resource) Write(name string, token uint64, data string) error {
	err := r.guard.Do(context.Background(), name, token, func() error {
		r.record(Write{Name: name, Token: token, Data: data, Accepted: true, Highest: token})
		return nil
	})
	if se := (*fence.StaleError)(nil); errors.As(err, &se) {
		r.record(Write{Name: name, Token: token, Data: data, Highest: se.Highest})
	}
	return err
}

func (r *Resource) record(w Write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w.Seq = len(r.log)
	r.log = append(r.log, w)
}

// Log returns every write decided so far, in order.
func (r *Resource) Log() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// ServeHTTP takes POST /write?name=N&data=D with the writer's token in the
// Fencing-Token header: 204 if accepted, 409 if the token is stale (see
// fence.Refuse). It lets other processes write to the resource.
func (r *Resource) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/write" {
		http.Error(w, "want POST /write", http.StatusNotFound)
		return
	}
	token, err := fence.TokenOf(req)
	if err == nil && req.URL.Query().Get("name") == "" {
		err = errors.New("want a name")
	}
	if err == nil {
		err = r.Write(req.URL.Query().Get("name"), token, req.URL.Query().Get("data"))
	}
	if err != nil {
		fence.Refuse(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Post writes to a Resource served over HTTP at base (http://host:port).
// It returns a *fence.StaleError if the resource refused the token.
func Post(ctx context.Context, c *http.Client, base, name string, token uint64, data string) error {
	q := url.Values{"name": {name}, "data": {data}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/write?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	fence.SetToken(req.Header, token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if err := fence.ResponseError(resp, token); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("fenced: %s", resp.Status)
	}
	return nil
}
