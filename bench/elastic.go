package main

// Elasticsearch/OpenSearch peer, for -target KIND=http://host:9200:
//
//	es-distributed-lock  github.com/graup/es-distributed-lock v0.0.3 (the
//	                     newest tag) over its olivere/elastic v6 client,
//	                     sniffing off; Acquire with a 15 s TTL, retried
//	                     1 ms apart while "held by other client"; Release
//	                     (a delete-by-query with refresh=true).
//
// The library writes with mapping types (/index/lock/id/_update), which
// Elasticsearch 8 and OpenSearch 2 removed: against them every Acquire
// fails, and this target reports the server's error. It also judges
// expiry by comparing its own clock with the one of the machine that took
// the lock. baton=opensearch://host:9200 needs no kind of its own:
// importing the store registers its URL schemes.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	lock "github.com/graup/es-distributed-lock"
	"github.com/olivere/elastic"

	_ "github.com/baton-go/baton/elastic"
)

func init() {
	kinds["es-distributed-lock"] = func(url string) Target { return esLockTarget(url) }
}

func esLockTarget(url string) Target {
	return Target{Name: "es-distributed-lock", New: func(ctx context.Context) (Locker, error) {
		c, err := elastic.NewClient(elastic.SetURL(url), elastic.SetSniff(false), elastic.SetHealthcheck(false))
		if err != nil {
			return nil, err
		}
		return &esLocker{c: c}, nil
	}}
}

type esLocker struct{ c *elastic.Client }

func (e *esLocker) Lock(ctx context.Context, name string) (func() error, error) {
	for {
		l := lock.NewLock(e.c, name).WithOwner(fmt.Sprintf("%p-%d", e, time.Now().UnixNano()))
		err := l.Acquire(ctx, 15*time.Second)
		if err == nil {
			return l.MustRelease, nil
		}
		if ctx.Err() != nil || !strings.Contains(err.Error(), "held by other client") {
			return nil, fmt.Errorf("es-distributed-lock: %w", err)
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		}
	}
}

func (e *esLocker) Close() error { e.c.Stop(); return nil }
