package tasks

import (
	"context"
	"errors"
	"time"

	"github.com/bgjobs/bgjobs"
)

// WaitMax is the longest a spawn may wait for its job (wait_ms).
const WaitMax = 120 * time.Second

// waitGrace lets a waiter that just hit its deadline finish taking the
// result before the pump treats the job as unclaimed.
const waitGrace = 2 * time.Second

// errAwaitingWaiter keeps a w| outbox entry while its caller still waits.
var errAwaitingWaiter = errors.New("a caller is waiting for this job")

// SpawnAndWait spawns and waits up to req.Wait for the job to end. If it
// ends in time, the caller takes the result: the row (result included)
// comes back with delivered true, and the job neither drains nor resumes.
// Otherwise — the budget is spent or ctx ends (the client hung up) — the job
// carries on in the background and is announced as usual.
func (m *Manager) SpawnAndWait(ctx context.Context, req SpawnRequest) (j *Job, existed, delivered bool, err error) {
	if req.Wait < 0 || req.Wait > WaitMax {
		return nil, false, false, bgjobs.FieldError("wait_ms", "between 0 and %d", WaitMax.Milliseconds())
	}
	j, existed, err = m.Spawn(ctx, req)
	if err != nil || existed || req.Wait == 0 {
		return j, existed, false, err
	}
	tag := Tag(j.Agent, j.OriginSession)
	deadline := time.NewTimer(req.Wait)
	defer deadline.Stop()
	delay := time.Millisecond
	for {
		select {
		case <-ctx.Done():
			m.releaseWait(tag, j.ID, "release")
			return j, false, false, ctx.Err()
		case <-deadline.C:
			m.releaseWait(tag, j.ID, "release")
			row, err := m.store.load(context.WithoutCancel(ctx), tag, j.ID)
			if err != nil || row == nil {
				return j, false, false, err
			}
			return row, false, false, nil
		case <-time.After(delay):
		}
		delay = min(delay*2, 25*time.Millisecond)
		row, err := m.store.load(ctx, tag, j.ID)
		if err != nil || row == nil || !row.Status.Terminal() {
			continue
		}
		if m.releaseWait(tag, j.ID, "take") == 1 {
			row.Notified = true
		}
		return row, false, true, nil
	}
}

// releaseWait runs releaseWaitCmd and pumps an announcement it handed back.
func (m *Manager) releaseWait(tag, id, mode string) int {
	ctx := context.Background()
	n, err := releaseWaitCmd.Run(ctx, m.rdb, []string{m.k.job(tag, id), m.k.pending(tag), m.k.outbox(tag)},
		mode, m.now().UnixMilli(), int64(m.cfg.Retention.Seconds())).Int()
	if err != nil {
		m.log.Warn("end a wait", "job_id", id, "err", err)
		return 0
	}
	if n == 2 {
		if err := m.pumpEntry(ctx, tag, "r|"+id, m.now().UnixMilli()); err != nil && !errors.Is(err, errAwaitingIndex) {
			m.log.Warn("announce after a wait", "job_id", id, "err", err)
		}
	}
	return n
}
