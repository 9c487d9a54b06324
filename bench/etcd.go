package main

// etcd peer, for -target etcd-mutex=HOST:PORT[,HOST:PORT…] (an etcd://
// prefix is accepted too):
//
//	etcd-mutex  go.etcd.io/etcd/client/v3/concurrency: NewSession (default
//	            60 s TTL) and NewMutex, each client with its own clientv3
//	            client and session.
//
// baton=etcd://… needs no kind of its own: importing the store registers
// its URL schemes.

import (
	"context"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	_ "github.com/baton-go/baton/etcd"
)

func init() {
	kinds["etcd-mutex"] = etcdMutexTarget
}

func etcdMutexTarget(url string) Target {
	url = strings.TrimPrefix(url, "etcd://")
	url, _, _ = strings.Cut(url, "/")
	return Target{Name: "etcd-mutex", New: func(ctx context.Context) (Locker, error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(url, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, err
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithContext(ctx))
		if err != nil {
			cli.Close()
			return nil, err
		}
		return &etcdMutexLocker{cli: cli, sess: sess}, nil
	}}
}

type etcdMutexLocker struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func (l *etcdMutexLocker) Lock(ctx context.Context, name string) (func() error, error) {
	m := concurrency.NewMutex(l.sess, "/bench-etcd-mutex/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return func() error { return m.Unlock(ctx) }, nil
}

func (l *etcdMutexLocker) Close() error {
	l.sess.Close()
	return l.cli.Close()
}
