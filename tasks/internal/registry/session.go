package registry

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The session's wake-up state: the busy lease and the nudges it holds, the
// resume storm guard, and the marks that keep a resume's delivery single.

// SetBusy starts or extends a session's busy lease until expiry.
func (s *Store) SetBusy(ctx context.Context, tag string, expiry time.Time, keyTTL time.Duration) error {
	return unavailable("busy", s.w.Script(ctx, busyCmd, []string{s.k.busy(tag)}, expiry.UnixMilli(), int64(keyTTL.Seconds())).Err())
}

// BusyUntil returns the end of a session's busy lease (zero when none).
func (s *Store) BusyUntil(ctx context.Context, tag string) (time.Time, error) {
	v, err := s.rdb.Get(ctx, s.k.busy(tag)).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, unavailable("busy", err)
	}
	return time.UnixMilli(v), nil
}

// EndBusy ends a session's lease (idleCmd): always when lapse is false,
// only if it has expired when lapse is true. ended: the session is idle
// now; folded: a coalesced nudge (EntryFold) was recorded.
func (s *Store) EndBusy(ctx context.Context, tag string, now time.Time, lapse bool) (ended, folded bool, err error) {
	mode := "idle"
	if lapse {
		mode = "lapse"
	}
	res, err := s.w.Script(ctx, idleCmd, []string{s.k.busy(tag), s.k.held(tag), s.k.Pending(tag), s.k.Outbox(tag)},
		now.UnixMilli(), mode).Int64Slice()
	if err != nil || len(res) != 2 {
		return false, false, unavailable("idle", err)
	}
	return res[0] == 1, res[1] == 1, nil
}

// HoldIfBusy holds trigger for the session's coalesced nudge if the
// session is busy (holdIfBusyCmd), and reports whether it did.
func (s *Store) HoldIfBusy(ctx context.Context, tag, trigger string, now time.Time) (bool, error) {
	n, err := s.w.Script(ctx, holdIfBusyCmd, []string{s.k.busy(tag), s.k.held(tag)}, now.UnixMilli(), trigger).Int()
	return n == 1, unavailable("hold resume", err)
}

// PendingIDs lists up to n undrained jobs of a session, oldest first.
func (s *Store) PendingIDs(ctx context.Context, tag string, n int64) ([]string, error) {
	ids, err := s.rdb.ZRange(ctx, s.k.Pending(tag), 0, n-1).Result()
	return ids, unavailable("read pending", err)
}

// StormGate passes a singleton resume through the session's storm guard
// (stormCmd). send: it goes now, and a window of the given length opened
// (or it had been let through before). Otherwise it waits in the storm
// queue, and the window ends in wait.
func (s *Store) StormGate(ctx context.Context, tag, jobID string, generation int, now time.Time, window time.Duration) (send bool, wait time.Duration, err error) {
	n, err := s.w.Script(ctx, stormCmd, []string{s.k.stormWindow(tag), s.k.stormQueue(tag), s.k.Job(tag, jobID)},
		jobID, now.UnixMilli(), window.Milliseconds(), generation).Int64()
	if err != nil {
		return false, 0, unavailable("storm guard", err)
	}
	if n == 1 {
		return true, window, nil
	}
	// The script answers -1 - remaining ms for a queued job.
	return false, time.Duration(-1-n) * time.Millisecond, nil
}

// StormFlush ends a session's storm window (stormFlushCmd): what queued
// behind it becomes one EntryMerged, returned with ok. If the window is
// still open (and not force), left says for how long.
func (s *Store) StormFlush(ctx context.Context, tag string, now time.Time, window time.Duration, force bool) (e Entry, ok bool, left time.Duration, err error) {
	res, err := s.w.Script(ctx, stormFlushCmd, []string{s.k.stormWindow(tag), s.k.stormQueue(tag), s.k.Outbox(tag)},
		now.UnixMilli(), window.Milliseconds(), boolStr(force)).Slice()
	if err != nil || len(res) != 2 {
		return Entry{}, false, 0, unavailable("storm flush", err)
	}
	raw, _ := res[0].(string)
	wait, _ := res[1].(int64)
	if raw == "" {
		return Entry{}, false, time.Duration(wait) * time.Millisecond, nil
	}
	return ParseEntry(raw, now.UnixMilli()), true, 0, nil
}

// StormSessions calls fn with the tag of every session with resumes
// merging behind a storm window.
func (s *Store) StormSessions(ctx context.Context, fn func(tag string) error) error {
	return s.scanTags(ctx, s.k.stormPattern(), "stormq", fn)
}

// LockDelivery takes the session's one-delivery-at-a-time lock for message
// id, for ttl. It reports whether the caller holds it.
func (s *Store) LockDelivery(ctx context.Context, tag, messageID string, ttl time.Duration) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.k.inflight(tag), messageID, ttl).Result()
	return ok, unavailable("resume lock", err)
}

// UnlockDelivery frees the lock if messageID still holds it.
func (s *Store) UnlockDelivery(ctx context.Context, tag, messageID string) {
	_ = s.w.Script(ctx, releaseLockCmd, []string{s.k.inflight(tag)}, messageID).Err()
}

// Delivered reports whether resume messageID of the session was sent.
func (s *Store) Delivered(ctx context.Context, tag, messageID string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.k.sent(tag, messageID)).Result()
	return n == 1, unavailable("resume mark", err)
}

// MarkDelivered records that resume messageID was sent, for ttl.
func (s *Store) MarkDelivered(ctx context.Context, tag, messageID string, ttl time.Duration) error {
	return unavailable("resume mark", s.rdb.Set(ctx, s.k.sent(tag, messageID), "1", ttl).Err())
}
