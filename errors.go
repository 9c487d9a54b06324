package baton

import (
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/baton-go/baton/driver"
)

var (
	// ErrLocked is returned by TryLock when the lock is held (or waited
	// for) by others.
	ErrLocked = errors.New("baton: lock is held")
	// ErrNotHeld is returned when renewing or (strictly) releasing a hold
	// that is no longer held: it expired, or was released or taken over.
	ErrNotHeld = errors.New("baton: lock is not held")
	// ErrLeaseLost is a lease's Err once it may have been lost: it was not
	// renewed before its deadline, or the store no longer had it.
	ErrLeaseLost = errors.New("baton: lease may be lost")
	// ErrExpired is a lease's Err once its TTL ran out without keepalive.
	ErrExpired = errors.New("baton: lease TTL expired")
	// ErrReleased is a lease's Err once it was released.
	ErrReleased = errors.New("baton: lease released")
	// ErrClosed is returned by a Client after Close.
	ErrClosed = errors.New("baton: client is closed")
	// ErrModeConflict is returned when an owner that holds a name asks for
	// it again in another mode or with another limit.
	ErrModeConflict = errors.New("baton: owner already holds this lock in another mode")
	// ErrLimitConflict is returned for a shared lock or semaphore request
	// whose limit is not the one the current shared holders took the
	// lock with (LockOptions.Limit: 0 for a plain shared lock): granting
	// it would exceed someone's limit.
	ErrLimitConflict = errors.New("baton: lock is held with another limit")
	// ErrNoLeader is returned by Election.Leader when nobody leads.
	ErrNoLeader = errors.New("baton: no leader")
	// ErrNotLeader is returned by Election.Proclaim when not leading.
	ErrNotLeader = errors.New("baton: not the leader")
	// ErrInvalid is wrapped by every error about bad input.
	ErrInvalid = errors.New("baton: invalid argument")
	// ErrUnknownStore is returned by Open for a URL whose scheme no
	// imported store registered.
	ErrUnknownStore = errors.New("baton: unknown store")
)

// errLate is a grant that reached the client after its TTL had run out.
var errLate = fmt.Errorf("%w: the store's answer took longer than the TTL", ErrLeaseLost)

// Limits on input, the same for every store.
const (
	MaxNameLen  = 255  // bytes
	MaxOwnerLen = 128  // bytes
	MaxMetaLen  = 4096 // bytes, keys and values together
	MinTTL      = 10 * time.Millisecond
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// CheckName reports whether name is a valid lock name: printable UTF-8 of
// 1 to MaxNameLen bytes. Stores escape names themselves, so "a/b", "../x"
// or "'; DROP" are fine. Client methods check names; this is for stores'
// own entry points and for tools.
func CheckName(name string) error { return checkName(name) }

func checkName(name string) error {
	switch {
	case name == "":
		return invalid("lock name is empty")
	case len(name) > MaxNameLen:
		return invalid("lock name %.40q… is %d bytes, longer than %d", name, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return invalid("lock name %q is not valid UTF-8", name)
	}
	if r, ok := unprintable(name); ok {
		return invalid("lock name %q has a control or non-printing character %U", name, r)
	}
	return nil
}

// unprintable returns the first control or non-printing character of s
// (spaces are fine).
func unprintable(s string) (rune, bool) {
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return r, true
		}
	}
	return 0, false
}

// printable reports whether s is UTF-8 without control or non-printing
// characters.
func printable(s string) bool {
	_, bad := unprintable(s)
	return utf8.ValidString(s) && !bad
}

func checkOwner(owner string) error {
	switch {
	case owner == "":
		return invalid("owner is empty")
	case len(owner) > MaxOwnerLen:
		return invalid("owner %.40q… is %d bytes, longer than %d", owner, len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return invalid("owner %q is not valid UTF-8", owner)
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return invalid("owner %q has a space, control or non-printing character %U", owner, r)
		}
	}
	return nil
}

func checkTTL(what string, ttl time.Duration) error {
	if ttl < MinTTL {
		return invalid("%s %v is below the minimum of %v", what, ttl, MinTTL)
	}
	return nil
}

func checkMeta(meta map[string]string) error {
	n := 0
	for k, v := range meta {
		if k == "" {
			return invalid("metadata key is empty")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return invalid("metadata %q is not valid UTF-8", k)
		}
		n += len(k) + len(v)
	}
	if n > MaxMetaLen {
		return invalid("metadata is %d bytes, more than %d", n, MaxMetaLen)
	}
	return nil
}

// storeErr maps driver errors to baton's and names the operation: baton's
// own errors read "baton: lock is held: lock \"x\"", others
// "baton: lock \"x\": <the store's error>".
func storeErr(op, name string, err error) error {
	switch {
	case errors.Is(err, driver.ErrModeConflict):
		err = ErrModeConflict
	case errors.Is(err, driver.ErrLimitConflict):
		err = ErrLimitConflict
	case errors.Is(err, driver.ErrNotGranted):
		err = ErrLocked
	}
	for _, s := range [...]error{ErrLocked, ErrModeConflict, ErrLimitConflict, ErrNotHeld, ErrClosed, ErrLeaseLost} {
		if err == s {
			return fmt.Errorf("%w: %s %q", err, op, name)
		}
	}
	return fmt.Errorf("baton: %s %q: %w", op, name, err)
}
