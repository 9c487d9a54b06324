package main

// Redis peers, for -target KIND=redis://…:
//
//	redsync        github.com/go-redsync/redsync/v4 over go-redis v9, one
//	               server, default options (8 s expiry, 32 tries 50–250 ms
//	               apart).
//	redsync-1ms    the same with a 1 ms retry delay.
//	redislock      github.com/bsm/redislock, 100 ms linear backoff, 15 s TTL.
//	redislock-1ms  the same with a 1 ms linear backoff.
//	redis-fifo     the least fair lock Redis gives, a floor rather than a
//	               peer: a list per name holds one token; Lock is a BLPOP
//	               of it (Redis serves blocked clients first come, first
//	               served), release an LPUSH. No TTL, no fencing token: a
//	               client that dies holding it keeps it for ever.
//	redis-queue    the least fair lease with a fencing token Redis gives,
//	               a floor rather than a peer, built as baton's fast paths
//	               are: per name a holder key with the lease's TTL (the
//	               server's clock), a token counter and a queue list. The
//	               acquire script takes a free name with nobody queued and
//	               bumps its token, or queues the owner, who then waits in a
//	               BLPOP of its mailbox; the release script hands the name
//	               to the queue's head and pushes its token into its
//	               mailbox. No sessions, metadata, shared modes or epochs;
//	               an expired holder is not replaced while others wait, a
//	               Lock whose context ends while it waits leaves its entry,
//	               and the release script names the mailbox key itself (one
//	               server only): a floor to measure, not a lock to use.
//
// Each client has its own go-redis client. Neither library blocks for ever
// (redsync gives up after its tries, redislock after its TTL): a Lock here
// retries on their "not obtained" errors until it gets the lock or ctx
// ends. baton=redis://… needs no kind of its own: importing the store
// registers its URL schemes.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	_ "github.com/baton-go/baton/redis"
)

func init() {
	kinds["redsync"] = func(url string) Target { return redsyncTarget("redsync", url) }
	kinds["redsync-1ms"] = func(url string) Target {
		return redsyncTarget("redsync-1ms", url, redsync.WithRetryDelay(time.Millisecond))
	}
	kinds["redislock"] = func(url string) Target { return redislockTarget("redislock", url, 100*time.Millisecond) }
	kinds["redislock-1ms"] = func(url string) Target { return redislockTarget("redislock-1ms", url, time.Millisecond) }
	kinds["redis-fifo"] = redisFIFOTarget
	kinds["redis-queue"] = redisQueueTarget
}

func goRedis(ctx context.Context, url string) (*redis.Client, error) {
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(o)
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, err
	}
	return rdb, nil
}

func redsyncTarget(name, url string, opts ...redsync.Option) Target {
	return Target{Name: name, New: func(ctx context.Context) (Locker, error) {
		rdb, err := goRedis(ctx, url)
		if err != nil {
			return nil, err
		}
		return &redsyncLocker{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb)), opts: opts}, nil
	}}
}

type redsyncLocker struct {
	rdb  *redis.Client
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (r *redsyncLocker) Lock(ctx context.Context, name string) (func() error, error) {
	m := r.rs.NewMutex(name, r.opts...)
	for {
		err := m.LockContext(ctx)
		if err == nil {
			break
		}
		var taken *redsync.ErrTaken
		var nodeTaken *redsync.ErrNodeTaken
		if ctx.Err() != nil || !(errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken)) {
			return nil, err
		}
	}
	return func() error {
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = fmt.Errorf("redsync: %q was not held", name)
		}
		return err
	}, nil
}

func (r *redsyncLocker) Close() error { return r.rdb.Close() }

func redislockTarget(name, url string, backoff time.Duration) Target {
	return Target{Name: name, New: func(ctx context.Context) (Locker, error) {
		rdb, err := goRedis(ctx, url)
		if err != nil {
			return nil, err
		}
		return &redislockLocker{rdb: rdb, c: redislock.New(rdb), backoff: backoff}, nil
	}}
}

type redislockLocker struct {
	rdb     *redis.Client
	c       *redislock.Client
	backoff time.Duration
}

func (r *redislockLocker) Lock(ctx context.Context, name string) (func() error, error) {
	for {
		// Obtain gives up with ErrNotObtained, or with its own deadline
		// (the TTL) when ctx has none.
		l, err := r.c.Obtain(ctx, name, 15*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(r.backoff)})
		if err == nil {
			return func() error { return l.Release(ctx) }, nil
		}
		if ctx.Err() != nil || !(errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded)) {
			return nil, err
		}
	}
}

func (r *redislockLocker) Close() error { return r.rdb.Close() }

func redisFIFOTarget(url string) Target {
	return Target{Name: "redis-fifo", New: func(ctx context.Context) (Locker, error) {
		rdb, err := goRedis(ctx, url)
		if err != nil {
			return nil, err
		}
		return &fifoLocker{rdb: rdb}, nil
	}}
}

type fifoLocker struct {
	rdb  *redis.Client
	made sync.Map // names whose token this client saw made
}

func (f *fifoLocker) Lock(ctx context.Context, name string) (func() error, error) {
	key := "fifo:{" + name + "}"
	if _, ok := f.made.Load(name); !ok {
		// The first client to get here puts the name's one token in.
		set, err := f.rdb.SetNX(ctx, key+":made", 1, 0).Result()
		if err != nil {
			return nil, err
		}
		if set {
			if err := f.rdb.LPush(ctx, key, 1).Err(); err != nil {
				return nil, err
			}
		}
		f.made.Store(name, true)
	}
	for {
		err := f.rdb.BLPop(ctx, time.Second, key).Err()
		if err == nil {
			break
		}
		if !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	return func() error { return f.rdb.LPush(context.WithoutCancel(ctx), key, 1).Err() }, nil
}

func (f *fifoLocker) Close() error { return f.rdb.Close() }

// redis-queue's scripts. KEYS: the name's holder, counter and queue keys.
// ARGV: the owner, the TTL in ms, and for the release the prefix of the
// mailboxes.
var (
	rqAcquire = redis.NewScript(`
if redis.call('EXISTS', KEYS[3]) == 0 and redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
redis.call('RPUSH', KEYS[3], ARGV[1])
return 0`)
	rqRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local nx = redis.call('LPOP', KEYS[3])
if not nx then
  redis.call('DEL', KEYS[1])
  return 1
end
redis.call('SET', KEYS[1], nx, 'PX', ARGV[2])
redis.call('LPUSH', ARGV[3] .. nx, redis.call('INCR', KEYS[2]))
return 1`)
)

func redisQueueTarget(url string) Target {
	return Target{Name: "redis-queue", New: func(ctx context.Context) (Locker, error) {
		rdb, err := goRedis(ctx, url)
		if err != nil {
			return nil, err
		}
		return &queueLocker{rdb: rdb, id: rand.Text()}, nil
	}}
}

type queueLocker struct {
	rdb *redis.Client
	id  string
	n   atomic.Uint64
}

func (q *queueLocker) Lock(ctx context.Context, name string) (func() error, error) {
	b := "rq:{" + name + "}:"
	keys := []string{b + "h", b + "c", b + "q"}
	owner := q.id + strconv.FormatUint(q.n.Add(1), 10)
	const ttl = "15000"
	tok, err := rqAcquire.Run(ctx, q.rdb, keys, owner, ttl).Int64()
	if err != nil {
		return nil, err
	}
	for tok == 0 {
		// Queued: the release that hands the name over pushes its token.
		v, err := q.rdb.BLPop(ctx, time.Second, b+"w:"+owner).Result()
		switch {
		case err == nil:
			if tok, err = strconv.ParseInt(v[1], 10, 64); err != nil {
				return nil, err
			}
		case !errors.Is(err, redis.Nil):
			return nil, err
		}
	}
	return func() error {
		ok, err := rqRelease.Run(context.WithoutCancel(ctx), q.rdb, keys, owner, ttl, b+"w:").Int64()
		if err == nil && ok != 1 {
			err = fmt.Errorf("redis-queue: %q was not held", name)
		}
		return err
	}, nil
}

func (q *queueLocker) Close() error { return q.rdb.Close() }
