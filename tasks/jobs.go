package tasks

import (
	"context"
	"errors"
	"log/slog"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/maintenance"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Get returns the caller's job, or not_found (also for another agent's id).
func (m *Manager) Get(ctx context.Context, agent, id string) (*bgjobs.Job, error) {
	j, err := m.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if j.Agent != agent {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
	}
	return j, nil
}

// GetMany returns the agent's jobs among ids, in order, in two round trips
// whatever their number (a batch page lists up to 1,000); ids that are not
// the agent's, or no longer exist, are left out.
func (m *Manager) GetMany(ctx context.Context, agent string, ids []string) ([]*bgjobs.Job, error) {
	js, err := m.store.LookupMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := js[:0]
	for _, j := range js {
		if j != nil && j.Agent == agent {
			out = append(out, j)
		}
	}
	return out, nil
}

// Lookup returns any agent's job by id (operators' tools), or not_found.
func (m *Manager) Lookup(ctx context.Context, id string) (*bgjobs.Job, error) {
	if !bgjobs.ValidJobID(id) {
		return nil, bgjobs.FieldError("id", "job ids look like bg-0123456789ab")
	}
	j, err := m.store.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
	}
	return j, nil
}

// Cancel stops a queued or running job: it ends cancelled (and is drained
// like any other), its queued task is deleted, a running one is told to stop.
// The jobs its own turn spawned (session background:<id>) are cancelled with
// it, and theirs in turn: their results were for that turn, and nobody
// else reads them.
func (m *Manager) Cancel(ctx context.Context, agent, id string) (*bgjobs.Job, error) {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	if err := m.cancel(ctx, j, "cancelled by request"); err != nil {
		return nil, err
	}
	return m.Get(ctx, agent, id)
}

func (m *Manager) cancel(ctx context.Context, j *bgjobs.Job, reason string) error {
	settled, err := m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCancelled, Error: &reason})
	if err != nil {
		return err
	}
	if !settled {
		return bgjobs.Errorf(bgjobs.EConflict, "job %s already ended", j.ID)
	}
	m.eng.StopTask(j)
	m.cancelSpawned(ctx, j)
	return nil
}

// cancelSpawned cancels the unfinished jobs parent's turn spawned. The
// nesting is at most BGJOBS_MAX_DEPTH deep, so the recursion is too. A
// child spawned after this looks is not cancelled: its parent's row has
// ended by then, and it runs like any job.
func (m *Manager) cancelSpawned(ctx context.Context, parent *bgjobs.Job) {
	reason := "cancelled with " + parent.ID + ", whose turn spawned it"
	req := ListRequest{Agent: parent.Agent, Session: bgjobs.BackgroundPrefix + parent.ID, Limit: ListLimitMax}
	for {
		jobs, next, err := m.List(ctx, req)
		if err != nil {
			m.log.Warn("cancel spawned jobs", slog.String("job_id", parent.ID), slog.Any("err", err))
			return
		}
		var open []string
		for _, c := range jobs {
			if !c.Status.Terminal() {
				open = append(open, c.ID)
			}
		}
		// The list's rows leave the prompt and result out: settle whole rows,
		// read in one round trip for the page.
		rows, err := m.GetMany(ctx, parent.Agent, open)
		if err != nil {
			m.log.Warn("cancel spawned jobs", slog.String("job_id", parent.ID), slog.Any("err", err))
			return
		}
		for _, row := range rows {
			if err := m.cancel(ctx, row, reason); err != nil && bgjobs.ErrorCode(err) != bgjobs.EConflict {
				m.log.Warn("cancel a spawned job", slog.String("job_id", row.ID), slog.Any("err", err))
			}
		}
		if next == "" {
			return
		}
		req.Cursor = next
	}
}

// Ack marks a finished job consumed another way, so drain skips it. It
// reports whether this call flipped it.
func (m *Manager) Ack(ctx context.Context, agent, id string) (bool, error) {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return false, err
	}
	tag, nonce := bgjobs.Tag(j.Agent, j.OriginSession), handoverNonce()
	flipped, err := m.hand.Ack(ctx, tag, id, nonce, m.now())
	if lost(ctx, err, flipped) {
		m.giveBack(tag, nonce, "", false)
	}
	return flipped, m.jobError(err, j)
}

// Delete removes an ended job.
func (m *Manager) Delete(ctx context.Context, agent, id string) error {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return err
	}
	if err := m.store.Remove(ctx, j); err != nil {
		return m.jobError(err, j)
	}
	m.eng.DeleteTask(j) // archived leftovers, if any
	return nil
}

// RetryFor is Retry of one of agent's own jobs: another agent's job does
// not exist for it (404), as for Get.
func (m *Manager) RetryFor(ctx context.Context, agent, id string, force bool) (*bgjobs.Job, error) {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	return m.retry(ctx, j, force)
}

// Retry runs an ended job again as a new attempt. A failed or cancelled job
// is retried; a completed one only with force. The new outcome drains once,
// and a turn's new report supersedes the old one in memory.
func (m *Manager) Retry(ctx context.Context, id string, force bool) (*bgjobs.Job, error) {
	j, err := m.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return m.retry(ctx, j, force)
}

// retry is Retry of the row j, read just before.
func (m *Manager) retry(ctx context.Context, j *bgjobs.Job, force bool) (*bgjobs.Job, error) {
	if err := m.store.Retry(ctx, j, force, m.now()); err != nil {
		return nil, m.jobError(err, j)
	}
	m.eng.DeleteTask(j) // an archived leftover would hold the task id
	// The row as the retry left it, queued: once its task is in, a worker
	// may have started or even ended it.
	queued, err := m.store.Load(ctx, bgjobs.Tag(j.Agent, j.OriginSession), j.ID)
	if err != nil {
		return nil, err
	}
	if queued == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", j.ID) // deleted meanwhile
	}
	if err := m.eng.EnqueueJob(ctx, j); err != nil {
		msg := "retry could not be queued: " + err.Error()
		_, _ = m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusFailed, Error: &msg})
		return nil, err
	}
	m.log.Info("job retried", "job_id", j.ID, "agent", j.Agent)
	return queued, nil
}

// jobError turns the registry's outcome for j into the API's error.
func (m *Manager) jobError(err error, j *bgjobs.Job) error {
	switch {
	case errors.Is(err, registry.ErrNoJob):
		return bgjobs.Errorf(bgjobs.ENotFound, "no job %s", j.ID)
	case errors.Is(err, registry.ErrNotEnded):
		return bgjobs.Errorf(bgjobs.EConflict, "job %s is still %s", j.ID, j.Status)
	case errors.Is(err, registry.ErrCompleted):
		return bgjobs.Errorf(bgjobs.EConflict, "job %s completed; retry it with force to run it again", j.ID)
	case errors.Is(err, registry.ErrEnded):
		return bgjobs.Errorf(bgjobs.EConflict, "job %s already ended", j.ID)
	}
	return err
}

// PurgeRequest selects ended, notified jobs to remove.
type PurgeRequest = maintenance.PurgeRequest

// Purge removes the registry rows of ended jobs whose result was already
// handed over, and their leftover asynq tasks; never a queued, running or
// undrained job. It returns the jobs it removed (or would remove).
func (m *Manager) Purge(ctx context.Context, req PurgeRequest) ([]*bgjobs.Job, error) {
	return m.maint.Purge(ctx, req)
}
