// Package fenced is a write target that refuses stale fencing tokens: what
// a resource protected by a baton lock should do.
//
// A lock alone cannot stop a holder that was paused (a long GC pause, a
// SIGSTOP, a VM migration) past its lease: when it resumes it may still
// believe it holds the lock, and act, while another holder has been
// granted it. Every baton grant carries a fencing token, larger than the
// token of every earlier grant of the name. A resource that remembers the
// highest token it has accepted for a name, and refuses any write with a
// smaller one, turns that late write into a rejected request instead of a
// corrupted resource:
//
//	lease, err := client.Lock(ctx, "invoice-42", nil)
//	...
//	err = store.Write("invoice-42", lease.Token(), data) // refused if stale
//
// The resource must check and record the token atomically with the write
// itself (one transaction, one compare-and-set, one mutex), as [Resource]
// does. A token equal to the highest is accepted, so that one holder can
// write many times under one grant.
//
// baton's fault harness (package faultcheck) runs a Resource and checks
// its log: it is the judge of "no two exclusive holders at once".
package fenced

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
)

// ErrStale is returned for a write whose token is smaller than the highest
// token already accepted for its name.
var ErrStale = errors.New("fenced: stale fencing token")

// Write is one write request, as the resource decided it.
type Write struct {
	Seq      int    // position in the resource's log, from 0
	Name     string // what is written to (a lock name, a row, a file)
	Token    uint64 // the writer's fencing token
	Data     string
	Accepted bool
	Highest  uint64 // the highest token accepted for Name when it was decided
}

// Resource is an in-memory write target guarded by fencing tokens. The
// zero value is ready to use; it is safe for concurrent use.
type Resource struct {
	mu      sync.Mutex
	highest map[string]uint64
	log     []Write
}

// Write accepts data for name if token is at least the highest token
// accepted for name so far, and returns ErrStale otherwise. Check and
// write happen under one lock: that is the whole point.
func (r *Resource) Write(name string, token uint64, data string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.highest == nil {
		r.highest = map[string]uint64{}
	}
	h := r.highest[name]
	w := Write{Seq: len(r.log), Name: name, Token: token, Data: data, Highest: h, Accepted: token >= h}
	r.log = append(r.log, w)
	if !w.Accepted {
		return fmt.Errorf("%w: %d < %d for %q", ErrStale, token, h, name)
	}
	r.highest[name] = token
	return nil
}

// Log returns every write decided so far, in order.
func (r *Resource) Log() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

// ServeHTTP takes POST /write?name=N&token=T&data=D: 204 if accepted, 409
// if the token is stale. It lets other processes write to the resource.
func (r *Resource) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/write" {
		http.Error(w, "want POST /write", http.StatusNotFound)
		return
	}
	q := req.URL.Query()
	token, err := strconv.ParseUint(q.Get("token"), 10, 64)
	if err != nil || q.Get("name") == "" {
		http.Error(w, "want name and a numeric token", http.StatusBadRequest)
		return
	}
	if err := r.Write(q.Get("name"), token, q.Get("data")); err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Post writes to a Resource served over HTTP at base (http://host:port).
// It returns ErrStale if the resource refused the token.
func Post(ctx context.Context, c *http.Client, base, name string, token uint64, data string) error {
	q := url.Values{"name": {name}, "token": {strconv.FormatUint(token, 10)}, "data": {data}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/write?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusConflict:
		return ErrStale
	}
	return fmt.Errorf("fenced: %s", resp.Status)
}
