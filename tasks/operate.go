package tasks

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// Retry runs an ended job again as a new attempt. A failed or cancelled job
// is retried; a completed one only with force. The new outcome drains once,
// and a turn's new report supersedes the old one in memory.
func (m *Manager) Retry(ctx context.Context, id string, force bool) (*Job, error) {
	j, err := m.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	tag := Tag(j.Agent, j.OriginSession)
	n, err := retryCmd.Run(ctx, m.rdb, []string{m.k.job(tag, id), m.k.pending(tag)}, boolStr(force), m.k.sessionPrefix(tag)).Int()
	if err != nil {
		return nil, unavailable("retry", err)
	}
	switch n {
	case -1:
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
	case -2:
		return nil, bgjobs.Errorf(bgjobs.EConflict, "job %s is still %s", id, j.Status)
	case -3:
		return nil, bgjobs.Errorf(bgjobs.EConflict, "job %s completed; retry it with force to run it again", id)
	}
	m.rdb.ZAdd(ctx, m.k.active(), redis.Z{Score: float64(m.now().UnixMilli()), Member: id})
	_ = m.insp.DeleteTask(m.queueOf(j), id) // an archived leftover would hold the task id
	if err := m.enqueue(ctx, j); err != nil {
		msg := "retry could not be queued: " + err.Error()
		_, _ = m.settle(ctx, j, Outcome{Status: StatusFailed, Error: &msg})
		return nil, err
	}
	m.log.Info("job retried", "job_id", id, "agent", j.Agent)
	return m.store.lookup(ctx, id)
}

func (m *Manager) queueOf(j *Job) string {
	if j.Kind == KindTurn {
		return m.Queue(QueueTurns)
	}
	return m.Queue(QueueWork)
}

// PurgeRequest selects ended, notified jobs to remove.
type PurgeRequest struct {
	// Statuses to purge; empty means every terminal status.
	Statuses []Status
	// OlderThan keeps jobs that ended more recently.
	OlderThan time.Duration
	// DryRun lists without removing.
	DryRun bool
}

// Purge removes the registry rows of ended jobs whose result was already
// handed over, and their leftover asynq tasks; never a queued, running or
// undrained job. It returns the jobs it removed (or would remove).
func (m *Manager) Purge(ctx context.Context, req PurgeRequest) ([]*Job, error) {
	for _, s := range req.Statuses {
		if !s.Terminal() {
			return nil, bgjobs.FieldError("status", "only ended jobs can be purged: completed, failed or cancelled, not %q", s)
		}
	}
	cutoff := m.now().Add(-req.OlderThan)
	var out []*Job
	iter := m.rdb.Scan(ctx, 0, m.k.ns+":agent:*:jobs", 200).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		ids, err := m.rdb.ZRangeByScore(ctx, key, &redis.ZRangeBy{Min: "-inf", Max: fmt.Sprint(cutoff.UnixMilli())}).Result()
		if err != nil {
			return out, err
		}
		for _, id := range ids {
			j, err := m.store.lookup(ctx, id)
			if err != nil {
				return out, err
			}
			if j == nil {
				m.rdb.ZRem(ctx, key, id)
				continue
			}
			if !purgeable(j, req, cutoff) {
				continue
			}
			out = append(out, j)
			if req.DryRun {
				continue
			}
			if _, err := m.store.remove(ctx, j); err != nil {
				return out, err
			}
			_ = m.insp.DeleteTask(m.queueOf(j), id)
		}
	}
	return out, iter.Err()
}

func purgeable(j *Job, req PurgeRequest, cutoff time.Time) bool {
	if !j.Status.Terminal() || !j.Notified || j.CompletedAt == nil || j.CompletedAt.After(cutoff) {
		return false
	}
	if len(req.Statuses) == 0 {
		return true
	}
	for _, s := range req.Statuses {
		if j.Status == s {
			return true
		}
	}
	return false
}

// ParseStatuses reads "failed,cancelled".
func ParseStatuses(s string) ([]Status, error) {
	var out []Status
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !ValidStatus(part) {
			return nil, bgjobs.FieldError("status", "unknown status %q", part)
		}
		out = append(out, Status(part))
	}
	return out, nil
}

// Lookup returns any agent's job by id (operators' tools), or not_found.
func (m *Manager) Lookup(ctx context.Context, id string) (*Job, error) {
	if !bgjobs.ValidJobID(id) {
		return nil, bgjobs.FieldError("id", "job ids look like bg-0123456789ab")
	}
	j, err := m.store.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if j == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
	}
	return j, nil
}
