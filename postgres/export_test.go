package postgres

import "net/url"

// DropSQL drops every object of a lock table (tests use fresh tables).
func DropSQL(schema, table string) string {
	o := newObjects(schema, table)
	return "DROP TABLE IF EXISTS " + o.holds + ", " + o.counter + ";" +
		"DROP FUNCTION IF EXISTS " + o.acquire + ", " + o.renew + ", " + o.release + ", " +
		o.list + ", " + o.purge + ", " + o.wake + ", " + o.bind + ";"
}

// Listens is how many times the store's listener has started listening.
func Listens(s *Store) int {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	return s.hub.listens
}

// ParseURL exposes parseURL.
func ParseURL(u *url.URL) (string, *Options, error) { return parseURL(u) }
