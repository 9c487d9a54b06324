package main

// NATS peer, for -target nats-kv=nats://HOST:PORT:
//
//	nats-kv  the bare JetStream key-value lock that NATS users write by
//	         hand (github.com/nats-io/nats.go jetstream): Create of the
//	         name's key to acquire (retried 1 ms apart while it exists),
//	         Delete to release; no TTL, no fencing token, no queue. It is
//	         the floor of a lock on NATS: one write to take, one to give.
//
// baton=nats://… needs no kind of its own: importing the store registers
// its URL schemes.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	_ "github.com/baton-go/baton/nats"
)

func init() {
	kinds["nats-kv"] = natsKVTarget
}

const natsKVBucket = "bench-nats-kv"

func natsKVTarget(url string) Target {
	url, _, _ = strings.Cut(strings.TrimPrefix(url, "nats://"), "/")
	return Target{Name: "nats-kv", New: func(ctx context.Context) (Locker, error) {
		nc, err := natsgo.Connect("nats://" + url)
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err == nil {
			var kv jetstream.KeyValue
			kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: natsKVBucket, History: 1, Storage: jetstream.FileStorage})
			if err == nil {
				return &natsKVLocker{nc: nc, kv: kv}, nil
			}
		}
		nc.Close()
		return nil, err
	}}
}

type natsKVLocker struct {
	nc *natsgo.Conn
	kv jetstream.KeyValue
}

func (l *natsKVLocker) Lock(ctx context.Context, name string) (func() error, error) {
	key := strings.NewReplacer("/", "_", " ", "_").Replace(name)
	for {
		rev, err := l.kv.Create(ctx, key, []byte("held"))
		if err == nil {
			return func() error {
				return l.kv.Delete(context.WithoutCancel(ctx), key, jetstream.LastRevision(rev))
			}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("nats-kv: %w", err)
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l *natsKVLocker) Close() error { l.nc.Close(); return nil }
