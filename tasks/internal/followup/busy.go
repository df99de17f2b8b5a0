package followup

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// The busy lease: an agent inside a turn holds its session's nudges; when
// the turn ends (Idle) or the lease lapses, one coalesced nudge fires if
// anything is still undrained.

const (
	// BusyTTLMax caps one busy lease; an agent renews for longer turns.
	BusyTTLMax = 24 * time.Hour
	// BusyTTLDefault is the lease when a busy call names none.
	BusyTTLDefault = 600 * time.Second
)

// Busy marks a session inside a turn for ttl and arms the timer that ends
// the lease should no idle call come.
func (f *Followups) Busy(ctx context.Context, agent, session string, ttl time.Duration) error {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return err
	}
	if ttl <= 0 || ttl > BusyTTLMax {
		return bgjobs.FieldError("ttl_s", "between 1 and %d", int(BusyTTLMax.Seconds()))
	}
	tag := bgjobs.Tag(agent, session)
	expiry := f.now().Add(ttl)
	if err := f.wake.SetBusy(ctx, tag, expiry, ttl+time.Minute); err != nil {
		return err
	}
	err := f.eng.ArmTimer(ctx, engine.TypeLapse, "lapse:"+registry.Digest(tag)+":"+strconv.FormatInt(expiry.UnixMilli(), 10),
		engine.ControlPayload{Agent: agent, Session: session, Until: expiry.UnixMilli()}, ttl+250*time.Millisecond)
	if err != nil {
		return bgjobs.Unavailable("busy lapse timer", err)
	}
	return nil
}

// Idle ends a session's busy lease.
func (f *Followups) Idle(ctx context.Context, agent, session string) error {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return err
	}
	_, err := f.endBusy(ctx, bgjobs.Tag(agent, session), false)
	return err
}

// IsBusy reports whether a session holds an unexpired busy lease.
func (f *Followups) IsBusy(ctx context.Context, agent, session string) (bool, error) {
	until, err := f.wake.BusyUntil(ctx, bgjobs.Tag(agent, session))
	return until.After(f.now()), err
}

func (f *Followups) endBusy(ctx context.Context, tag string, lapse bool) (bool, error) {
	ended, folded, err := f.wake.EndBusy(ctx, tag, f.now(), lapse)
	if err != nil {
		return false, err
	}
	if !lapse || ended {
		// The turn is over: its spawns are all in.
		if err := f.sealTurns(ctx, tag); err != nil {
			return ended, err
		}
	}
	if folded {
		if err := f.Pump(ctx, tag); err != nil {
			f.log.Warn("pump after idle", slog.Any("err", err))
		}
	}
	return ended, nil
}
