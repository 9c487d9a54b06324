package elastic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/records"
)

// DefaultIndex is the lock index used when Options.Index is empty.
const DefaultIndex = "baton-locks"

// DefaultClockStep is used when Options.ClockStep is zero: the default
// thread_pool.estimated_time_interval of Elasticsearch and OpenSearch
// (200ms), by which their cached clock may lag, plus a margin.
const DefaultClockStep = 250 * time.Millisecond

// IndexBody is the body of the request that creates the lock index (PUT
// /<index>), for those who create it themselves (Options.NoCreateIndex).
const IndexBody = indexBody

// Options configure a Store. The zero value works.
type Options struct {
	// Index is the lock index (DefaultIndex if empty): lowercase letters,
	// digits, '.', '_' and '-', starting with a letter or digit, at most 255
	// bytes. Stores with different indexes are independent.
	Index string
	// NoCreateIndex stops the store from creating the index on first use;
	// create it yourself with IndexBody. Without the index, a cluster that
	// creates indexes automatically would create one with dynamic mappings.
	NoCreateIndex bool
	// ClockStep bounds how far the cluster's cached clock (ctx._now in
	// update scripts) lags the real time: thread_pool.estimated_time_interval
	// plus a margin for a busy node. DefaultClockStep if zero. Holds expire
	// in the index ClockStep after their TTL, counted from the server's
	// cached clock; a takeover comes up to twice ClockStep after a hold's
	// TTL ran out.
	ClockStep time.Duration
}

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("elastic: %w", driver.ErrClosed)

var indexName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,254}$`)

// Store is a lock store in one index of an Elasticsearch or OpenSearch
// cluster. It is safe for concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	*records.Store
	d *docs
}

// docs are the lock documents of one index: the records the Store works on.
type docs struct {
	tr     Transport
	owned  *HTTPTransport // made by Open: Close closes its idle connections
	index  string
	create bool
	step   int64 // ms

	clk clock

	ensureMu sync.Mutex
	ensured  bool

	closed atomic.Bool
}

// New returns a store that sends its requests through tr: an
// *opensearch.Client, an *elasticsearch.Client or an *HTTPTransport. The
// caller keeps tr: Close leaves it as it is. Nothing is sent before the
// first call; the index is created then unless opts.NoCreateIndex is set.
func New(tr Transport, opts *Options) (*Store, error) {
	if tr == nil {
		return nil, errors.New("elastic: New needs a Transport")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Index == "" {
		o.Index = DefaultIndex
	}
	if !indexName.MatchString(o.Index) || o.Index == "." || o.Index == ".." {
		return nil, fmt.Errorf("elastic: invalid index name %q (want lowercase letters, digits, '.', '_' and '-', starting with a letter or digit, at most 255 bytes)", o.Index)
	}
	switch {
	case o.ClockStep == 0:
		o.ClockStep = DefaultClockStep
	case o.ClockStep < 0:
		return nil, fmt.Errorf("elastic: negative ClockStep %v", o.ClockStep)
	}
	d := &docs{tr: tr, index: o.Index, create: !o.NoCreateIndex, step: ceilMs(o.ClockStep)}
	return &Store{Store: records.New(d, &records.Options{Poll: maxWatchPoll}), d: d}, nil
}

// Index returns the name of the store's lock index.
func (s *Store) Index() string { return s.d.index }

// Close marks the store closed and, for a store made by Open, closes the
// idle connections of its HTTP client. The store starts no goroutines.
func (s *docs) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.owned != nil {
		s.owned.CloseIdleConnections()
	}
	return nil
}

func (s *docs) check() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// --- HTTP ----------------------------------------------------------------

// APIError is an error the cluster answered with.
type APIError struct {
	Status int    // HTTP status
	Type   string // e.g. version_conflict_engine_exception
	Reason string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("elastic: %s: %s (HTTP %d)", e.Type, e.Reason, e.Status)
}

const maxResponse = 64 << 20

// do sends one request and returns the status and body of the answer.
func (s *docs) do(ctx context.Context, method, path string, q url.Values, body []byte, ctype string) (int, []byte, error) {
	target := path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("elastic: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.tr.Perform(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0, nil, fmt.Errorf("elastic: %s %s: %w", method, path, ctx.Err())
		}
		return 0, nil, fmt.Errorf("elastic: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return 0, nil, fmt.Errorf("elastic: %s %s: reading the answer: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// apiError decodes an error answer.
func apiError(status int, b []byte) *APIError {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	e := &APIError{Status: status, Type: "error"}
	if json.Unmarshal(b, &r) == nil && len(r.Error) > 0 {
		var d struct{ Type, Reason string }
		if json.Unmarshal(r.Error, &d) == nil && d.Type != "" {
			e.Type, e.Reason = d.Type, d.Reason
			return e
		}
		e.Reason = strings.Trim(string(r.Error), `"`)
		return e
	}
	e.Reason = strings.TrimSpace(string(b[:min(len(b), 200)]))
	return e
}

func (s *docs) docPath(op, id string) string {
	return "/" + s.index + "/" + op + "/" + url.PathEscape(id)
}

// ensure creates the index (unless told not to) and reads the server's
// clock, once per store.
func (s *docs) ensure(ctx context.Context) error {
	if err := s.check(); err != nil {
		return err
	}
	s.ensureMu.Lock()
	defer s.ensureMu.Unlock()
	if s.ensured {
		return nil
	}
	if s.create {
		st, b, err := s.do(ctx, http.MethodPut, "/"+s.index, nil, []byte(indexBody), "application/json")
		if err != nil {
			return err
		}
		if st >= 300 {
			if e := apiError(st, b); e.Type != "resource_already_exists_exception" {
				return fmt.Errorf("creating index %s: %w", s.index, e)
			}
		}
	}
	if err := s.syncClock(ctx); err != nil {
		return err
	}
	s.ensured = true
	return nil
}

// syncClock reads the server's clock with an update that changes nothing
// (once the document "clock", which no lock name maps to, exists: a noop
// upsert would not report the script's clock).
func (s *docs) syncClock(ctx context.Context) error {
	body, _ := json.Marshal(map[string]any{
		"scripted_upsert": true, "upsert": map[string]any{},
		"script": map[string]any{"lang": "painless", "source": "ctx._source.now = ctx._now; if (ctx.op != 'create') { ctx.op = 'none'; }"},
	})
	st, b, err := s.do(ctx, http.MethodPost, s.docPath("_update", "clock"), url.Values{"_source_includes": {"now"}}, body, "application/json")
	if err != nil {
		return err
	}
	if st >= 300 {
		return fmt.Errorf("reading the server's clock: %w", apiError(st, b))
	}
	var r updateReply
	if err := json.Unmarshal(b, &r); err != nil || r.Get.Source.Now == 0 {
		return fmt.Errorf("elastic: reading the server's clock: unexpected answer %.200s", b)
	}
	s.clk.observe(r.Get.Source.Now, time.Now(), true)
	return nil
}

// get reads the document of id, in real time (no refresh needed).
func (s *docs) get(ctx context.Context, id string) (d *document, seq, term int64, err error) {
	st, b, err := s.do(ctx, http.MethodGet, s.docPath("_doc", id), nil, nil, "")
	if err != nil {
		return nil, 0, 0, err
	}
	if st == http.StatusNotFound {
		return nil, 0, 0, nil // no document, or no index yet
	}
	if st >= 300 {
		return nil, 0, 0, apiError(st, b)
	}
	var r struct {
		Found  bool      `json:"found"`
		SeqNo  int64     `json:"_seq_no"`
		Term   int64     `json:"_primary_term"`
		Source *document `json:"_source"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, 0, 0, fmt.Errorf("elastic: decoding lock document %s: %w", id, err)
	}
	if !r.Found || r.Source == nil {
		return nil, 0, 0, nil
	}
	return r.Source, r.SeqNo, r.Term, nil
}

type updateReply struct {
	Result string `json:"result"`
	Get    struct {
		Source struct {
			Now  int64  `json:"now"`
			Noop string `json:"noop"`
		} `json:"_source"`
	} `json:"get"`
}

// write outcomes
const (
	written = iota
	conflict
	clockBehind
)

// write replaces the document of id with d if it is still as read (seq,
// term), or creates it if it was absent, and drops expired entries only if
// the server's clock has reached after. It returns the outcome and the
// server's clock.
func (s *docs) write(ctx context.Context, id string, absent bool, seq, term int64, d *document, after int64) (int, int64, error) {
	req := map[string]any{
		"script": map[string]any{"lang": "painless", "source": updateScript, "params": map[string]any{
			"absent": absent, "after": after, "step": s.step, "doc": d,
		}},
	}
	q := url.Values{"_source_includes": {"now,noop"}}
	if absent {
		req["scripted_upsert"], req["upsert"] = true, map[string]any{}
	} else {
		q.Set("if_seq_no", strconv.FormatInt(seq, 10))
		q.Set("if_primary_term", strconv.FormatInt(term, 10))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return 0, 0, fmt.Errorf("elastic: %w", err)
	}
	st, b, err := s.do(ctx, http.MethodPost, s.docPath("_update", id), q, body, "application/json")
	if err != nil {
		return 0, 0, err
	}
	switch {
	case st == http.StatusConflict:
		return conflict, 0, nil
	case st == http.StatusNotFound && apiError(st, b).Type == "document_missing_exception":
		return conflict, 0, nil // deleted since read
	case st >= 300:
		return 0, 0, apiError(st, b)
	}
	var r updateReply
	if err := json.Unmarshal(b, &r); err != nil || r.Get.Source.Now == 0 {
		return 0, 0, fmt.Errorf("elastic: unexpected answer to an update: %.200s", b)
	}
	now := r.Get.Source.Now
	switch {
	case r.Result != "noop":
		s.clk.observe(now, time.Now(), false)
		return written, now, nil
	case r.Get.Source.Noop == "clock":
		s.clk.observe(now, time.Now(), true)
		return clockBehind, now, nil
	case r.Get.Source.Noop == "exists":
		return conflict, now, nil
	}
	return 0, 0, fmt.Errorf("elastic: unexpected noop: %.200s", b)
}

const maxAttempts = 64

// apply reads the state of name, lets fn change it at the store's time, and
// writes it back only if no one changed it since (if_seq_no and
// if_primary_term, or create-if-absent); a conflict reads and tries again.
// It returns the time fn was given and, when it wrote, the server-clock
// time (ms) the script stamped fresh times with (0 if it did not write).
// fn's error is returned as is, after the write.
func (s *docs) apply(ctx context.Context, name string, fn func(st *lockstate.State, now time.Time) error) (time.Time, int64, error) {
	if err := s.ensure(ctx); err != nil {
		return time.Time{}, 0, err
	}
	id := docID(name)
	forced := int64(-1)
	for attempt := 0; ; attempt++ {
		if attempt >= maxAttempts {
			return time.Time{}, 0, fmt.Errorf("elastic: lock %q: gave up after %d conflicting writes", name, attempt)
		}
		if attempt > 2 {
			if err := driver.Sleep(ctx, time.Duration(rand.Int64N(int64(min(attempt, 20))*int64(time.Millisecond)))); err != nil {
				return time.Time{}, 0, err
			}
		}
		d, seq, term, err := s.get(ctx, id)
		if err != nil {
			return time.Time{}, 0, err
		}
		st := &lockstate.State{}
		low := s.clk.low()
		if d != nil {
			if d.Name != name {
				return time.Time{}, 0, fmt.Errorf("elastic: document %s of index %s holds lock %q, not %q", id, s.index, d.Name, name)
			}
			st = d.state()
			low = max(low, d.Now) // the last write's clock is behind the server's
		}
		if forced >= 0 {
			low, forced = forced, -1
		}
		// Never a whole millisecond, so that times read from the index
		// (whole milliseconds) never equal it: see toDocument.
		now := time.UnixMilli(low).Add(time.Nanosecond)
		var after int64
		for _, es := range [][]lockstate.Entry{st.Holders, st.Queue} {
			for _, e := range es {
				if !now.Before(e.Expires) {
					after = max(after, e.Expires.UnixMilli())
				}
			}
		}
		ferr := fn(st, now)
		if !st.Dirty {
			return now, 0, ferr
		}
		out, srv, err := s.write(ctx, id, d == nil, seq, term, toDocument(name, st, now), after)
		if err != nil {
			return time.Time{}, 0, err
		}
		switch out {
		case written:
			return now, srv + s.step, ferr
		case clockBehind:
			forced = srv // decide again by the server's clock as it is
		}
	}
}

// --- the server's clock ----------------------------------------------------

// clock estimates the server's cached clock from the answers it stamped:
// low() is a lower bound of the server's clock now, as long as the local
// monotonic clock does not run faster than the server's. The estimate only
// guides decisions made in Go; the update script checks them against
// ctx._now itself.
type clock struct {
	mu sync.Mutex
	ok bool
	c  int64     // server ms
	at time.Time // local time (monotonic) when c was received
}

func (k *clock) observe(c int64, at time.Time, reset bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	// Keep the sample that implies the later server time.
	if reset || !k.ok || c-k.c > at.Sub(k.at).Milliseconds() {
		k.ok, k.c, k.at = true, c, at
	}
}

func (k *clock) low() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.ok {
		return time.Now().UnixMilli() // a guess, until ensure reads the clock
	}
	return k.c + time.Since(k.at).Milliseconds()
}

// --- records.Records ------------------------------------------------------

// The times a decision gives its entries (equal to its now) are stamped by
// the update script with the server's clock: maxWatchPoll is the longest
// pause of a waiter that polls the document.
const maxWatchPoll = 100 * time.Millisecond

// Update implements records.Records: per name, one GET and, when the state
// changes, one conditional update; then the times the decision set are
// those the script stamped.
func (s *docs) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	if err := s.check(); err != nil {
		return err
	}
	for i, name := range names {
		var st *lockstate.State
		now, up, err := s.apply(ctx, name, func(x *lockstate.State, now time.Time) error {
			st = x
			return fn(i, x, now)
		})
		if err != nil {
			return err
		}
		if up > 0 {
			fix(st, now, up)
		}
	}
	return nil
}

// listTime is the time listings judge what is left of holds by: an upper
// bound of the server's clock, as the times written are (see updateScript).
func (s *docs) listTime() time.Time { return time.UnixMilli(s.clk.low() + s.step) }

// Scan implements records.Records. A name reads that one document; a
// prefix refreshes the index and searches it, so that it sees every write
// acknowledged before it started.
func (s *docs) Scan(ctx context.Context, name, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	if err := s.ensure(ctx); err != nil {
		return err
	}
	var ds []*document
	if name != "" {
		d, _, _, err := s.get(ctx, docID(name))
		if err != nil {
			return err
		}
		if d != nil && d.Name == name {
			ds = append(ds, d)
		}
	} else {
		var err error
		if ds, err = s.search(ctx, prefix); err != nil {
			return err
		}
	}
	now := s.listTime()
	for _, d := range ds {
		if strings.HasPrefix(d.Name, prefix) && !fn(d.Name, d.state(), now) {
			break
		}
	}
	return nil
}

// search refreshes the index and returns the documents that have holders or
// waiters and whose name starts with prefix, in name order.
func (s *docs) search(ctx context.Context, prefix string) ([]*document, error) {
	st, b, err := s.do(ctx, http.MethodPost, "/"+s.index+"/_refresh", nil, nil, "")
	if err != nil {
		return nil, err
	}
	if st == http.StatusNotFound {
		return nil, nil
	}
	if st >= 300 {
		return nil, apiError(st, b)
	}
	filter := []any{map[string]any{"exists": map[string]any{"field": "owners"}}}
	if prefix != "" {
		filter = append(filter, map[string]any{"prefix": map[string]any{"name": prefix}})
	}
	var docs []*document
	var last []any
	for {
		q := map[string]any{
			"size": 500, "sort": []any{map[string]any{"name": "asc"}},
			"query": map[string]any{"bool": map[string]any{"filter": filter}},
		}
		if last != nil {
			q["search_after"] = last
		}
		body, _ := json.Marshal(q)
		st, b, err := s.do(ctx, http.MethodPost, "/"+s.index+"/_search", nil, body, "application/json")
		if err != nil {
			return nil, err
		}
		if st >= 300 {
			return nil, apiError(st, b)
		}
		var r struct {
			Hits struct {
				Hits []struct {
					Source *document `json:"_source"`
					Sort   []any     `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("elastic: decoding search results: %w", err)
		}
		for _, h := range r.Hits.Hits {
			if h.Source != nil {
				docs = append(docs, h.Source)
			}
		}
		if len(r.Hits.Hits) < 500 {
			return docs, nil
		}
		last = r.Hits.Hits[len(r.Hits.Hits)-1].Sort
	}
}
