//go:build redis || all

package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	_ "github.com/baton-go/baton/redis"
)

// go-redis logs through one process-wide logger, to stderr by default:
// route its lines to baton's --verbose output.
func init() { redis.SetLogger(redisLog{}) }

type redisLog struct{}

func (redisLog) Printf(_ context.Context, format string, v ...any) {
	driverLog("redis", fmt.Sprintf(format, v...))
}
