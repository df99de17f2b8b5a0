package registry

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
)

// CreateBatch writes the batch (size first) and every member row in one
// round trip, so the batch can never join early; also rides with them
// (the members' first events, ahead of any worker's).
func (s *Store) CreateBatch(ctx context.Context, tag, id string, jobs []*bgjobs.Job, now time.Time, also ...pipeline.Op) error {
	ids := make([]any, len(jobs))
	open := 0
	for i, j := range jobs {
		ids[i] = j.ID
		if !j.Incognito {
			open++
		}
	}
	var cmds []redis.Cmder
	err := s.do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		cmds = append(cmds,
			p.HSet(ctx, s.k.batch(tag, id), map[string]any{"id": id, "size": len(jobs), "settled": 0,
				string(bgjobs.StatusCompleted): 0, string(bgjobs.StatusFailed): 0, string(bgjobs.StatusCancelled): 0, "created_at": ms(now), "open": open}),
			p.RPush(ctx, s.k.batchJobs(tag, id), ids...),
			p.HSet(ctx, s.k.batchIndex(), id, tag))
		for _, j := range jobs {
			cmds = append(cmds, s.queueCreate(ctx, p, j)...)
		}
		for _, op := range also {
			op(ctx, p)
		}
	})
	if err == nil {
		err = firstErr(cmds)
	}
	return unavailable("create batch", err)
}

// BatchTag returns the session tag of a batch id, or "" if unknown.
func (s *Store) BatchTag(ctx context.Context, id string) (string, error) {
	tag, err := s.rdb.HGet(ctx, s.k.batchIndex(), id).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return tag, unavailable("look up batch", err)
}

// LoadBatch reads a batch and its members; nil when it does not exist.
func (s *Store) LoadBatch(ctx context.Context, tag, id string) (*bgjobs.Batch, error) {
	var h *redis.MapStringStringCmd
	var members *redis.StringSliceCmd
	if err := s.do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		h = p.HGetAll(ctx, s.k.batch(tag, id))
		members = p.LRange(ctx, s.k.batchJobs(tag, id), 0, -1)
	}); err != nil {
		return nil, unavailable("read batch", err)
	}
	if err := firstErr([]redis.Cmder{h, members}); err != nil {
		return nil, unavailable("read batch", err)
	}
	f := h.Val()
	if len(f) == 0 {
		return nil, nil
	}
	n := func(k string) int { v, _ := strconv.Atoi(f[k]); return v }
	_, session := bgjobs.SplitTag(tag)
	b := &bgjobs.Batch{ID: id, OriginSession: session, Size: n("size"), Settled: n("settled"),
		Counts: bgjobs.Counts{Completed: n(string(bgjobs.StatusCompleted)), Failed: n(string(bgjobs.StatusFailed)),
			Cancelled: n(string(bgjobs.StatusCancelled))},
		Partial: f["partial"] == "1", Jobs: members.Val(), CreatedAt: msTime(f["created_at"]),
		// Batches written before the count existed are taken as open.
		AllIncognito: f["open"] == "0"}
	if s := f["joined_at"]; s != "" {
		t := msTime(s)
		b.Joined, b.JoinedAt = true, &t
	}
	if b.Jobs == nil {
		b.Jobs = []string{}
	}
	return b, nil
}

// ForceJoin takes the batch's join claim early (forceJoinCmd), for the
// straggler timer. It reports whether this call joined the batch; the
// outbox then holds its EntryJoin.
func (s *Store) ForceJoin(ctx context.Context, tag, id string, now time.Time) (bool, error) {
	n, err := s.w.Script(ctx, forceJoinCmd, []string{s.k.batch(tag, id), s.k.batchClaim(tag, id), s.k.Outbox(tag)},
		id, now.UnixMilli()).Int()
	return n == 1, unavailable("join batch", err)
}
