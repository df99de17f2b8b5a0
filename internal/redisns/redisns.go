// Package redisns removes a whole key namespace from a shared Redis database.
package redisns

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/redis/go-redis/v9"
)

// DropNamespace deletes every key of namespace ns, bgjobs' and its asynq
// queues' alike. It exists for tests and benchmarks that share a database;
// never point it at a namespace that serves traffic.
func DropNamespace(ctx context.Context, rdb redis.UniversalClient, ns string) {
	for _, pattern := range []string{ns + ":*", "asynq:{" + ns + ":*"} {
		iter := rdb.Scan(ctx, 0, pattern, 500).Iterator()
		var batch []string
		for iter.Next(ctx) {
			batch = append(batch, iter.Val())
			if len(batch) == 500 {
				rdb.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			rdb.Unlink(ctx, batch...)
		}
	}
	for _, q := range []string{"turns", "work", "resume", "control", "raw"} {
		rdb.SRem(ctx, "asynq:queues", ns+":"+q)
	}
}

// Fresh returns a namespace no one else uses: prefix and random hex.
func Fresh(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
