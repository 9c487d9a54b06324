package redis

import "github.com/redis/go-redis/v9"

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
