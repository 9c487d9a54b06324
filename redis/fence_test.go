package redis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/drivertest"
	"github.com/baton-go/baton/fence"
	batonredis "github.com/baton-go/baton/redis"
)

func TestSetFenced(t *testing.T) {
	drivertest.EachServer(t, serversEnv, func(t *testing.T, _ drivertest.Server) {
		ctx := ctxFor(t, 30*time.Second)
		o, err := redis.ParseURL(serverURL(t))
		if err != nil {
			t.Fatal(err)
		}
		c := redis.NewClient(o)
		defer c.Close()
		fk, key := "{"+prefix+"-fence}:fence", "{"+prefix+"-fence}"
		defer c.Del(ctx, fk, key) // before the deferred Close
		for _, s := range []struct {
			token uint64
			value string
			ttl   time.Duration
			stale uint64 // the highest, if refused
		}{
			{5, "a", 0, 0},
			{5, "b", 0, 0},
			{4, "stale", 0, 5},
			{10, "c", time.Minute, 0}, // "10" < "5" as strings: compared as numbers
			{9, "stale", 0, 10},
			{18446744073709551615, "max", 0, 0}, // beyond a double's precision
			{18446744073709551614, "stale", 0, 18446744073709551615},
		} {
			err := batonredis.SetFenced(ctx, c, fk, key, s.value, s.ttl, s.token)
			var se *fence.StaleError
			switch {
			case s.stale == 0 && err != nil:
				t.Fatalf("token %d: %v", s.token, err)
			case s.stale != 0 && (!errors.As(err, &se) || !errors.Is(err, fence.ErrStale) || se.Highest != s.stale || se.Token != s.token):
				t.Fatalf("token %d: %v, want stale (highest %d)", s.token, err, s.stale)
			}
			if s.ttl > 0 {
				if d := c.PTTL(ctx, key).Val(); d <= 0 || d > s.ttl {
					t.Errorf("token %d: PTTL %v, want at most %v", s.token, d, s.ttl)
				}
			}
		}
		if v := c.Get(ctx, key).Val(); v != "max" {
			t.Errorf("value %q, want the last admitted write's", v)
		}
		// A fence key that holds no token is an error, never overwritten.
		c.Set(ctx, fk, "garbage", 0)
		err = batonredis.SetFenced(ctx, c, fk, key, "x", 0, 1)
		if err == nil || !strings.Contains(err.Error(), "does not hold a token") || c.Get(ctx, fk).Val() != "garbage" {
			t.Errorf("fence key with garbage: %v", err)
		}
	})
}
