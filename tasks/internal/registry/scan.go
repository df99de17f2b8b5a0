package registry

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ScanKeys calls fn with every key matching pattern. SCAN reads one node:
// on a Redis Cluster it runs on every master, or a sweep would see only
// the sessions whose slots live on one of them. fn is never called twice
// at once.
func ScanKeys(ctx context.Context, rdb redis.UniversalClient, pattern string, count int64, fn func(key string) error) error {
	scan := func(ctx context.Context, c redis.Cmdable, fn func(string) error) error {
		iter := c.Scan(ctx, 0, pattern, count).Iterator()
		var first error
		for iter.Next(ctx) {
			if err := fn(iter.Val()); err != nil && first == nil {
				first = err
			}
		}
		if first != nil {
			return first
		}
		return iter.Err()
	}
	cluster, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return scan(ctx, rdb, fn)
	}
	var mu sync.Mutex
	return cluster.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return scan(ctx, node, func(key string) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(key)
		})
	})
}
