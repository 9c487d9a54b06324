package baton

import (
	"time"

	"github.com/baton-go/baton/driver"
)

// Mode is the kind of a hold: Exclusive or Shared.
type Mode uint8

const (
	// Exclusive holds exclude every other hold of the name.
	Exclusive = Mode(driver.Exclusive)
	// Shared holds coexist with other shared holds (up to their limit, for
	// a semaphore), never with an exclusive one.
	Shared = Mode(driver.Shared)
)

func (m Mode) String() string { return driver.Mode(m).String() }

// LockInfo describes a hold, or with Queued a waiting request, as the store
// reports it.
type LockInfo struct {
	Name   string
	Owner  string // the owner the hold was granted to, or that waits
	Mode   Mode
	Limit  int    // the semaphore limit it was taken with (0: none)
	Token  uint64 // the fencing token; 0 for a waiting request
	Queued bool   // a waiting request, not a hold
	Host   string // the holder's Options.Host
	Meta   map[string]string
	TTL    time.Duration // the lease length (or a waiting request's queue TTL)
	// Created is when the owner was granted the hold (or asked, for a
	// waiting request), Renewed when it was last renewed, and Expires when
	// it expires unless renewed: the store's clock. Expires is zero for a
	// hold that lives as long as a store session (etcd, ZooKeeper).
	Created, Renewed, Expires time.Time
	// Left is the time it had left when listed, by the store's clock; zero
	// or below means expired.
	Left time.Duration
}

// Filter selects locks for Status; zero fields select everything.
type Filter struct {
	Name   string // exactly this lock
	Prefix string // locks whose names start with this
	Owner  string // holds (and waits) of this owner
	// CreatedBefore and CreatedAfter select by the time of the grant.
	CreatedBefore, CreatedAfter time.Time
	LeftBelow                   time.Duration // only holds with less than this left (0: any)
	LeftAtLeast                 time.Duration // only holds with at least this left (0: any)
	Queued                      bool          // include waiting requests
	Expired                     bool          // include holds that expired but were not purged
}

func infoOf(h driver.Holder) LockInfo {
	return LockInfo{
		Name: h.Name, Owner: h.Owner, Mode: Mode(h.Mode), Limit: h.Limit, Token: h.Token, Queued: h.Queued,
		Host: h.Host, Meta: h.Meta, TTL: h.TTL, Created: h.Created, Renewed: h.Renewed, Expires: h.Expires, Left: h.Left,
	}
}

func infosOf(hs []driver.Holder) []LockInfo {
	out := make([]LockInfo, len(hs))
	for i, h := range hs {
		out[i] = infoOf(h)
	}
	return out
}

func (f *Filter) driver() *driver.Filter {
	return &driver.Filter{
		Name: f.Name, Prefix: f.Prefix, Owner: f.Owner, CreatedBefore: f.CreatedBefore, CreatedAfter: f.CreatedAfter,
		LeftBelow: f.LeftBelow, LeftAtLeast: f.LeftAtLeast, Queued: f.Queued, Expired: f.Expired,
	}
}
