package spanner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/spanner"
	"google.golang.org/api/option"
	"google.golang.org/grpc/codes"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/driver/lockstate"
	"github.com/baton-go/baton/driver/records"
)

func init() {
	baton.Register("spanner", func(ctx context.Context, u *url.URL) (driver.Store, error) {
		return Open(ctx, u.String(), nil)
	})
}

// DefaultTable is the table used when Options.Table is empty.
const DefaultTable = "baton_locks"

// Options configure a Store. The zero value works.
type Options struct {
	// Table names the lock table (DefaultTable if empty): a letter, then
	// up to 127 letters, digits or underscores.
	Table string
	// Create makes Open create the table (with the statement from DDL) if
	// it does not exist. New ignores it: use CreateTable.
	Create bool
	// Poll is the longest pause between two reads of a waiting Lock
	// (DefaultPoll if zero); see Store.Watch.
	Poll time.Duration
	// ClientOptions make the clients Open and CreateTable create
	// (credentials, endpoint; SPANNER_EMULATOR_HOST is honoured).
	ClientOptions []option.ClientOption
}

// checkOptions returns opts with defaults filled in, or an error naming
// what is wrong.
func checkOptions(opts *Options) (Options, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	return o, checkTable(o.Table)
}

// resolveURL returns the database path of rawURL (a spanner:// URL or a
// database path) and opts filled in from the URL's options and defaults.
func resolveURL(rawURL string, opts *Options) (string, Options, error) {
	db := rawURL
	if u, err := url.Parse(rawURL); err == nil && u.Scheme == "spanner" {
		d, fromURL, err := parseURL(u)
		if err != nil {
			return "", Options{}, err
		}
		db, opts = d, driver.FillZero(opts, fromURL)
	}
	if err := checkDatabase(db); err != nil {
		return "", Options{}, err
	}
	o, err := checkOptions(opts)
	return db, o, err
}

// DefaultPoll is used when Options.Poll is zero.
const DefaultPoll = 25 * time.Millisecond

// ErrClosed is returned by a Store's methods after Close.
var ErrClosed = fmt.Errorf("spanner: %w", driver.ErrClosed)

// Store is a lock table in one Cloud Spanner database. It is safe for
// concurrent use.
//
// The methods that implement driver.Store (Acquire, Renew, Release, List,
// Purge, and Watch where the store wakes waiters) are its contract with
// baton's Client, not an application API: use the store through
// baton.New.
type Store struct {
	*records.Store
	t *table
}

// table is the lock table: the records the Store works on.
type table struct {
	client *spanner.Client
	owned  bool
	table  string
	closed atomic.Bool

	mu      sync.Mutex
	clockTS time.Time // the latest commit timestamp this store saw
	clockAt time.Time // when it saw it, on the local monotonic clock
}

// How far the store's clock may be extrapolated from the last commit
// timestamp seen (see the package documentation), and at what rate.
const (
	clockMaxAge = 10 * time.Second
	clockRate   = 0.99
)

// New returns a store over client, whose options (credentials, endpoint,
// session pool) are the caller's; the caller also owns it: Close leaves it
// open. The table must exist (see DDL and CreateTable).
func New(client *spanner.Client, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("spanner: client is nil")
	}
	o, err := checkOptions(opts)
	if err != nil {
		return nil, err
	}
	t := &table{client: client, table: o.Table}
	return &Store{Store: records.New(t, &records.Options{Poll: o.Poll}), t: t}, nil
}

// Open connects to the database of rawURL (a spanner:// URL, see the
// package documentation, or a database path
// projects/P/instances/I/databases/D) with a client of its own, made with
// opts.ClientOptions, creates the table if opts.Create is set (see
// [CreateTable]), and checks that the table can be written. Options given
// in the URL apply where opts leaves the field zero. Close closes the
// client.
func Open(ctx context.Context, rawURL string, opts *Options) (*Store, error) {
	db, o, err := resolveURL(rawURL, opts)
	if err != nil {
		return nil, err
	}
	if o.Create {
		if err := createTable(ctx, db, o); err != nil {
			return nil, err
		}
	}
	client, err := spanner.NewClient(ctx, db, o.ClientOptions...)
	if err != nil {
		return nil, fmt.Errorf("spanner: %w", err)
	}
	s, _ := New(client, &o)
	s.t.owned = true
	if err := s.t.refreshClock(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return s, nil
}

// parseURL reads spanner://projects/P/instances/I/databases/D?table=T&create=true.
func parseURL(u *url.URL) (string, *Options, error) {
	db := strings.Trim(u.Host+u.Path, "/")
	if u.User != nil || u.Fragment != "" {
		return "", nil, fmt.Errorf("spanner: URL %q: want spanner://projects/P/instances/I/databases/D[?table=T&create=true]", u.Redacted())
	}
	if err := checkDatabase(db); err != nil {
		return "", nil, err
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", nil, fmt.Errorf("spanner: URL options: %v", err)
	}
	o := &Options{}
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "table":
			if err := checkTable(v); err != nil {
				return "", nil, err
			}
			o.Table = v
		case "poll":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return "", nil, fmt.Errorf("spanner: URL option poll=%q: want a positive Go duration such as 25ms", v)
			}
			o.Poll = d
		case "create":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return "", nil, fmt.Errorf("spanner: URL option create=%q: want true or false", v)
			}
			o.Create = b
		default:
			return "", nil, fmt.Errorf("spanner: unknown URL option %q (known: table, create, poll)", k)
		}
	}
	return db, o, nil
}

// Close closes the client if the store opened it.
func (s *table) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if s.owned {
		s.client.Close()
	}
	return nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.t.table }

// observe takes a commit timestamp, seen now, as the store's clock if it
// is later than the clock's own estimate.
func (s *table) observe(ts time.Time) {
	if ts.IsZero() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.clockAt.IsZero() || ts.After(s.estimate()) {
		s.clockTS, s.clockAt = ts, time.Now()
	}
}

// estimate is a lower bound of the store's clock: the last commit
// timestamp seen, which was in the past when it was seen (Spanner's commit
// wait), plus 99% of the time since then by the local monotonic clock.
// Caller holds mu.
func (s *table) estimate() time.Time {
	return s.clockTS.Add(time.Duration(float64(time.Since(s.clockAt)) * clockRate))
}

// now is the time decisions are made with: the clock's estimate, or the
// latest stamp read if later (a commit in the past too).
func (s *table) now(stamps map[string]*name) time.Time {
	s.mu.Lock()
	t := s.estimate()
	s.mu.Unlock()
	for _, x := range stamps {
		if x.stamp.After(t) {
			t = x.stamp
		}
	}
	return t
}

// ensureClock refreshes the clock when it is unknown or old.
func (s *table) ensureClock(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	s.mu.Lock()
	fresh := !s.clockAt.IsZero() && time.Since(s.clockAt) < clockMaxAge
	s.mu.Unlock()
	if fresh {
		return nil
	}
	return s.refreshClock(ctx)
}

// refreshClock commits a write to the clock row (name "") for its commit
// timestamp.
func (s *table) refreshClock(ctx context.Context) error {
	ts, err := s.client.Apply(ctx, []*spanner.Mutation{
		spanner.InsertOrUpdate(s.table, []string{"name", "stamp"}, []any{"", spanner.CommitTimestamp}),
	})
	if err != nil {
		return s.wrap(err)
	}
	s.observe(ts)
	return nil
}

// wrap adds a hint to errors that mean the table is missing.
func (s *table) wrap(err error) error {
	if spanner.ErrCode(err) == codes.NotFound && strings.Contains(strings.ToLower(err.Error()), "table") {
		return fmt.Errorf("spanner: table %s not found (create it with the statement from DDL, or Options.Create): %w", s.table, err)
	}
	return fmt.Errorf("spanner: %w", err)
}

// maxAttempts bounds the tries of a transaction that the emulator keeps
// refusing (see retryable).
const maxAttempts = 100

// Update implements records.Records: one read-write transaction reads
// the rows of names, fn decides on each, and the changed names are written
// with the commit timestamp; Spanner's locks serialize the transactions (a
// write that conflicts with another aborts, and the client runs the
// transaction again from the read). The times fn set (equal to its now)
// and the tokens of its new grants then become the commit's: see resolve.
func (s *table) Update(ctx context.Context, names []string, fn func(int, *lockstate.State, time.Time) error) error {
	if err := s.ensureClock(ctx); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		var xs []*name
		resp, err := s.client.ReadWriteTransactionWithOptions(ctx, func(ctx context.Context, tx *spanner.ReadWriteTransaction) error {
			got := map[string]*name{}
			if err := tx.Read(ctx, s.table, namesOf(names), cols).Do(func(r *spanner.Row) error { return readRow(r, got) }); err != nil {
				return err
			}
			// Not a whole microsecond, so that it never equals a time read
			// (commit timestamps are whole microseconds): the times fn sets
			// are told from the others by it (see touched).
			now := s.now(got).Truncate(time.Microsecond).Add(time.Nanosecond)
			xs = make([]*name, len(names))
			var ms []*spanner.Mutation
			for i, n := range names {
				x := got[n]
				if x == nil {
					x = &name{name: n}
				}
				xs[i] = x
				seq := x.rec.Seq
				if err := fn(i, &x.rec.State, now); err != nil {
					return err
				}
				if !x.rec.Dirty {
					continue
				}
				x.touched(now, seq)
				m, err := x.mutation(s.table)
				if err != nil {
					return err
				}
				ms = append(ms, m)
			}
			if len(ms) == 0 {
				return nil
			}
			return tx.BufferWrite(ms)
		}, spanner.TransactionOptions{TransactionTag: "baton"})
		if err == nil {
			s.observe(resp.CommitTs)
			for _, x := range xs {
				resolve(&x.rec, resp.CommitTs)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("spanner: %w", context.Cause(ctx))
		}
		if !retryable(err) || attempt >= maxAttempts {
			return s.wrap(err)
		}
		// Lost a race on the emulator: try again after a short random
		// pause, so that racers spread out.
		t := time.NewTimer(time.Duration(rand.Int64N(int64(min(attempt, 8)) * int64(time.Millisecond))))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// retryable reports whether a failed transaction lost a race on the
// emulator, which runs one read-write transaction at a time and answers
// the others with these errors where real Spanner aborts them (and the
// client retries aborted transactions itself). On real Spanner the same
// errors mean the transaction is gone and nothing of it was committed, so
// running it again from the read is safe there too.
func retryable(err error) bool {
	code := spanner.ErrCode(err)
	if code != codes.FailedPrecondition && code != codes.NotFound && code != codes.Aborted {
		return false
	}
	msg := err.Error()
	for _, m := range emulatorRaces {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// emulatorRaces are the emulator's messages for a transaction that lost a
// race with another.
var emulatorRaces = []string{
	"Transaction not found",
	"Invalid transaction ID",
	"Cannot read or query using a transaction after it has been committed",
	"Transaction was aborted",
}

// namesOf selects the rows of the given lock names.
func namesOf(ns []string) spanner.KeySet {
	ns = slices.Compact(slices.Sorted(slices.Values(ns)))
	ks := make([]spanner.KeySet, len(ns))
	for i, n := range ns {
		ks[i] = keyRange(n)
	}
	return spanner.KeySets(ks...)
}

// read reads the current rows of keys outside any transaction (a strong
// read).
func (s *table) read(ctx context.Context, keys spanner.KeySet) (map[string]*name, error) {
	names := map[string]*name{}
	err := s.client.Single().Read(ctx, s.table, keys, cols).Do(func(r *spanner.Row) error { return readRow(r, names) })
	if err != nil {
		return nil, s.wrap(err)
	}
	return names, nil
}

// Scan implements records.Records: one strong read (of the name, or of
// the prefix's key range, the whole table for none).
func (s *table) Scan(ctx context.Context, n, prefix string, fn func(string, *lockstate.State, time.Time) bool) error {
	if err := s.ensureClock(ctx); err != nil {
		return err
	}
	keys := prefixKeys(prefix)
	if n != "" {
		keys = spanner.KeySets(keyRange(n))
	}
	got, err := s.read(ctx, keys)
	if err != nil {
		return err
	}
	now := s.now(got)
	for _, nm := range slices.Sorted(maps.Keys(got)) {
		if (n == "" || nm == n) && strings.HasPrefix(nm, prefix) && !fn(nm, &got[nm].rec.State, now) {
			break
		}
	}
	return nil
}
