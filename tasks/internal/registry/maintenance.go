package registry

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// EachActiveBefore hands each the ids of jobs not yet terminal that were
// created (or retried) before cutoff, about page at a time (walk.Before):
// the reconciler's to-do list.
func (s *Store) EachActiveBefore(ctx context.Context, cutoff time.Time, page int64, each func(ids []string) error) error {
	return s.before(ctx, s.k.active(), "read active jobs", cutoff, page, each)
}

// DropActive takes jobs off the reconciler's list.
func (s *Store) DropActive(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	return unavailable("active jobs", s.rdb.ZRem(ctx, s.k.active(), members...).Err())
}

// SweepIndex walks on through the job index from where the last sweep
// stopped, up to pages HSCAN pages of count, and drops the entries whose
// row is gone (expired after notification) from the index and from the
// session's and agent's job lists. It returns how many it dropped.
func (s *Store) SweepIndex(ctx context.Context, pages int, count int64) (int, error) {
	cursor, err := s.rdb.Get(ctx, s.k.jobIndexCursor()).Uint64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	dropped := 0
	for range pages {
		kv, next, err := s.rdb.HScan(ctx, s.k.JobIndex(), cursor, "", count).Result()
		if err != nil {
			return dropped, err
		}
		n, err := s.dropStale(ctx, kv)
		dropped += n
		if err != nil {
			return dropped, err
		}
		cursor = next
		if cursor == 0 {
			break // a full cycle; the next sweep starts over
		}
	}
	return dropped, s.rdb.Set(ctx, s.k.jobIndexCursor(), cursor, 0).Err()
}

// dropStale removes the entries among kv (id, tag, id, tag …) whose row no
// longer exists. A row is written before its index entry and ids are never
// reused, so a missing row stays missing.
func (s *Store) dropStale(ctx context.Context, kv []string) (int, error) {
	exists := make([]*redis.IntCmd, 0, len(kv)/2)
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i+1 < len(kv); i += 2 {
			exists = append(exists, p.Exists(ctx, s.k.Job(kv[i+1], kv[i])))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	dropped := 0
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range exists {
			if e.Err() != nil || e.Val() != 0 {
				continue
			}
			id, tag := kv[2*i], kv[2*i+1]
			agent, _ := bgjobs.SplitTag(tag)
			p.HDel(ctx, s.k.JobIndex(), id)
			p.ZRem(ctx, s.k.SessionJobs(tag), id)
			p.ZRem(ctx, s.k.AgentJobs(agent), id)
			dropped++
		}
		return nil
	})
	return dropped, err
}

// HoldLease takes or keeps the named lease for holder, for ttl (leaseCmd).
// It reports whether holder has it now.
func (s *Store) HoldLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	n, err := s.w.Script(ctx, leaseCmd, []string{s.k.lease(name)}, holder, ttl.Milliseconds()).Int()
	return n == 1, unavailable("lease", err)
}

// ReleaseLease frees the named lease if holder has it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) {
	_ = s.w.Script(ctx, leaseCmd, []string{s.k.lease(name)}, holder, 0).Err()
}
