package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/turncap"
	"github.com/bgjobs/bgjobs/work"
)

// rowWait is how long a task that finds no row is retried: its row may be
// a moment behind it (written in a separate round trip), but a task older
// than this whose row is missing belongs to a deleted job.
const rowWait = time.Minute

// ProcessTask is the asynq handler of turn and work tasks. The registry row
// is the truth: a task whose row has ended does nothing, so a re-run, a late
// delivery or a cancelled job can never run twice or change an outcome.
func (m *Manager) ProcessTask(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	p, err := engine.DecodeJobPayload(t.Payload())
	if err != nil {
		m.log.Error("task payload unreadable; dropping it", slog.String("task_id", id), slog.Any("err", err))
		return fmt.Errorf("%w: payload: %v", asynq.SkipRetry, err)
	}
	tag := bgjobs.Tag(p.Agent, p.Session)
	// Take a slot first, so a job past the turn cap (or its agent's share
	// of it, or of this process's work slots) stays queued.
	if t.Type() == engine.TypeTurn {
		release, err := m.turnCap.Wait(ctx, p.Agent, id)
		if errors.Is(err, turncap.ErrShareFull) {
			err = m.turnsParked.Park(p.Agent, id, err)
		}
		if err != nil {
			return m.stoppedBeforeStart(ctx, tag, id, err)
		}
		m.turnsParked.Took(id)
		defer func() {
			release()
			// The agent's share has a slot free: a turn of it parked here
			// comes back now, else one parked on another process (the cap
			// is the fleet's).
			m.turnsParked.Free(p.Agent)
		}()
	} else {
		if err := m.workShare.Take(ctx, p.Agent, id); err != nil {
			return m.stoppedBeforeStart(ctx, tag, id, err)
		}
		defer m.workShare.Release(p.Agent)
	}
	st, err := m.store.Start(ctx, tag, id, m.now())
	switch {
	case errors.Is(err, registry.ErrEnded):
		return nil // ended already (cancelled, settled by a twin)
	case errors.Is(err, registry.ErrNoJob):
		if p.Created > 0 && m.now().Sub(time.UnixMilli(p.Created)) < rowWait {
			return engine.ErrRowBehind
		}
		return nil // deleted
	case err != nil:
		return err // Redis trouble: asynq tries again later
	}
	j := st.Job
	// This run's outcome settles the job only while it is the latest: the
	// handler may outlive its task (asynq moves on once the context ends)
	// while the job is retried and run again.
	run := &bgjobs.Run{Generation: j.Generation, Attempt: st.Attempt}
	m.log.Info("job running", slog.String("job_id", id), slog.String("agent", j.Agent), slog.Int64("attempt", st.Attempt))
	e := bgjobs.JobEvent(bgjobs.EventRunning, j, bgjobs.StatusRunning, m.now())
	e.Attempt = st.Attempt
	m.feeds.Publish(e)

	limit := m.cfg.RunTimeout
	if j.TimeoutS > 0 {
		limit = time.Duration(j.TimeoutS) * time.Second
	}
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	result, runErr := m.run(runCtx, j)
	if runErr == nil {
		_, err := m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &result, Run: run})
		return err
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.Canceled) && !m.stopping.Load() {
			if errors.Is(m.eng.Stops.Why(id, stopWordWait), asynq.ErrLeaseExpired) {
				// asynq lost this run's lease (Redis out of reach, or this
				// process stalled) and will run the task again: hand the
				// row back for that run.
				_ = m.store.Requeue(context.WithoutCancel(ctx), tag, id, run)
				return ctx.Err()
			}
			// Cancelled through bgjobs (the row is terminal already: a
			// no-op) or from asynq's own tools (asynq task cancel,
			// asynqmon): either way the job ends cancelled, and the retry
			// asynq schedules for a cancelled task finds it ended.
			reason := "cancelled from the queue's tools"
			_, err := m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCancelled, Error: &reason, Run: run})
			return err
		}
		// The server is shutting down (or the task ran out of time): hand
		// the job back and let asynq requeue it.
		_ = m.store.Requeue(context.WithoutCancel(ctx), tag, id, run)
		return ctx.Err()
	}
	msg := runErr.Error()
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		msg = fmt.Sprintf("timed out after %s", limit)
	} else if work.IsRetryable(runErr) {
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		if retried < maxRetry {
			_ = m.store.Requeue(ctx, tag, id, run)
			return runErr
		}
		msg = fmt.Sprintf("gave up after %d attempts: %s", retried+1, msg)
	}
	_, err = m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusFailed, Error: &msg, Run: run})
	return err
}

// stopWordWait bounds the wait for asynq's word on why it stopped a run,
// which it gives as the run's context ends (engine.Stops).
const stopWordWait = 2 * time.Second

// stoppedBeforeStart handles a job that never got a slot: if the row ended
// meanwhile (cancelled while queued) the task is done, otherwise asynq tries
// again later.
func (m *Manager) stoppedBeforeStart(ctx context.Context, tag, id string, err error) error {
	j, lerr := m.store.Load(context.WithoutCancel(ctx), tag, id)
	if lerr == nil && (j == nil || j.Status.Terminal()) {
		return nil
	}
	return err
}

// run does the work of one job.
func (m *Manager) run(ctx context.Context, j *bgjobs.Job) (string, error) {
	switch j.Kind {
	case bgjobs.KindWork:
		kind, ok := m.kinds.Lookup(j.WorkType)
		if !ok {
			return "", fmt.Errorf("work kind %q is not registered in this process", j.WorkType)
		}
		ctx = work.WithJob(ctx, work.JobInfo{ID: j.ID, Agent: j.Agent, OriginSession: j.OriginSession, Description: j.Description})
		return kind.Run(ctx, j.WorkArgs)
	case bgjobs.KindTurn:
		if m.turns == nil {
			return "", errors.New("this process cannot run turns (no A2A runner)")
		}
		agent, err := m.tenants.GetAgent(ctx, j.Agent)
		if err != nil {
			return "", work.Retryable(err)
		}
		if agent == nil || agent.A2AURL == "" {
			return "", fmt.Errorf("agent %q has no a2a_url", j.Agent)
		}
		seq := 0
		tag := bgjobs.Tag(j.Agent, j.OriginSession)
		return m.turns.RunTurn(ctx, bgjobs.Turn{
			AgentURL: agent.A2AURL, JobID: j.ID, OriginSession: j.OriginSession,
			SubagentType: j.SubagentType, Preamble: agent.SubagentTypes[j.SubagentType], Prompt: j.Prompt,
			Progress: func(state, text string) {
				seq++
				m.store.SetProgress(tag, j.ID, bgjobs.CutRunes(text, bgjobs.EventTextChars))
				e := bgjobs.JobEvent(bgjobs.EventProgress, j, bgjobs.StatusRunning, m.now())
				e.Seq, e.State, e.Text = seq, state, text
				m.feeds.Publish(e)
			},
		})
	}
	return "", fmt.Errorf("unknown job kind %q", j.Kind)
}
