package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/baton-go/baton/driver"
)

// shared is what the Stores and Watches of this process that use one
// database file have in common: the broadcast that wakes waiters, the
// file-system watcher that turns other processes' commits into broadcasts,
// and the semaphore that lets this process's writers take turns without
// going through SQLite's busy handler.
type shared struct {
	path string // cleaned absolute path of the database file
	key  string // its key in registry
	refs int    // Stores and Watches using it; guarded by registryMu

	// write admits one write transaction of this process at a time.
	write chan struct{}

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change

	bellMu sync.Mutex
	bell   *os.File // FILE-wake, opened on the first ring

	wmu      sync.Mutex // guards the fields below
	watcher  *fsnotify.Watcher
	loopDone chan struct{} // closed when the watcher's goroutine exits

	ownMu  sync.Mutex // guards the fields below
	own    *ownBell   // this process's doorbell, made on its first queued request
	ownErr error      // why it could not be made: waiters then follow the common one
	// queued are, by name, the owners of the queue entries this process
	// last wrote with its own doorbell: their waiters need not follow the
	// common one.
	queued map[string]map[string]bool

	heard atomic.Int64 // wake-ups from other processes, for tests
}

var (
	registryMu sync.Mutex
	registry   = map[string]*shared{}
	// apart is added to the keys of the shared states made while a test
	// sets it, so that their Stores act as another process's would.
	apart string
)

// acquireShared returns the shared state of path, creating it if needed,
// and counts one more user of it.
func acquireShared(path string) *shared {
	registryMu.Lock()
	defer registryMu.Unlock()
	key := path + apart
	sh := registry[key]
	if sh == nil {
		sh = &shared{path: path, key: key, write: make(chan struct{}, 1), changed: make(chan struct{})}
		registry[key] = sh
	}
	sh.refs++
	return sh
}

// release counts one user fewer and forgets sh with its last user.
func (sh *shared) release() {
	registryMu.Lock()
	defer registryMu.Unlock()
	if sh.refs--; sh.refs == 0 {
		delete(registry, sh.key)
		sh.stopWatch()
		sh.ownMu.Lock()
		if sh.own != nil {
			sh.own.close()
			sh.own = nil
		}
		sh.ownMu.Unlock()
		sh.bellMu.Lock()
		if sh.bell != nil {
			sh.bell.Close()
			sh.bell = nil
		}
		sh.bellMu.Unlock()
	}
}

// ring tells waiters of other processes that a commit changed a lock, by
// writing one byte to FILE-wake (which they watch). It is called after the
// commit returned, so a waiter woken by it reads the new state. Failing to
// ring only costs those waiters a poll.
func (sh *shared) ring() {
	sh.bellMu.Lock()
	defer sh.bellMu.Unlock()
	if sh.bell == nil {
		f, err := sh.openBell()
		if err != nil {
			return
		}
		sh.bell = f
	}
	sh.bell.WriteAt([]byte{1}, 0)
}

func (sh *shared) bellPath() string { return sh.path + "-wake" }

// bellIs reports whether the doorbell's path names the file fi describes.
func (sh *shared) bellIs(fi os.FileInfo) bool {
	now, err := os.Stat(sh.bellPath())
	return err == nil && fi != nil && os.SameFile(fi, now)
}

// openBell opens the doorbell for writing, creating it if need be with the
// database file's permissions: whoever may write the database may ring.
func (sh *shared) openBell() (*os.File, error) {
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(sh.path); err == nil {
		mode = fi.Mode().Perm()
	}
	return os.OpenFile(sh.bellPath(), os.O_WRONLY|os.O_CREATE, mode)
}

// lockWrite waits for this process's turn to write, or for ctx to end.
func (sh *shared) lockWrite(ctx context.Context) error {
	select {
	case sh.write <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (sh *shared) unlockWrite() { <-sh.write }

// broadcast wakes every Watch of the file.
func (sh *shared) broadcast() {
	sh.mu.Lock()
	close(sh.changed)
	sh.changed = make(chan struct{})
	sh.mu.Unlock()
}

// generation returns the channel that the next broadcast closes.
func (sh *shared) generation() <-chan struct{} {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.changed
}

// watchTarget is what the file-system watcher observes, and whether an
// event names the doorbell. It is the doorbell itself, created if need
// be: watching the directory would wake the watcher for every write of
// every process to the database's journal too, several per commit. On
// Linux, where inotify reports the writes to a directory's files, it is
// the directory when the doorbell cannot be created; elsewhere watching a
// directory (kqueue) opens every file in it, so it is the doorbell even
// then.
func (sh *shared) watchTarget() (string, func(string) bool) {
	bell := sh.bellPath()
	f, err := sh.openBell()
	if err == nil {
		f.Close()
	}
	if err != nil && runtime.GOOS == "linux" {
		return filepath.Dir(sh.path), func(name string) bool { return filepath.Clean(name) == bell }
	}
	return bell, func(string) bool { return true }
}

// startWatch starts the file-system watcher, with the first Watch of the
// process on this file. It then runs until the file's last Store or Watch
// of this process is gone (see release): stopping it takes milliseconds,
// too long to pay at the end of every wait. A watcher that cannot be set
// up is not an error: Watches then see this process's commits only, and
// baton's fallback poll the others'.
func (sh *shared) startWatch() {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if sh.watcher != nil {
		return
	}
	target, match := sh.watchTarget()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return
	}
	if err := w.Add(target); err != nil {
		w.Close()
		return
	}
	sh.watcher, sh.loopDone = w, make(chan struct{})
	go sh.loop(w, target, match, sh.loopDone)
}

// stopWatch stops the watcher, if it runs.
func (sh *shared) stopWatch() {
	sh.wmu.Lock()
	defer sh.wmu.Unlock()
	if sh.watcher == nil {
		return
	}
	sh.watcher.Close()
	<-sh.loopDone
	sh.watcher, sh.loopDone = nil, nil
}

func (sh *shared) loop(w *fsnotify.Watcher, target string, match func(string) bool, done chan struct{}) {
	defer close(done)
	watched, _ := os.Stat(target)
	for {
		select {
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create) != 0 && match(ev.Name) {
				sh.heard.Add(1)
				sh.broadcast()
			}
			if ev.Op&(fsnotify.Remove|fsnotify.Rename|fsnotify.Chmod) != 0 && target == sh.bellPath() && !sh.bellIs(watched) {
				// The doorbell was removed (an unlink shows as a change of
				// its attributes while a process keeps it open): watch the
				// new one, or the directory. A ring may have been missed.
				w.Remove(target)
				target, match = sh.watchTarget()
				w.Add(target)
				watched, _ = os.Stat(target)
				sh.broadcast()
			}
		case _, ok := <-w.Errors:
			if !ok {
				return
			}
			// An error (a queue overflow, say) may hide an event.
			sh.broadcast()
		}
	}
}

// Notify implements records.Notifier: a change is any commit to the
// database file, seen at once for this process's commits and through the
// common doorbell file (see ring) for other processes'. Notifications are
// not filtered by lock name, so some wake-ups are spurious.
func (d *db) Notify(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return d.notify(ctx, true)
}

// NotifyRequest implements records.RequestNotifier: a waiter whose request
// this process queued with its own doorbell is woken by this process's
// commits and by the rings of its doorbell, which other processes ring
// when they let the request in (see keepBells); any other waiter by every
// commit, as by Notify. Notifications are not filtered by lock name or
// request, so some wake-ups are spurious.
func (d *db) NotifyRequest(ctx context.Context, req *driver.Request) (<-chan struct{}, func(), error) {
	return d.notify(ctx, !d.sh.queuedHere(req.Name, req.Owner))
}

func (d *db) notify(ctx context.Context, common bool) (<-chan struct{}, func(), error) {
	if err := d.checkOpen(); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	registryMu.Lock()
	d.sh.refs++
	registryMu.Unlock()
	ch := d.sh.generation()
	if common {
		d.sh.startWatch()
	}
	var once sync.Once
	return ch, func() { once.Do(d.sh.release) }, nil
}

// queuedHere reports whether this process last wrote the queue entry of
// owner for name, with its own doorbell.
func (sh *shared) queuedHere(name, owner string) bool {
	sh.ownMu.Lock()
	defer sh.ownMu.Unlock()
	return sh.queued[name][owner]
}

// maxQueued bounds the names queuedHere remembers; past it they are
// forgotten, and the waiters of the forgotten follow the common doorbell.
const maxQueued = 10000

// keepBells keeps r's doorbells for the commit about to write it, at now
// (the time of the commit's changes), and returns out with the doorbells
// to ring once it is written:
//   - a queue entry written in this commit (queued or refreshed: renewed
//     at now) is this process's, and gets its own doorbell (made if need
//     be), or none if it has none;
//   - doorbells of entries that left are dropped;
//   - the requests the commit lets in (those lockstate.Promote would
//     grant) are told, through their processes' doorbells.
//
// This process's own waiters are woken by the commit itself.
func (sh *shared) keepBells(name string, r *record, now time.Time, out []string) []string {
	sh.ownMu.Lock()
	defer sh.ownMu.Unlock()
	if len(r.Queue) == 0 {
		r.Bells = nil
		delete(sh.queued, name)
		return out
	}
	live := make(map[string]bool, len(r.Queue))
	for _, q := range r.Queue {
		live[q.Owner] = true
		if !q.Renewed.Equal(now) {
			continue
		}
		if sh.own == nil && sh.ownErr == nil {
			sh.own, sh.ownErr = makeBell(sh.path, func() {
				sh.heard.Add(1)
				sh.broadcast()
			})
		}
		if sh.own == nil {
			delete(r.Bells, q.Owner)
			continue
		}
		if r.Bells == nil {
			r.Bells = map[string]string{}
		}
		r.Bells[q.Owner] = sh.own.id
		if sh.queued[name] == nil {
			if sh.queued == nil || len(sh.queued) >= maxQueued {
				sh.queued = map[string]map[string]bool{}
			}
			sh.queued[name] = map[string]bool{}
		}
		sh.queued[name][q.Owner] = true
	}
	for o := range r.Bells {
		if !live[o] {
			delete(r.Bells, o)
		}
	}
	if len(r.Bells) == 0 {
		r.Bells = nil
	}
	for o := range sh.queued[name] {
		if !live[o] {
			delete(sh.queued[name], o)
		}
	}
	if len(sh.queued[name]) == 0 {
		delete(sh.queued, name)
	}
	if len(r.Bells) > 0 {
		for _, o := range r.State.Clone().Promote(name, now) {
			if id := r.Bells[o]; id != "" && (sh.own == nil || id != sh.own.id) {
				out = append(out, id)
			}
		}
	}
	return out
}
