// Package redisconn opens the Redis client every bgjobs process uses, from
// the URLs asynq understands (redis://, rediss://, redis-sentinel://).
package redisconn

import (
	"fmt"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Open returns a client for url. It speaks RESP2: bgjobs uses no RESP3
// feature, and go-redis checks for RESP3 push notifications around every
// command, which cost about a tenth of a worker's CPU in the benchmark.
func Open(url string) (redis.UniversalClient, error) {
	opt, err := asynq.ParseRedisURI(url)
	if err != nil {
		return nil, err
	}
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		return redis.NewClient(&redis.Options{
			Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
			TLSConfig: o.TLSConfig, Protocol: 2, PoolSize: poolSize,
		}), nil
	case asynq.RedisFailoverClientOpt:
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: o.MasterName, SentinelAddrs: o.SentinelAddrs,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
			Username: o.Username, Password: o.Password, DB: o.DB, TLSConfig: o.TLSConfig, Protocol: 2, PoolSize: poolSize,
		}), nil
	}
	return nil, fmt.Errorf("unsupported Redis URL kind %T", opt)
}

// poolSize is the connection pool per process. go-redis defaults to ten per
// CPU, which workers, API handlers and asynq's own loops exhaust on a small
// machine: every job then waits for a connection, not for Redis.
const poolSize = 128
