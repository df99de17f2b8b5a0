// Package app wires one bgjobs process together: Redis (real or embedded),
// the Manager, the asynq workers, the reconciler and the HTTP server, with
// a graceful stop.
package app

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/redisconn"
)

// redisConn is an open Redis client and what closes it.
type redisConn struct {
	rdb      redis.UniversalClient
	embedded *embeddedRedis
}

func (c *redisConn) close() {
	_ = c.rdb.Close()
	if c.embedded != nil {
		c.embedded.close()
	}
}

// openRedis connects to url, or starts an embedded miniredis when url is
// empty.
func openRedis(ctx context.Context, url string) (*redisConn, error) {
	if url == "" {
		e, err := startEmbedded()
		if err != nil {
			return nil, err
		}
		return &redisConn{rdb: redis.NewClient(&redis.Options{Addr: e.m.Addr(), Protocol: 2}), embedded: e}, nil
	}
	rdb, err := redisconn.Open(url)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at REDIS_URL does not answer: %w", err)
	}
	return &redisConn{rdb: rdb}, nil
}

// embeddedRedis is an in-process miniredis. miniredis only ages TTLs when
// told to, so a ticker advances them by the real time that passed: leases,
// idempotency windows and retention then expire as on a real server.
type embeddedRedis struct {
	m    *miniredis.Miniredis
	stop chan struct{}
	wg   sync.WaitGroup
}

func startEmbedded() (*embeddedRedis, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	e := &embeddedRedis{m: m, stop: make(chan struct{})}
	e.wg.Go(func() {
		last := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-e.stop:
				return
			case now := <-tick.C:
				m.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	return e, nil
}

func (e *embeddedRedis) close() {
	close(e.stop)
	e.wg.Wait()
	e.m.Close()
}
