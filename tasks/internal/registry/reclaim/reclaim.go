// Package reclaim finds and re-queues the tasks a dead worker left active
// in asynq, and brings a parked task (one sent back past its agent's share)
// back to its queue at once, on asynq's own keys.
package reclaim

import (
	"context"
	"errors"
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
//	asynq:{<queue>}:retry    zset  id → when it is tried again (unix seconds)
//	asynq:{<queue>}:t:<id>   hash  the task; fields state, pending_since
//	                               (state: pending, active, scheduled, retry,
//	                               archived, completed, aggregating)

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

// Task states as asynq writes them in a task's hash.
const (
	StateActive   = "active"
	StateArchived = "archived"
)

// Task names one task: its queue and id.
type Task struct{ Queue, ID string }

// States reads the state of each task in one round trip: "" for a task
// that no longer exists (deleted, purged, or its queue gone).
func (s *Store) States(ctx context.Context, tasks []Task) ([]string, error) {
	cmds := make([]*redis.StringCmd, len(tasks))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, t := range tasks {
			cmds[i] = p.HGet(ctx, asynqKey(t.Queue, "t:"+t.ID), "state")
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, registry.Unavailable("read task states", err)
	}
	out := make([]string, len(tasks))
	for i, c := range cmds {
		out[i] = c.Val()
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

// unparkCmd brings a task waiting in its queue's retry set to the end of
// its queue at once, as asynq's forwarder does when its time comes; only a
// task still waiting there, so a stale word never runs an ended or
// archived task again.
//
// KEYS[1] -> asynq:{<queue>}:retry
// KEYS[2] -> asynq:{<queue>}:pending
// KEYS[3] -> asynq:{<queue>}:t:<id>
// ARGV[1] -> task id
// ARGV[2] -> now (unix ns): the task's pending_since
//
// Returns 1 if moved; 2 if it is in its queue already; -1 if it is active
// (sent back a moment ago, not yet in the retry set, or running); -2 if
// there is no such task; 0 for any other state (ended, archived,
// scheduled).
var unparkCmd = redis.NewScript(`
local state = redis.call('HGET', KEYS[3], 'state')
if not state then return -2 end
if state == 'active' then return -1 end
if state == 'pending' then return 2 end
if state ~= 'retry' or redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('LPUSH', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], 'state', 'pending', 'pending_since', ARGV[2])
return 1
`)

// Answers of Unpark besides nil.
var (
	// ErrTaskQueued: the task is in its queue already.
	ErrTaskQueued = errors.New("task queued already")
	// ErrTaskRunning: a worker holds the task (it may be on its way to the
	// retry set: asynq moves it a moment after its handler returns).
	ErrTaskRunning = errors.New("task running")
	// ErrTaskGone: no such task (its job ended and the task went, or it
	// was cancelled or deleted).
	ErrTaskGone = errors.New("task gone")
	// ErrTaskNotWaiting: the task is neither waiting to be retried nor
	// queued (archived, scheduled).
	ErrTaskNotWaiting = errors.New("task not waiting")
)

// Unpark brings task id of queue, waiting in the retry set, to the end of
// its queue now (unparkCmd). It wakes no fetch: the caller announces the
// queue.
func (s *Store) Unpark(ctx context.Context, queue, id string, now time.Time) error {
	keys := []string{asynqKey(queue, "retry"), asynqKey(queue, "pending"), asynqKey(queue, "t:"+id)}
	n, err := unparkCmd.Run(ctx, s.rdb, keys, id, now.UnixNano()).Int()
	if err != nil {
		return registry.Unavailable("unpark", err)
	}
	switch n {
	case 1:
		return nil
	case 2:
		return ErrTaskQueued
	case -1:
		return ErrTaskRunning
	case -2:
		return ErrTaskGone
	}
	return ErrTaskNotWaiting
}
