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

// The timers are asynq tasks in the control queue, so they survive the
// process that armed them.

// ProcessStraggler is the batch's straggler timer: it forces a partial join
// unless the batch joined already.
func (f *Followups) ProcessStraggler(ctx context.Context, t *asynq.Task) error {
	var p engine.ControlPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: straggler payload: %v", asynq.SkipRetry, err)
	}
	tag := bgjobs.Tag(p.Agent, p.Session)
	joined, err := f.store.ForceJoin(ctx, tag, p.BatchID, f.now())
	if err != nil || !joined {
		return err
	}
	f.log.Info("batch joined partially on its straggler timeout", slog.String("batch_id", p.BatchID))
	return f.PumpEntry(ctx, tag, registry.Entry{Kind: registry.EntryJoin, Ref: p.BatchID})
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
