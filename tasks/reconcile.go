package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func redisZ(score int64, member string) redis.Z {
	return redis.Z{Score: float64(score), Member: member}
}

// reconcileGrace skips jobs younger than this: their task may be a moment
// away from being enqueued.
const reconcileGrace = time.Minute

// lostActiveAfter is how long a task may sit active in asynq with no live
// worker reporting it before the job is declared lost. asynq's own recoverer
// re-queues an expired lease within about 90 s; past this it never will
// (asynq #1144, a lease entry gone missing).
const lostActiveAfter = 5 * time.Minute

// Reconciler settles jobs whose engine lost them: a row that is not terminal
// while its asynq task is gone (deleted, purged) or archived after its last
// retry ends failed with the reason, so nothing stays queued or running
// forever. It runs at start and every ReconcileInterval; several processes
// may run it at once, since every settle is compare-and-set.
type Reconciler struct {
	m    *Manager
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// NewReconciler returns a reconciler; Start runs it.
func (m *Manager) NewReconciler() *Reconciler { return &Reconciler{m: m} }

// Start sweeps once now and then every interval until Stop.
func (r *Reconciler) Start(ctx context.Context) {
	ctx, r.stop = context.WithCancel(ctx)
	r.wg.Go(func() {
		tick := time.NewTicker(r.m.cfg.ReconcileInterval)
		defer tick.Stop()
		for {
			if n, err := r.m.Reconcile(ctx); err != nil && ctx.Err() == nil {
				r.m.log.Warn("reconcile", slog.Any("err", err))
			} else if n > 0 {
				r.m.log.Info("reconcile settled lost jobs", slog.Int("count", n))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

// Stop ends the loop and waits for a sweep in progress.
func (r *Reconciler) Stop() {
	if r.stop != nil {
		r.stop()
	}
	r.wg.Wait()
}

// Reconcile runs one sweep and returns how many jobs it settled. It also
// moves on any outbox a crash left behind and drops index entries of rows
// that expired.
func (m *Manager) Reconcile(ctx context.Context) (int, error) {
	if err := m.PumpAll(ctx); err != nil {
		m.log.Warn("outbox sweep", slog.Any("err", err))
	}
	if _, err := m.sweepIndex(ctx, indexSweepBatches); err != nil && ctx.Err() == nil {
		m.log.Warn("index sweep", slog.Any("err", err))
	}
	cutoff := m.now().Add(-reconcileGrace).UnixMilli()
	ids, err := m.rdb.ZRangeByScore(ctx, m.k.active(), &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(cutoff, 10)}).Result()
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	live, err := m.liveTaskIDs()
	if err != nil {
		return 0, err
	}
	settled := 0
	for _, id := range ids {
		if ctx.Err() != nil {
			return settled, ctx.Err()
		}
		j, err := m.store.lookup(ctx, id)
		if err != nil {
			return settled, err
		}
		if j == nil || j.Status.Terminal() {
			m.rdb.ZRem(ctx, m.k.active(), id)
			continue
		}
		reason := m.lostReason(j, live)
		if reason == "" {
			continue
		}
		ok, err := m.settle(ctx, j, Outcome{Status: StatusFailed, Error: &reason})
		if err != nil {
			return settled, err
		}
		if ok {
			settled++
			m.log.Warn("job lost by its engine; settled failed", slog.String("job_id", id), slog.String("reason", reason))
		}
	}
	return settled, nil
}

// lostReason says why j can never end on its own, or "" if it still can.
func (m *Manager) lostReason(j *Job, live map[string]bool) string {
	info, err := m.insp.GetTaskInfo(m.queueOf(j), j.ID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return "its queued task is gone (deleted or purged from the queue); it will not run"
	case err != nil:
		return "" // cannot tell now; the next sweep will
	case info.State == asynq.TaskStateArchived:
		return fmt.Sprintf("gave up after %d attempts: %s", info.Retried+1, info.LastErr)
	case info.State == asynq.TaskStateActive && !live[j.ID] && j.StartedAt != nil &&
		m.now().Sub(*j.StartedAt) > lostActiveAfter:
		return "its worker lost the task (active with no live worker)"
	}
	return ""
}

// liveTaskIDs lists the tasks live asynq workers report running.
func (m *Manager) liveTaskIDs() (map[string]bool, error) {
	servers, err := m.insp.Servers()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, s := range servers {
		for _, w := range s.ActiveWorkers {
			live[w.TaskID] = true
		}
	}
	return live, nil
}

// A row expires (retention after it was notified) on its own, but its id
// stays in the job index and in its session's and agent's job lists, which
// would grow without end. Each sweep walks on through the index from where
// the last one stopped, indexSweepBatches HSCAN pages of indexSweepCount,
// and drops the entries whose row is gone: a full cycle over a million
// retained jobs takes a few hours of sweeps, at a few round trips each.
const (
	indexSweepBatches = 4
	indexSweepCount   = 500
)

// sweepIndex runs up to batches pages of the index walk and returns how
// many stale entries it dropped.
func (m *Manager) sweepIndex(ctx context.Context, batches int) (int, error) {
	cursor, err := m.rdb.Get(ctx, m.k.jobIndexCursor()).Uint64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	dropped := 0
	for range batches {
		kv, next, err := m.rdb.HScan(ctx, m.k.jobIndex(), cursor, "", indexSweepCount).Result()
		if err != nil {
			return dropped, err
		}
		n, err := m.dropStale(ctx, kv)
		dropped += n
		if err != nil {
			return dropped, err
		}
		cursor = next
		if cursor == 0 {
			break // a full cycle; the next sweep starts over
		}
	}
	return dropped, m.rdb.Set(ctx, m.k.jobIndexCursor(), cursor, 0).Err()
}

// dropStale removes the entries among kv (id, tag, id, tag …) whose row no
// longer exists. A row is written before its index entry and ids are never
// reused, so a missing row stays missing.
func (m *Manager) dropStale(ctx context.Context, kv []string) (int, error) {
	exists := make([]*redis.IntCmd, 0, len(kv)/2)
	if _, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := 0; i+1 < len(kv); i += 2 {
			exists = append(exists, p.Exists(ctx, m.k.job(kv[i+1], kv[i])))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	dropped := 0
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, e := range exists {
			if e.Err() != nil || e.Val() != 0 {
				continue
			}
			id, tag := kv[2*i], kv[2*i+1]
			agent, _ := splitTag(tag)
			p.HDel(ctx, m.k.jobIndex(), id)
			p.ZRem(ctx, m.k.sessionJobs(tag), id)
			p.ZRem(ctx, m.k.agentJobs(agent), id)
			dropped++
		}
		return nil
	})
	return dropped, err
}
