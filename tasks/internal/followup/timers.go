package followup

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// A batch's straggler timeout is an entry of the stragglers set, armed by
// its first settle and dropped by its full join: two commands that share
// pipelines, where an asynq timer task took two scripts and an inspector
// round trip. Every process sweeps the set when an entry it knows of is
// due (SweepStragglers); the maintenance leader sweeps it on every tick, so
// a timeout armed by a process that died is still kept.

// stragglerSweep bounds one sweep's batch of due timeouts.
const stragglerSweep = 100

// expectStraggler notes a straggler timeout due at due, so this process's
// sweep looks then.
func (f *Followups) expectStraggler(due time.Time) {
	at := due.UnixMilli()
	for {
		cur := f.stragglerDue.Load()
		if cur != 0 && cur <= at || f.stragglerDue.CompareAndSwap(cur, at) {
			return
		}
	}
}

// StragglerDue reports whether a straggler timeout this process knows of
// is due.
func (f *Followups) StragglerDue() bool {
	at := f.stragglerDue.Load()
	return at != 0 && f.now().UnixMilli() >= at
}

// SweepStragglers forces a partial join of every batch whose straggler
// timeout is due (forceJoinCmd: the claim a full join takes, so exactly one
// of the two joins), and notes when the next one is due.
func (f *Followups) SweepStragglers(ctx context.Context) error {
	f.stragglerDue.Store(0)
	for {
		now := f.now()
		due, next, err := f.strag.Due(ctx, now, stragglerSweep)
		if err != nil {
			f.expectStraggler(now) // look again at the next tick
			return err
		}
		for i, s := range due {
			if err := f.forceJoin(ctx, s.Tag, s.BatchID); err != nil {
				f.expectStraggler(now)
				_ = f.strag.Drop(ctx, due[:i])
				return err
			}
		}
		if err := f.strag.Drop(ctx, due); err != nil {
			f.expectStraggler(now)
			return err
		}
		if len(due) < stragglerSweep {
			if !next.IsZero() {
				f.expectStraggler(next)
			}
			return nil
		}
	}
}

// forceJoin joins a batch on its straggler timeout unless it joined.
func (f *Followups) forceJoin(ctx context.Context, tag, batchID string) error {
	joined, err := f.store.ForceJoin(ctx, tag, batchID, f.now())
	if err != nil || !joined {
		return err
	}
	f.log.Info("batch joined partially on its straggler timeout", slog.String("batch_id", batchID))
	// The outbox holds the join: a failure here is the outbox sweep's.
	if err := f.PumpEntry(ctx, tag, registry.Entry{Kind: registry.EntryJoin, Ref: batchID}); err != nil && !IsWaiting(err) {
		f.log.Warn("pump a straggler's join", slog.String("batch_id", batchID), slog.Any("err", err))
	}
	return nil
}

// ProcessStraggler runs a straggler timer armed as an asynq control task
// (how versions before the stragglers set armed them), so one still queued
// after an upgrade joins its batch as it would have.
func (f *Followups) ProcessStraggler(ctx context.Context, t *asynq.Task) error {
	var p engine.ControlPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: straggler payload: %v", asynq.SkipRetry, err)
	}
	return f.forceJoin(ctx, bgjobs.Tag(p.Agent, p.Session), p.BatchID)
}

// ProcessLapse runs when a busy lease may have lapsed with no idle call.
func (f *Followups) ProcessLapse(ctx context.Context, t *asynq.Task) error {
	var p engine.ControlPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: lapse payload: %v", asynq.SkipRetry, err)
	}
	if p.Until > 0 && f.now().UnixMilli() < p.Until {
		// asynq keeps a timer's due time in whole seconds, so it may fire
		// up to a second early. Before its lease ends a lapse changes
		// nothing, and the nudges the session holds would wait for an idle
		// call that may never come: look again shortly.
		return fmt.Errorf("%w: the busy lease runs until %s", engine.ErrLater, time.UnixMilli(p.Until).UTC().Format(time.RFC3339Nano))
	}
	_, err := f.endBusy(ctx, bgjobs.Tag(p.Agent, p.Session), true)
	return err
}
