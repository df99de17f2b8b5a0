package maintenance

import (
	"context"
	"errors"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// PurgeRequest selects ended, notified jobs to remove.
type PurgeRequest struct {
	// Statuses to purge; empty means every terminal status.
	Statuses []bgjobs.Status
	// OlderThan keeps jobs that ended more recently.
	OlderThan time.Duration
	// Agent, when set, purges only this agent's jobs.
	Agent string
	// DryRun lists without removing.
	DryRun bool
}

// Purge removes the registry rows of ended jobs whose result was already
// handed over, and their leftover asynq tasks; never a queued, running or
// undrained job. It returns the jobs it removed (or would remove), without
// their prompts and results, as lists give them.
//
// It reads an agent's job ids and rows about purgePage at a time: read all
// at once, the rows of a deployment with a million ended jobs, reports and
// all, were loaded into memory together before the first was removed.
func (m *Maintainer) Purge(ctx context.Context, req PurgeRequest) ([]*bgjobs.Job, error) {
	for _, s := range req.Statuses {
		if !s.Terminal() {
			return nil, bgjobs.FieldError("status", "only ended jobs can be purged: completed, failed or cancelled, not %q", s)
		}
	}
	cutoff := m.Now().Add(-req.OlderThan)
	agents, err := m.Store.AgentsWithJobs(ctx)
	if err != nil {
		return nil, err
	}
	var out []*bgjobs.Job
	for _, agent := range agents {
		if req.Agent != "" && agent != req.Agent {
			continue
		}
		err := m.Store.EachAgentJobBefore(ctx, agent, cutoff, purgePage, func(page []string) error {
			jobs, err := m.Store.LookupMany(ctx, page)
			if err != nil {
				return err
			}
			for i, j := range jobs {
				if j == nil {
					m.Store.Unlist(registry.JobList{Agent: agent}, page[i])
					continue
				}
				if !purgeable(j, req, cutoff, m.Now()) {
					continue
				}
				if !req.DryRun {
					err := m.Store.Remove(ctx, j)
					if errors.Is(err, registry.ErrNoJob) || errors.Is(err, registry.ErrNotEnded) {
						continue // deleted or retried since it was read: not ours to purge
					}
					if err != nil {
						return err
					}
					m.Engine.DeleteTask(j)
				}
				j.Prompt, j.Result = "", nil
				out = append(out, j)
			}
			return nil
		})
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// purgePage is how many rows Purge reads at once.
const purgePage = 500

// purgeable: ended, handed over, older than the cutoff, of a status asked
// for, and not awaited by the repeat of a drain (whatever --older-than says).
func purgeable(j *bgjobs.Job, req PurgeRequest, cutoff, now time.Time) bool {
	if !j.Status.Terminal() || !j.Notified || j.CompletedAt == nil || j.CompletedAt.After(cutoff) || j.ReplayUntil.After(now) {
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
