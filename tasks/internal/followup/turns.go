package followup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// A turn batch is sealed when its session goes idle, or TurnWindow after
// its last spawn, whichever comes first; then it joins like any batch.

// ArmSeal arms the window timer for a spawn that joined turn batch id at
// spawned.
func (f *Followups) ArmSeal(ctx context.Context, tag, id string, spawned time.Time) error {
	agent, session := bgjobs.SplitTag(tag)
	at := spawned.UnixMilli()
	return f.eng.ArmTimer(ctx, engine.TypeSeal, "seal:"+id+":"+strconv.FormatInt(at, 10),
		engine.ControlPayload{Agent: agent, Session: session, BatchID: id, At: at}, f.cfg.TurnWindow)
}

// errSealEarly makes asynq retry a seal timer that fired before the
// window by this process's clock.
var errSealEarly = errors.New("turn window not over yet")

// ProcessSeal is a turn batch's window timer.
func (f *Followups) ProcessSeal(ctx context.Context, t *asynq.Task) error {
	var p engine.ControlPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: seal payload: %v", asynq.SkipRetry, err)
	}
	tag := bgjobs.Tag(p.Agent, p.Session)
	res, last, err := f.seal(ctx, tag, p.BatchID, f.cfg.TurnWindow)
	if err == nil && res == registry.SealTooEarly && last.UnixMilli() <= p.At {
		// This timer is the last spawn's: it fired early (clocks differ).
		// A later spawn's timer covers the others.
		return errSealEarly
	}
	return err
}

// sealTurns seals every open turn batch of the session now.
func (f *Followups) sealTurns(ctx context.Context, tag string) error {
	ids, err := f.store.OpenTurns(ctx, tag)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, _, err := f.seal(ctx, tag, id, 0); err != nil {
			return err
		}
	}
	return nil
}

func (f *Followups) seal(ctx context.Context, tag, id string, window time.Duration) (registry.SealResult, time.Time, error) {
	res, last, err := f.store.SealTurn(ctx, tag, id, f.now(), window)
	if err == nil && res == registry.SealedJoined {
		err = f.PumpEntry(ctx, tag, registry.Entry{Kind: registry.EntryJoin, Ref: id})
		if IsWaiting(err) {
			err = nil // the join waits for the index; the sweep pumps it
		}
	}
	return res, last, err
}
