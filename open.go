package baton

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/baton-go/baton/driver"
	"github.com/baton-go/baton/mem"
)

// Opener opens a store from its URL. Stores register one with Register.
type Opener func(ctx context.Context, u *url.URL) (driver.Store, error)

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes a store available to Open under a URL scheme. Store
// packages call it from init; it panics if the scheme is taken, as
// database/sql.Register does.
func Register(scheme string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	scheme = strings.ToLower(scheme)
	if _, dup := openers[scheme]; dup || open == nil {
		panic("baton: Register called twice, or with a nil opener, for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes returns the URL schemes of the stores this program can open,
// sorted (database/sql's Drivers).
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	known := make([]string, 0, len(openers))
	for s := range openers {
		known = append(known, s)
	}
	slices.Sort(known)
	return known
}

func init() {
	Register("mem", func(_ context.Context, u *url.URL) (driver.Store, error) {
		return mem.OpenURL(u)
	})
}

// Open opens the store named by rawURL (mem://, sqlite:///path/file.db,
// postgres://…) and returns a Client over it. The store's package must be
// imported for its scheme to be known, e.g.
//
//	import _ "github.com/baton-go/baton/sqlite"
func Open(ctx context.Context, rawURL string, opts *Options) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, invalid("store URL: %v", err)
	}
	if u.Scheme == "" {
		return nil, invalid("store URL %q has no scheme (want e.g. sqlite:///path/file.db or mem://)", rawURL)
	}
	openersMu.RLock()
	open := openers[strings.ToLower(u.Scheme)]
	openersMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("%w %q in %q: known schemes are %s (import a store's package to add its scheme)",
			ErrUnknownStore, u.Scheme, u.Redacted(), strings.Join(Schemes(), ", "))
	}
	st, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("baton: open %s: %w", u.Redacted(), err)
	}
	c, err := New(st, opts)
	if err != nil {
		st.Close()
		return nil, err
	}
	return c, nil
}
