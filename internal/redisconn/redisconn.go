// Package redisconn opens the Redis client every bgjobs process uses, from
// the URLs asynq understands (redis://, rediss://, redis-sentinel://) and
// redis-cluster:// for a Redis Cluster.
package redisconn

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// ConnOpt reads url as asynq does, and completes a Sentinel URL, which
// asynq reads only partly:
//
//	redis-sentinel://[:sentinel-password@]host:port[,host:port…][/db]?master=name[&password=…][&username=…]
//
// The user info goes to the sentinels (as asynq has it); the path picks
// the database; password and username are the master's own.
//
// A cluster is named by seed nodes:
//
//	redis-cluster://[user:password@]host:port[,host:port…]
func ConnOpt(raw string) (asynq.RedisConnOpt, error) {
	if rest, ok := strings.CutPrefix(raw, "redis-cluster://"); ok {
		return clusterOpt(rest)
	}
	opt, err := asynq.ParseRedisURI(raw)
	if err != nil {
		return nil, err
	}
	f, ok := opt.(asynq.RedisFailoverClientOpt)
	if !ok {
		return opt, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if f.DB, err = strconv.Atoi(db); err != nil || f.DB < 0 {
			return nil, fmt.Errorf("redis-sentinel URL: database %q is not a number", db)
		}
	}
	q := u.Query()
	f.Password, f.Username = q.Get("password"), q.Get("username")
	if u.User != nil {
		f.SentinelUsername = u.User.Username()
	}
	if f.MasterName == "" {
		return nil, fmt.Errorf("redis-sentinel URL: name the master with ?master=")
	}
	return f, nil
}

func clusterOpt(rest string) (asynq.RedisConnOpt, error) {
	u, err := url.Parse("redis://" + rest)
	if err != nil {
		return nil, fmt.Errorf("redis-cluster URL: %w", err)
	}
	o := asynq.RedisClusterClientOpt{Addrs: strings.Split(u.Host, ",")}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	for _, a := range o.Addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("redis-cluster URL: seed %q is not host:port", a)
		}
	}
	if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
		return nil, fmt.Errorf("redis-cluster URL: a cluster has database 0 only, not %q", p)
	}
	return o, nil
}

// Open returns a client for url. It speaks RESP2: bgjobs uses no RESP3
// feature, and go-redis checks for RESP3 push notifications around every
// command, which cost about a tenth of a worker's CPU in the benchmark.
func Open(url string) (redis.UniversalClient, error) {
	opt, err := ConnOpt(url)
	if err != nil {
		return nil, err
	}
	switch o := opt.(type) {
	case asynq.RedisClientOpt:
		return redis.NewClient(&redis.Options{
			Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
			TLSConfig: o.TLSConfig, Protocol: 2, PoolSize: poolSize,
		}), nil
	case asynq.RedisClusterClientOpt:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: o.Addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig, Protocol: 2, PoolSize: poolSize,
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
