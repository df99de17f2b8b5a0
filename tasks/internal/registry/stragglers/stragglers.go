// Package stragglers keeps the batches' straggler timeouts: one sorted set,
// <ns>:stragglers, of "<batch id>|<tag>" scored with the time the batch
// joins partially if its last members have not settled. The batch's first
// settle arms its entry (through the outbox), its join drops it, and the
// sweeps of every process read what is due.
package stragglers

import (
	"cmp"
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Set is the stragglers set of a namespace.
type Set struct {
	w   *pipeline.Writer
	key string
}

// New returns the set of k's namespace, written through w.
func New(w *pipeline.Writer, k registry.Keys) *Set { return &Set{w: w, key: k.Stragglers()} }

// Straggler names a batch whose straggler timeout is due.
type Straggler struct{ Tag, BatchID string }

// member is a batch's member of the set: the batch id first, since it never
// holds the separator and a tag may.
func member(tag, id string) string { return id + "|" + tag }

// Arm sets the batch's timeout to due, unless it is set already (a
// re-driven outbox entry keeps the first).
func (s *Set) Arm(ctx context.Context, tag, id string, due time.Time) error {
	return s.write(ctx, "arm straggler", func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.ZAddNX(ctx, s.key, redis.Z{Score: float64(due.UnixMilli()), Member: member(tag, id)})
	})
}

// Disarm drops the batch's timeout, on the follow-up path: one lost in a
// crash is found due later and joins nothing (the batch's claim is taken).
func (s *Set) Disarm(tag, id string) {
	s.w.Add(func(ctx context.Context, p redis.Pipeliner) { p.ZRem(ctx, s.key, member(tag, id)) })
}

// Drop drops timeouts a sweep has handled, waited, so the sweep's next
// page starts past them.
func (s *Set) Drop(ctx context.Context, done []Straggler) error {
	if len(done) == 0 {
		return nil
	}
	members := make([]any, len(done))
	for i, st := range done {
		members[i] = member(st.Tag, st.BatchID)
	}
	return s.write(ctx, "drop stragglers", func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.ZRem(ctx, s.key, members...)
	})
}

// write sends one command in a waited pipeline and returns its error.
func (s *Set) write(ctx context.Context, what string, queue func(context.Context, redis.Pipeliner) redis.Cmder) error {
	var cmd redis.Cmder
	err := s.w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = queue(ctx, p) })
	if err == nil {
		err = cmd.Err()
	}
	return registry.Unavailable(what, err)
}

// Due returns up to limit batches whose timeout is due at now, and the
// earliest due time after now (zero when none is armed).
func (s *Set) Due(ctx context.Context, now time.Time, limit int64) ([]Straggler, time.Time, error) {
	var due *redis.StringSliceCmd
	var first *redis.ZSliceCmd
	at := strconv.FormatInt(now.UnixMilli(), 10)
	err := s.w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		due = p.ZRangeByScore(ctx, s.key, &redis.ZRangeBy{Min: "-inf", Max: at, Count: limit})
		first = p.ZRangeByScoreWithScores(ctx, s.key, &redis.ZRangeBy{Min: "(" + at, Max: "+inf", Count: 1})
	})
	if err == nil {
		err = cmp.Or(due.Err(), first.Err())
	}
	if err != nil {
		return nil, time.Time{}, registry.Unavailable("read stragglers", err)
	}
	out := make([]Straggler, 0, len(due.Val()))
	for _, m := range due.Val() {
		id, tag, _ := strings.Cut(m, "|")
		out = append(out, Straggler{Tag: tag, BatchID: id})
	}
	var next time.Time
	if f := first.Val(); len(f) > 0 {
		next = time.UnixMilli(int64(f[0].Score))
	}
	return out, next, nil
}
