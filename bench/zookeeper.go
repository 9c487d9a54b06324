package main

// ZooKeeper peer, for -target zk-lock=host:port[,host:port…]:
//
//	zk-lock  github.com/go-zookeeper/zk's zk.NewLock (the lock recipe of
//	         ZooKeeper's documentation), one go-zookeeper connection per
//	         client, locks under /bench-zk-lock.
//
// zk.Lock takes no context: a Lock here cannot be cancelled. It leaves its
// lock's parent nodes behind; Close deletes the empty ones it used.
// baton=zk://host:port needs no kind of its own: importing the store
// registers its URL scheme.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	_ "github.com/baton-go/baton/zookeeper"
)

func init() {
	kinds["zk-lock"] = zkLockTarget
}

const zkLockRoot = "/bench-zk-lock"

func zkLockTarget(servers string) Target {
	return Target{Name: "zk-lock", New: func(ctx context.Context) (Locker, error) {
		conn, events, err := zk.Connect(strings.Split(servers, ","), 10*time.Second, zk.WithLogInfo(false))
		if err != nil {
			return nil, err
		}
		for conn.State() != zk.StateHasSession {
			select {
			case <-events:
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				conn.Close()
				return nil, ctx.Err()
			}
		}
		return &zkLocker{conn: conn, events: events, used: map[string]bool{}}, nil
	}}
}

type zkLocker struct {
	conn   *zk.Conn
	events <-chan zk.Event
	mu     sync.Mutex
	used   map[string]bool
}

func (z *zkLocker) Lock(ctx context.Context, name string) (func() error, error) {
	p := zkLockRoot + "/" + name
	z.mu.Lock()
	z.used[p] = true
	z.mu.Unlock()
	l := zk.NewLock(z.conn, p, zk.WorldACL(zk.PermAll))
	if err := l.Lock(); err != nil {
		return nil, fmt.Errorf("zk.Lock %s: %w", p, err)
	}
	return l.Unlock, nil
}

func (z *zkLocker) Close() error {
	for p := range z.used {
		for ; p != zkLockRoot && p != "/"; p = p[:strings.LastIndexByte(p, '/')] {
			if err := z.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				break // still in use
			}
		}
	}
	z.conn.Close()
	for range z.events {
	}
	return nil
}
