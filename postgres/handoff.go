package postgres

import (
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton/driver"
)

// The server hands a lock over: the call that lets a queued request in (a
// release, or an acquire or renewal that drops expired entries) grants it
// and names the hold in its notification (wake in schema.sql). The
// waiter's next Acquire takes that hold without a call of its own when the
// mark of its last refused attempt proves it may (driver.ServerMark.Proves:
// the hold lasts lockstate.HandOffExtra longer than its TTL for that);
// otherwise it asks, and the server finds the owner holding the name and
// extends the hold.

// handedHold is a hold the server handed over to a waiter of this process.
type handedHold struct {
	token            uint64
	created, expires time.Time
	mode             driver.Mode
	limit            int
}

// maxRemembered bounds the marks and handed holds a hub keeps; beyond it,
// they are forgotten at once (a forgotten waiter asks the server).
const maxRemembered = 10000

// setHanded notes the hold a notification line handed to owner ("token
// created expires mode limit"). h.mu is held.
func (h *hub) setHanded(name, owner, hold string) {
	f := strings.Fields(hold)
	if len(f) != 5 {
		return
	}
	token, err1 := strconv.ParseUint(f[0], 10, 64)
	created, err2 := strconv.ParseInt(f[1], 10, 64)
	expires, err3 := strconv.ParseInt(f[2], 10, 64)
	mode, err4 := strconv.Atoi(f[3])
	limit, err5 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		return
	}
	if h.handed == nil || len(h.handed) >= maxRemembered {
		h.handed = map[string]handedHold{}
	}
	h.handed[name+"\n"+owner] = handedHold{token: token, created: time.UnixMicro(created), expires: time.UnixMicro(expires),
		mode: driver.Mode(mode), limit: limit}
}

// setMark notes the mark of req's refused attempt, or with a zero mark
// that req was granted.
func (h *hub) setMark(req *driver.Request, m driver.ServerMark) {
	k := req.Name + "\n" + req.Owner
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case m.Server.IsZero():
		delete(h.marks, k)
		delete(h.handed, k)
	case h.marks == nil || len(h.marks) >= maxRemembered:
		h.marks = map[string]driver.ServerMark{k: m}
	default:
		h.marks[k] = m
	}
}

// asked reports whether req's owner was refused on req's name and has not
// been granted it since: it waits in the queue.
func (h *hub) asked(req *driver.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.marks[req.Name+"\n"+req.Owner]
	return ok
}

// forget drops the marks and handed holds of keys.
func (h *hub) forget(keys []driver.Key) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.marks) == 0 && len(h.handed) == 0 {
		return
	}
	for _, k := range keys {
		delete(h.marks, k.Name+"\n"+k.Owner)
		delete(h.handed, k.Name+"\n"+k.Owner)
	}
}

// handedGrant returns the hold handed over to req's owner, if its mark
// proves that baton may count it as a lease of req.TTL from now on.
func (h *hub) handedGrant(req *driver.Request, now time.Time) *driver.Grant {
	k := req.Name + "\n" + req.Owner
	h.mu.Lock()
	e, ok := h.handed[k]
	m := h.marks[k]
	if ok {
		delete(h.handed, k)
		delete(h.marks, k)
	}
	h.mu.Unlock()
	if !ok || e.mode != req.Mode || e.limit != req.Limit || !m.Proves(e.created, e.expires, req.TTL, now) {
		return nil
	}
	return &driver.Grant{Token: e.token, Created: e.created, Renewed: e.created, Expires: e.expires}
}
