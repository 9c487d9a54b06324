package elastic

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/baton-go/baton/driver"
)

// Watch implements driver.Waiter by polling the name's document version
// (a GET without its source) from 2ms, backing off to 100ms, and waking the
// waiter as soon as it changes: a release is seen within a few
// milliseconds, at the cost of a small request per waiter per poll, instead
// of baton's backoff up to Options.MaxPoll.
func (s *Store) Watch(ctx context.Context, req *driver.Request) (driver.Watch, error) {
	w := &watch{s: s, id: docID(req.Name)}
	var err error
	w.seq, w.term, err = s.version(ctx, w.id)
	return w, err
}

type watch struct {
	s         *Store
	id        string
	seq, term int64
}

const (
	minWatchPoll = 2 * time.Millisecond
	maxWatchPoll = 100 * time.Millisecond
)

// Wait returns once the document changed since the last change seen (or
// since Watch), or when ctx ends.
func (w *watch) Wait(ctx context.Context) error {
	for d := minWatchPoll; ; d = min(d*3/2, maxWatchPoll) {
		if err := sleep(ctx, d); err != nil {
			return err
		}
		seq, term, err := w.s.version(ctx, w.id)
		if err != nil {
			return nil // a spurious wake-up: the attempt will report the error
		}
		if seq != w.seq || term != w.term {
			w.seq, w.term = seq, term
			return nil
		}
	}
}

func (w *watch) Close() error { return nil }

// version reads the sequence number and primary term of a document (-1, -1
// when absent).
func (s *Store) version(ctx context.Context, id string) (int64, int64, error) {
	if err := s.check(); err != nil {
		return 0, 0, err
	}
	st, b, err := s.do(ctx, http.MethodGet, s.docPath("_doc", id), url.Values{"_source": {"false"}}, nil, "")
	if err != nil {
		return 0, 0, err
	}
	if st == http.StatusNotFound {
		return -1, -1, nil
	}
	if st >= 300 {
		return 0, 0, apiError(st, b)
	}
	var r struct {
		Found bool  `json:"found"`
		SeqNo int64 `json:"_seq_no"`
		Term  int64 `json:"_primary_term"`
	}
	if err := json.Unmarshal(b, &r); err != nil || !r.Found {
		return -1, -1, err
	}
	return r.SeqNo, r.Term, nil
}
