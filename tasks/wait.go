package tasks

import (
	"context"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/followup"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
)

// WaitMax is the longest a spawn may wait for its job (wait_ms).
const WaitMax = 120 * time.Second

// SpawnAndWait spawns and waits up to req.Wait for the job to end. If it
// ends in time, the caller takes the result: the row (result included)
// comes back with delivered true, and the job neither drains nor resumes.
// Otherwise — the budget is spent or ctx ends (the client hung up) — the job
// carries on in the background and is announced as usual.
func (m *Manager) SpawnAndWait(ctx context.Context, req SpawnRequest) (j *bgjobs.Job, existed, delivered bool, err error) {
	if req.Wait < 0 || req.Wait > WaitMax {
		return nil, false, false, bgjobs.FieldError("wait_ms", "between 0 and %d", WaitMax.Milliseconds())
	}
	j, existed, err = m.Spawn(ctx, req)
	if err != nil || existed || req.Wait == 0 {
		return j, existed, false, err
	}
	tag := bgjobs.Tag(j.Agent, j.OriginSession)
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	delay := time.Millisecond
	for {
		select {
		case <-ctx.Done():
			_, _ = m.endWait(tag, j.ID, false, "")
			return j, false, false, ctx.Err()
		case <-deadline.C:
			_, _ = m.endWait(tag, j.ID, false, "")
			row, err := m.store.Load(context.WithoutCancel(ctx), tag, j.ID)
			if err != nil || row == nil {
				return j, false, false, err
			}
			return row, false, false, nil
		case <-time.After(delay):
		}
		delay = min(delay*2, 25*time.Millisecond)
		row, err := m.store.Load(ctx, tag, j.ID)
		if err != nil || row == nil || !row.Status.Terminal() {
			continue
		}
		// The take is a hand-over: if the caller hangs up while it runs,
		// the result goes back to the drain, announced as usual.
		nonce := handoverNonce()
		end, err := m.endWait(tag, j.ID, true, nonce)
		if lost(ctx, err, end == handover.WaitTaken) {
			m.giveBack(tag, nonce, "", true)
			return j, false, false, bgjobs.Unavailable("wait", ctx.Err())
		}
		if end == handover.WaitTaken {
			row.Notified = true
		}
		return row, false, true, nil
	}
}

// endWait ends the wait, taking the result (with a hand-over nonce) or
// handing its announcement back to the pump.
func (m *Manager) endWait(tag, id string, take bool, nonce string) (handover.WaitEnd, error) {
	ctx := context.Background()
	end, err := m.hand.ReleaseWait(ctx, tag, id, take, nonce, m.now())
	if err != nil {
		m.log.Warn("end a wait", "job_id", id, "err", err)
		return handover.WaitNothing, err
	}
	if end == handover.WaitHandedBack {
		err := m.follow.PumpEntry(ctx, tag, registry.Entry{Kind: registry.EntryAnnounce, Ref: id, At: m.now().UnixMilli()})
		if err != nil && !followup.IsWaiting(err) {
			m.log.Warn("announce after a wait; the sweep retries", "job_id", id, "err", err)
		}
	}
	return end, nil
}
