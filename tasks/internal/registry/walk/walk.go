// Package walk visits what a sweep must see in pages: keys by pattern on
// every master of a cluster, and the members of a sorted set up to a
// cutoff score.
package walk

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Keys calls fn with every key matching pattern. SCAN reads one node:
// on a Redis Cluster it runs on every master, or a sweep would see only
// the sessions whose slots live on one of them. fn is never called twice
// at once.
func Keys(ctx context.Context, rdb redis.UniversalClient, pattern string, count int64, fn func(key string) error) error {
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

// Before hands each the members of the sorted set key scored at most
// cutoff, lowest first, about page at a time: read in one reply, a
// deployment's million ended jobs were a reply of tens of megabytes that
// held Redis while it was built. A page ends where a score does: the
// members sharing its last score are read whole (a batch's members share
// their spawn's millisecond), so the next page starts past that score, and
// members each removes meanwhile shift nothing. An error of each ends the
// walk with it.
func Before(ctx context.Context, rdb redis.UniversalClient, key string, cutoff time.Time, page int64, each func(ids []string) error) error {
	min, max := "-inf", strconv.FormatInt(cutoff.UnixMilli(), 10)
	for {
		zs, err := rdb.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: min, Max: max, Count: page}).Result()
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(zs))
		for _, z := range zs {
			id, _ := z.Member.(string)
			ids = append(ids, id)
		}
		full := int64(len(zs)) == page
		if full {
			last := strconv.FormatInt(int64(zs[len(zs)-1].Score), 10)
			i := len(zs)
			for i > 0 && zs[i-1].Score == zs[len(zs)-1].Score {
				i--
			}
			tied, err := rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: last, Max: last}).Result()
			if err != nil {
				return err
			}
			ids, min = append(ids[:i], tied...), "("+last
		}
		if len(ids) > 0 {
			if err := each(ids); err != nil {
				return err
			}
		}
		if !full {
			return nil
		}
	}
}
