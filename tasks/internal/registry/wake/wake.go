// Package wake keeps a session's wake-up state in Redis: the busy lease
// and the nudges it holds, the resume storm guard, and the marks that keep
// a resume's delivery single. Its keys come from registry.Keys, like every
// other bgjobs key; its scripts are in scripts.go.
package wake

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Store is a session's wake-up state.
type Store struct {
	rdb redis.UniversalClient
	w   *pipeline.Writer
	k   registry.Keys
}

// New returns the wake-up state on rdb, writing through w, with keys k.
func New(rdb redis.UniversalClient, w *pipeline.Writer, k registry.Keys) *Store {
	return &Store{rdb: rdb, w: w, k: k}
}

var boolStr = registry.Flag

// SetBusy starts or extends a session's busy lease until expiry.
func (s *Store) SetBusy(ctx context.Context, tag string, expiry time.Time, keyTTL time.Duration) error {
	return registry.Unavailable("busy", s.w.Script(ctx, busyCmd, []string{s.k.Busy(tag)}, expiry.UnixMilli(), int64(keyTTL.Seconds())).Err())
}

// BusyUntil returns the end of a session's busy lease (zero when none).
func (s *Store) BusyUntil(ctx context.Context, tag string) (time.Time, error) {
	v, err := s.rdb.Get(ctx, s.k.Busy(tag)).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, registry.Unavailable("busy", err)
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
	res, err := s.w.Script(ctx, idleCmd, []string{s.k.Busy(tag), s.k.Held(tag), s.k.Pending(tag), s.k.Outbox(tag)},
		now.UnixMilli(), mode).Int64Slice()
	if err != nil || len(res) != 2 {
		return false, false, registry.Unavailable("idle", err)
	}
	return res[0] == 1, res[1] == 1, nil
}

// StormGate passes a singleton resume through the session's storm guard
// (stormCmd). send: it goes now, and a window of the given length opened
// (or it had been let through before). Otherwise it waits in the storm
// queue, and the window ends in wait.
func (s *Store) StormGate(ctx context.Context, tag, jobID string, generation int, now time.Time, window, firstCap time.Duration) (send bool, wait time.Duration, err error) {
	n, err := s.w.Script(ctx, stormCmd, []string{s.k.StormWindow(tag), s.k.StormQueue(tag), s.k.Job(tag, jobID)},
		jobID, now.UnixMilli(), window.Milliseconds(), generation, firstCap.Milliseconds()).Int64()
	if err != nil {
		return false, 0, registry.Unavailable("storm guard", err)
	}
	if n == 1 {
		return true, window, nil
	}
	// The script answers -1 - remaining ms for a queued job.
	return false, time.Duration(-1-n) * time.Millisecond, nil
}

// StormFlush ends a session's storm window (stormFlushCmd): what queued
// behind it becomes one EntryMerged, returned with ok, and left is the new
// window's length. If the window is still open (and not force), left says
// for how long.
func (s *Store) StormFlush(ctx context.Context, tag string, now time.Time, window, maxCap time.Duration, force bool) (e registry.Entry, ok bool, left time.Duration, err error) {
	res, err := s.w.Script(ctx, stormFlushCmd, []string{s.k.StormWindow(tag), s.k.StormQueue(tag), s.k.Outbox(tag)},
		now.UnixMilli(), window.Milliseconds(), boolStr(force), maxCap.Milliseconds()).Slice()
	if err != nil || len(res) != 2 {
		return registry.Entry{}, false, 0, registry.Unavailable("storm flush", err)
	}
	raw, _ := res[0].(string)
	wait, _ := res[1].(int64)
	if raw == "" {
		return registry.Entry{}, false, time.Duration(wait) * time.Millisecond, nil
	}
	return registry.ParseEntry(raw, now.UnixMilli()), true, time.Duration(wait) * time.Millisecond, nil
}

// Delivery is what BeginDelivery decided for a resume.
type Delivery int

const (
	// DeliverNow: the session's delivery lock is the caller's; send the
	// resume, then EndDelivery.
	DeliverNow Delivery = iota
	// DeliveryHeld: the session is busy; its trigger waits for the fold.
	DeliveryHeld
	// DeliveryInFlight: another resume of the session is being sent.
	DeliveryInFlight
	// DeliveredBefore: this resume was sent already.
	DeliveredBefore
)

// BeginDelivery decides whether resume messageID of the session, about
// trigger, goes now (beginDeliveryCmd): held while the session is busy,
// skipped if sent before, one of a session at a time under a lock of
// lockTTL.
func (s *Store) BeginDelivery(ctx context.Context, tag, trigger, messageID string, now time.Time, lockTTL time.Duration) (Delivery, error) {
	n, err := s.w.Script(ctx, beginDeliveryCmd, []string{s.k.Busy(tag), s.k.Held(tag), s.k.Sent(tag, messageID), s.k.Inflight(tag)},
		now.UnixMilli(), trigger, messageID, lockTTL.Milliseconds()).Int()
	return Delivery(n), registry.Unavailable("begin a resume's delivery", err)
}

// EndDelivery frees the lock BeginDelivery took and, if the resume went
// out (sentTTL > 0), marks it sent for sentTTL (endDeliveryCmd).
func (s *Store) EndDelivery(ctx context.Context, tag, messageID string, sentTTL time.Duration) error {
	err := s.w.Script(ctx, endDeliveryCmd, []string{s.k.Sent(tag, messageID), s.k.Inflight(tag)}, messageID, sentTTL.Milliseconds()).Err()
	return registry.Unavailable("end a resume's delivery", err)
}
