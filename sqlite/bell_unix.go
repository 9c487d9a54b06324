//go:build unix

package sqlite

import (
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ownBell is a process's own doorbell for a database file: a FIFO named
// FILE-wake-ID that the process keeps open for reading while any of its
// Stores or Watches of the file is open. Another process that commits a
// change letting in a request this process queued writes a byte to it (see
// ringBells): the waiters of the other processes are not woken. Nobody
// reads the FIFO's bytes for their value; one read wakes every waiter of
// the process, however many rings it gathers.
type ownBell struct {
	id   string
	path string
	f    *os.File
	done chan struct{} // closed when the reader exits
}

// makeBell creates the FIFO under a temporary name, opens it, and only then
// gives it its name, so that a ring never finds it without a reader (which
// would take it for a dead process's: see ringBells). It first removes the
// FIFOs of processes that are gone. heard is called after each read.
func makeBell(dbPath string, heard func()) (*ownBell, error) {
	removeDeadBells(dbPath)
	mode := uint32(0o644)
	if fi, err := os.Stat(dbPath); err == nil {
		mode = uint32(fi.Mode().Perm())
	}
	id := strings.ToLower(rand.Text())
	path := dbPath + "-wake-" + id
	tmp := path + ".new"
	if err := unix.Mkfifo(tmp, mode); err != nil {
		return nil, err
	}
	os.Chmod(tmp, os.FileMode(mode)) // past the umask, as the file's own
	// Read and write: the reader never sees the end of the file when the
	// last writer closes.
	f, err := os.OpenFile(tmp, os.O_RDWR|unix.O_NONBLOCK, 0)
	if err != nil {
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	b := &ownBell{id: id, path: path, f: f, done: make(chan struct{})}
	go func() {
		defer close(b.done)
		buf := make([]byte, 512)
		for {
			if _, err := f.Read(buf); err != nil {
				if errors.Is(err, os.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond) // not expected; do not spin
			}
			heard()
		}
	}()
	return b, nil
}

// close stops the reader and removes the FIFO.
func (b *ownBell) close() {
	b.f.Close()
	<-b.done
	os.Remove(b.path)
}

// ringBells writes a byte to the doorbells of the processes with ids. A
// doorbell nobody reads belongs to a process that died: it is removed.
// What is not a FIFO is not written to.
func ringBells(dbPath string, ids []string) {
	for _, id := range ids {
		if !validBellID(id) {
			continue
		}
		path := dbPath + "-wake-" + id
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENXIO) {
			removeIfFIFO(path)
			continue
		}
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			unix.Write(fd, []byte{1}) // a full pipe already rings
		}
		unix.Close(fd)
	}
}

// removeDeadBells removes the doorbells of dbPath that nobody reads, and
// temporary ones older than a minute: what processes that died left.
func removeDeadBells(dbPath string) {
	dir, prefix := filepath.Dir(dbPath), filepath.Base(dbPath)+"-wake-"
	es, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range es {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || e.Type()&os.ModeNamedPipe == 0 {
			continue
		}
		path := filepath.Join(dir, name)
		if id, ok := strings.CutSuffix(name[len(prefix):], ".new"); ok {
			if fi, err := e.Info(); err == nil && validBellID(id) && time.Since(fi.ModTime()) > time.Minute {
				os.Remove(path)
			}
			continue
		}
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENXIO) {
			removeIfFIFO(path)
		} else if err == nil {
			unix.Close(fd)
		}
	}
}

// validBellID reports whether id is a doorbell's id as makeBell makes
// them, and so safe in a path: a record's doorbells may have been
// written by anyone who can write the file.
func validBellID(id string) bool {
	if len(id) != 26 {
		return false
	}
	for _, c := range id {
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

func removeIfFIFO(path string) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeNamedPipe != 0 {
		os.Remove(path)
	}
}
