// Package fence is the resource's side of a baton lock: it refuses writes
// from holders whose lease has ended, by their fencing tokens.
//
// A lock alone cannot stop a holder that was paused (a long GC pause, a
// SIGSTOP, a VM migration) past its lease: when it resumes it may still
// believe it holds the lock and write, while another holder has been
// granted the name. Every baton grant carries a fencing token larger than
// the token of every earlier grant of the name. A resource that keeps the
// largest token it has admitted for a name, and refuses smaller ones
// atomically with the write itself, turns that late write into an error
// instead of a corrupted resource.
//
// The kit admits tokens where the resource lives:
//   - [Guard]: inside one program (a map, a file, a device);
//   - [Admit] with a [Table]: in a SQL transaction (PostgreSQL through
//     database/sql or pgx, MySQL, SQLite), before the transaction's writes;
//   - [Guard.Middleware], [SetToken], [TokenOf], [Refuse] and
//     [ResponseError]: over HTTP, the holder sending its token in the
//     Fencing-Token header;
//   - in Redis, the redis store's SetFenced.
//
// Tokens of different lock names are not comparable: fence each resource by
// the name of the lock that guards it. A token equal to the largest admitted
// is admitted again, so that one holder can write many times under one
// grant. A resource must keep its fence as long as the lock name is used:
// a fence that is forgotten admits the next stale token.
package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStale is the error for a token smaller than one already admitted for
// its name. Errors of this package that refuse a token wrap it, as
// [*StaleError] values.
var ErrStale = errors.New("fence: stale fencing token")

// StaleError says which token was refused and which one made it stale.
type StaleError struct {
	Name    string // the name fenced; empty if the refusal did not say
	Token   uint64 // the token refused
	Highest uint64 // the largest token admitted for Name
}

func (e *StaleError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("fence: stale fencing token %d: %d was admitted", e.Token, e.Highest)
	}
	return fmt.Sprintf("fence: stale fencing token %d for %q: %d was admitted", e.Token, e.Name, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Guard fences resources inside one program. The zero value is ready to
// use; it is safe for concurrent use. It keeps one small entry per name
// it has seen, for its whole life.
type Guard struct {
	mu    sync.Mutex
	names map[string]*entry
}

type entry struct {
	turn    chan struct{} // holds one value while a call on the name runs
	highest uint64        // guarded by turn
}

func (g *Guard) entry(name string) *entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.names == nil {
		g.names = map[string]*entry{}
	}
	e := g.names[name]
	if e == nil {
		e = &entry{turn: make(chan struct{}, 1)}
		g.names[name] = e
	}
	return e
}

// Do admits token for name and runs fn, or returns a [*StaleError]
// without running fn if a larger token was admitted before. Calls for one
// name run one at a time, so that no stale holder writes between a newer
// holder's admission and its write; Do waits for its turn as long as ctx
// allows. The token stays admitted even if fn fails: its holder has shown
// that the older ones are stale.
func (g *Guard) Do(ctx context.Context, name string, token uint64, fn func() error) error {
	e := g.entry(name)
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-e.turn }()
	if token < e.highest {
		return &StaleError{Name: name, Token: token, Highest: e.highest}
	}
	e.highest = token
	if fn == nil {
		return nil
	}
	return fn()
}

// Admit admits token for name, as Do with nothing to run: for a resource
// whose writes cannot run inside Do, it refuses stale holders from now on
// but cannot stop one that was admitted before and writes later.
func (g *Guard) Admit(ctx context.Context, name string, token uint64) error {
	return g.Do(ctx, name, token, nil)
}

// Highest returns the largest token admitted for name, 0 if none. It waits
// for a call on name that is running.
func (g *Guard) Highest(ctx context.Context, name string) (uint64, error) {
	e := g.entry(name)
	select {
	case e.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
	defer func() { <-e.turn }()
	return e.highest, nil
}
