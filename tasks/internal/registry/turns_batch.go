package registry

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/pipeline"
)

// A turn batch gathers the jobs one turn of a session spawned (spawn's
// turn_id): it joins like a batch once sealed, so the turn gets one
// briefing however many jobs it fired.

// JoinTurn adds job id to the open batch of the session's turn
// (joinTurnCmd), opening one with newID if there is none, and returns the
// batch id. wakes is false for an incognito job. keep bounds how long an
// unsealed batch stays open. The caller indexes the batch (IndexBatch).
func (s *Store) JoinTurn(ctx context.Context, tag, turn, newID, id string, wakes bool, now time.Time, keep time.Duration) (string, error) {
	b, err := s.w.Script(ctx, joinTurnCmd, []string{s.k.turnBatch(tag, turn), s.k.openTurns(tag)},
		newID, id, boolStr(wakes), ms(now), s.k.sessionPrefix(tag), int64(keep.Seconds())).Text()
	return b, unavailable("join the turn's batch", err)
}

// IndexBatch records batch id under its session tag, for GET
// /v1/batches/{id}. The index lives outside the session's slot, so a turn
// batch's entry rides in its member row's round trip (WithRow), not in
// joinTurnCmd.
func (s *Store) IndexBatch(tag, id string) pipeline.Op {
	return func(ctx context.Context, p redis.Pipeliner) { p.HSet(ctx, s.k.batchIndex(), id, tag) }
}

// SealResult is what sealing a turn batch did.
type SealResult int

const (
	// SealTooEarly: the window after the last spawn has not passed.
	SealTooEarly SealResult = -1
	// SealedBefore: nothing to do.
	SealedBefore SealResult = 0
	// Sealed: sealed; members are still running.
	Sealed SealResult = 1
	// SealedJoined: sealed and joined; the outbox holds its EntryJoin.
	SealedJoined SealResult = 2
)

// SealTurn seals a turn batch (sealTurnCmd). window 0 seals now; otherwise
// only once window has passed since the last spawn, else SealTooEarly with
// that spawn's time.
func (s *Store) SealTurn(ctx context.Context, tag, id string, now time.Time, window time.Duration) (SealResult, time.Time, error) {
	keys := []string{s.k.batch(tag, id), s.k.batchClaim(tag, id), s.k.Outbox(tag), s.k.openTurns(tag)}
	reply, err := s.w.Script(ctx, sealTurnCmd, keys, id, ms(now), window.Milliseconds()).Int64Slice()
	if err != nil || len(reply) == 0 {
		return SealedBefore, time.Time{}, unavailable("seal the turn's batch", err)
	}
	var last time.Time
	if len(reply) > 1 {
		last = time.UnixMilli(reply[1])
	}
	return SealResult(reply[0]), last, nil
}

// OpenTurns lists the session's unsealed turn batches.
func (s *Store) OpenTurns(ctx context.Context, tag string) ([]string, error) {
	ids, err := s.rdb.SMembers(ctx, s.k.openTurns(tag)).Result()
	return ids, unavailable("read open turns", err)
}
