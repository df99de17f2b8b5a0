// Package reclaim finds and re-queues the tasks a dead worker left active
// in asynq, on asynq's own keys.
package reclaim

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Store reads and moves asynq's keys of bgjobs' queues.
type Store struct{ rdb redis.UniversalClient }

// New returns the store on rdb.
func New(rdb redis.UniversalClient) *Store { return &Store{rdb: rdb} }

// A worker that dies (kill -9, a lost host) leaves its tasks active in
// asynq with a lease nobody extends; asynq's own recoverer re-queues them
// only a minute or two later. These read and move asynq's keys of a queue,
// as the pinned asynq lays them out (TestDeadWorkersJobsRunAgainSoon fences
// them: a real worker killed, its tasks run again by another):
//
//	asynq:{<queue>}:active   list  ids of tasks being worked on
//	asynq:{<queue>}:lease    zset  id → lease expiry (unix seconds)
//	asynq:{<queue>}:pending  list  ids waiting for a worker (dequeued from the right)
//	asynq:{<queue>}:t:<id>   hash  the task; field state

func asynqKey(queue, name string) string { return "asynq:{" + queue + "}:" + name }

// ExpiredLeases lists, per queue, the active tasks whose lease expired
// before now.
func (s *Store) ExpiredLeases(ctx context.Context, queues []string, now time.Time) (map[string][]string, error) {
	cmds := make([]*redis.StringSliceCmd, len(queues))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range queues {
			cmds[i] = p.ZRangeByScore(ctx, asynqKey(q, "lease"), &redis.ZRangeBy{Min: "-inf", Max: "(" + strconv.FormatInt(now.Unix(), 10)})
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, registry.Unavailable("read leases", err)
	}
	out := map[string][]string{}
	for i, c := range cmds {
		if ids := c.Val(); len(ids) > 0 {
			out[queues[i]] = ids
		}
	}
	return out, nil
}

// requeueOrphanCmd puts a task whose lease expired back at the head of its
// queue, as asynq does for a worker's tasks at shutdown — but only if the
// lease is still expired when it runs: a worker that extended it meanwhile
// is alive, and its task stays its own.
//
// KEYS[1] -> asynq:{<queue>}:active
// KEYS[2] -> asynq:{<queue>}:lease
// KEYS[3] -> asynq:{<queue>}:pending
// KEYS[4] -> asynq:{<queue>}:t:<id>
// ARGV[1] -> task id
// ARGV[2] -> now (unix seconds)
//
// Returns 1 if re-queued, 0 otherwise.
var requeueOrphanCmd = redis.NewScript(`
local lease = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not lease or tonumber(lease) >= tonumber(ARGV[2]) then return 0 end
if redis.call('LREM', KEYS[1], 0, ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('RPUSH', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[4], 'state', 'pending')
return 1
`)

// RequeueOrphan re-queues task id of queue if its lease is still expired
// (requeueOrphanCmd), and reports whether it did.
func (s *Store) RequeueOrphan(ctx context.Context, queue, id string, now time.Time) (bool, error) {
	keys := []string{asynqKey(queue, "active"), asynqKey(queue, "lease"), asynqKey(queue, "pending"), asynqKey(queue, "t:"+id)}
	n, err := requeueOrphanCmd.Run(ctx, s.rdb, keys, id, now.Unix()).Int()
	if n == 1 {
		// Wake the fetches held waiting for work, here and in other
		// processes (pipeline/wake.go): this move bypasses asynq's client.
		pipeline.Announce(ctx, s.rdb, keys[2])
	}
	return n == 1, registry.Unavailable("requeue orphan", err)
}
