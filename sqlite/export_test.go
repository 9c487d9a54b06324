package sqlite

// Test hooks.

// SetBootID makes s act as if the machine were in boot id.
func SetBootID(s *Store, id string) { s.db.boot = id }

// ParseURL is parseURL.
var ParseURL = parseURL

// Path is the cleaned path of s's file.
func (s *Store) Path() string { return s.db.path }

// Watching reports whether this process runs a file-system watcher for
// the database file at path.
func Watching(path string) bool {
	registryMu.Lock()
	sh := registry[path]
	registryMu.Unlock()
	if sh == nil {
		return false
	}
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	return sh.watcher != nil
}

// SetBoot makes the stores opened until restore runs act as if the
// machine were in boot id.
func SetBoot(id string) (restore func()) {
	old := bootID
	bootID = func() (string, error) { return id, nil }
	return func() { bootID = old }
}
