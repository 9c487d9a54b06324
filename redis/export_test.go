package redis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/driver"
)

// ParseURL exposes parseURL to the tests.
func ParseURL(rawURL string, opts *Options) (*redis.Options, *Options, error) {
	return parseURL(rawURL, opts)
}

// StateKey, CounterKey and Mailbox name the keys of a lock.
func (s *Store) StateKey(name string) string       { return s.stateKey(name) }
func (s *Store) CounterKey(name string) string     { return s.base(name) + "c" }
func (s *Store) QueueKey(name string) string       { return s.base(name) + "q" }
func (s *Store) Mailbox(name, owner string) string { return s.base(name) + "w:" + owner }
func Slot(key string) int                          { return slot(key) }

// Faulty is a store with the test hook drivertest looks for
// (drivertest.Partitioner): a partition fails its session renewals.
type Faulty struct{ *Store }

func (f Faulty) SetPartitioned(down bool) { f.Store.partitioned.Store(down) }

// AcquireIn runs the acquire script for req in session sid ("" for none)
// and says whether the hold is bound to it.
func (s *Store) AcquireIn(ctx context.Context, req *driver.Request, sid string) (*driver.Grant, bool, error) {
	in, err := encodeInfo(req.Host, req.Meta)
	if err != nil {
		return nil, false, err
	}
	return s.acquire(ctx, req, in, sid)
}

// SessionKey is the key of session id.
func (s *Store) SessionKey(id string) string { return s.sessionKey(id) }

// SessionCounts returns what the client saw the server count of session
// id: bindings and unbindings.
func (s *Store) SessionCounts(id string) (binds, unbinds int64) {
	s.mu.Lock()
	c := s.counted[id]
	s.mu.Unlock()
	if c == nil {
		return -1, -1
	}
	return c.binds.Load(), c.unbinds.Load()
}

// FakeClock makes every script read the server's time plus the
// microseconds that key holds, until the test ends.
func FakeClock(t testing.TB, key string) {
	t.Helper()
	vars := map[string]**redis.Script{
		"acquire": &acquireScript, "renew": &renewScript, "release": &releaseScript, "list": &listScript,
		"purge": &purgeScript, "poke": &pokeScript, "session": &sessionScript,
	}
	const old = "return t[1] * 1000000 + t[2]"
	for name, v := range vars {
		src := luaSource(name)
		if !strings.Contains(src, old) {
			t.Fatalf("script %s: no %q to fake", name, old)
		}
		prev := *v
		*v = redis.NewScript(strings.Replace(src, old, old+" + (tonumber(redis.call('GET', '"+key+"')) or 0)", 1))
		t.Cleanup(func() { *v = prev })
	}
}

// SlowSessionRelease makes s's ReleaseSession pause for d after its first
// call, as a long one would.
func SlowSessionRelease(s *Store, d time.Duration) { s.releasePause = d }

// DeleteKeys deletes every key whose prefix starts with prefix (tests'
// stores of prefixes of their own included), counters included.
func DeleteKeys(u, prefix string) error {
	o, err := redis.ParseURL(u)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(o)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Unlink(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}
