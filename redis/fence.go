package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/fence"
)

var fenceScript = script("fence")

// SetFenced is the fence kit's write to Redis (package fence): it sets
// key to value, expiring after ttl if ttl is positive, and admits token at
// fenceKey, unless a larger token was admitted there before; then it
// changes nothing and returns a [*fence.StaleError]. Check and write are
// one script, so no stale holder writes in between.
//
// fenceKey keeps the fence of one lock name: give it no TTL, and keep it as
// long as the name is used (a fence that is gone admits any token). In a
// Redis Cluster the two keys must share a hash slot: "{invoice-42}:fence"
// and "{invoice-42}".
func SetFenced(ctx context.Context, c redis.Scripter, fenceKey, key string, value any, ttl time.Duration, token uint64) error {
	ms := int64(0)
	if ttl > 0 {
		ms = max(ttl.Milliseconds(), 1)
	}
	res, err := fenceScript.Run(ctx, c, []string{fenceKey, key}, strconv.FormatUint(token, 10), value, ms).Slice()
	if err != nil {
		return fmt.Errorf("redis: fenced write of %q: %w", key, err)
	}
	if len(res) == 2 && res[0] == int64(1) {
		return nil
	}
	if len(res) == 2 && res[0] == int64(0) {
		if s, ok := res[1].(string); ok {
			if h, err := strconv.ParseUint(s, 10, 64); err == nil {
				return &fence.StaleError{Name: fenceKey, Token: token, Highest: h}
			}
		}
	}
	return fmt.Errorf("redis: fenced write of %q: unexpected answer %v", key, res)
}
