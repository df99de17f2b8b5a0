package followup

import (
	"context"
	"errors"
	"log/slog"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Settle ends j with o: one script changes the row and records what must
// follow in the outbox; then the completion is published and the follow-ups
// are moved on. It reports whether this call was the one that ended the
// job. Every path that ends a job comes here: the worker, cancel, a batch
// member that could not be queued, a retry that could not be queued, and
// the reconciler.
func (f *Followups) Settle(ctx context.Context, j *bgjobs.Job, o bgjobs.Outcome) (bool, error) {
	ctx = context.WithoutCancel(ctx) // a settle must not be lost to a cancelled caller
	now := f.now()
	tag := bgjobs.Tag(j.Agent, j.OriginSession)
	entries, err := f.store.Settle(ctx, registry.Settlement{
		Tag: tag, ID: j.ID, Outcome: o, Now: now,
		Announce:     f.mayWake(ctx, j.Agent, j.OriginSession, j.Incognito),
		Index:        indexes(j, o),
		HoldForIndex: f.holdsForIndex(j, o),
		Expire:       bgjobs.IsBackground(j.OriginSession),
	})
	if errors.Is(err, registry.ErrEnded) || errors.Is(err, registry.ErrNoJob) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	e := bgjobs.JobEvent(bgjobs.EventCompleted, j, o.Status, now)
	if o.Result != nil {
		e.Result = *o.Result
	}
	if o.Error != nil {
		e.Error = *o.Error
	}
	f.feeds.Publish(e)
	// What cannot go yet (a report not yet searchable) or fails is moved on
	// later by the indexer or the maintenance sweep.
	for _, entry := range entries {
		if err := f.PumpEntry(ctx, tag, entry); err != nil && !IsWaiting(err) {
			f.log.Warn("follow-up after settle", slog.String("job_id", j.ID), slog.String("entry", entry.String()), slog.Any("err", err))
		}
	}
	metrics.Settled.WithLabelValues(string(o.Status), string(j.Kind)).Inc()
	f.log.Info("job settled", slog.String("job_id", j.ID), slog.String("agent", j.Agent), slog.String("status", string(o.Status)))
	return true, nil
}
