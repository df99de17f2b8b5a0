// Package maintenance runs bgjobs' periodic sweeps on one elected process
// at a time: the reconciler that settles jobs their engine lost, the outbox
// and storm sweeps that re-drive follow-ups a crash left behind, and the
// index walk that drops entries of expired rows. Every sweep is safe to run
// anywhere and twice (settles are compare-and-set, pumps are idempotent);
// the election only keeps a fleet from repeating the same work.
package maintenance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/followup"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/reclaim"
)

const (
	// ReconcileGrace skips jobs younger than this: their task may be a
	// moment away from being enqueued.
	ReconcileGrace = time.Minute
	// LostActiveAfter is how long a task may sit active in asynq with no
	// live worker reporting it before the job is declared lost. asynq's
	// own recoverer re-queues an expired lease within about 90 s; past
	// this it never will (asynq #1144, a lease entry gone missing).
	LostActiveAfter = 5 * time.Minute
	// The index walk: each sweep reads indexPages HSCAN pages of
	// indexPageSize, so a full cycle over a million retained jobs takes a
	// few hours of sweeps, at a few round trips each.
	indexPages    = 4
	indexPageSize = 500
	// leaseName is the maintenance lease in Redis.
	leaseName = "maintenance"
	// OrphanInterval is how often every process looks for tasks a dead
	// worker left: a lease expires 30 s after its worker's last heartbeat,
	// so a dead worker's tasks run again within about 35 s.
	OrphanInterval = 5 * time.Second
	// stragglerTick is how often every process checks whether a straggler
	// timeout it knows of is due (in memory: Redis is read only then), as
	// often as asynq moved due timers into their queue.
	stragglerTick = 2 * time.Second
)

// Deps are what the sweeps run with.
type Deps struct {
	Store *registry.Store
	// Reclaim re-queues the tasks of dead workers.
	Reclaim   *reclaim.Store
	Engine    *engine.Engine
	Followups *followup.Followups
	// Interval between sweeps.
	Interval time.Duration
	// BatchJoinTimeout is the straggler timeout: a short one is checked
	// for more often than stragglerTick.
	BatchJoinTimeout time.Duration
	Now              func() time.Time
	Log              *slog.Logger
}

// Maintainer runs the sweeps every Interval while it holds the
// maintenance lease; Start and Stop bound its loop.
type Maintainer struct {
	Deps
	holder string
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a maintainer; Start runs it.
func New(d Deps) *Maintainer {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Maintainer{Deps: d, holder: hex.EncodeToString(b[:])}
}

// Start sweeps now (if elected) and then every interval until Stop.
func (m *Maintainer) Start(ctx context.Context) error {
	ctx, m.stop = context.WithCancel(ctx)
	m.wg.Go(func() {
		// Every process, not only the leader: the leader may be the worker
		// that died.
		tick := time.NewTicker(OrphanInterval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if n, err := m.RecoverOrphans(ctx); err != nil && ctx.Err() == nil {
					m.Log.Warn("recover orphaned tasks", slog.Any("err", err))
				} else if n > 0 {
					m.Log.Warn("tasks of a dead worker re-queued", slog.Int("tasks", n))
				}
			}
		}
	})
	m.wg.Go(func() {
		tick := time.NewTicker(min(stragglerTick, max(m.BatchJoinTimeout/4, 10*time.Millisecond)))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if !m.Followups.StragglerDue() {
					continue
				}
				if err := m.Followups.SweepStragglers(ctx); err != nil && ctx.Err() == nil {
					m.Log.Warn("straggler sweep", slog.Any("err", err))
				}
			}
		}
	})
	m.wg.Go(func() {
		tick := time.NewTicker(m.Interval)
		defer tick.Stop()
		for {
			m.tick(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return nil
}

// Stop ends the loop, waits for a sweep in progress, and hands the lease
// on.
func (m *Maintainer) Stop() {
	if m.stop != nil {
		m.stop()
		m.wg.Wait()
	}
	m.Store.ReleaseLease(context.Background(), leaseName, m.holder)
}

// Leader reports whether this maintainer holds (or now takes) the lease.
// The lease outlives two intervals, so a dead leader is replaced within
// about that.
func (m *Maintainer) Leader(ctx context.Context) bool {
	ok, err := m.Store.HoldLease(ctx, leaseName, m.holder, 2*m.Interval+time.Second)
	if err != nil && ctx.Err() == nil {
		m.Log.Warn("maintenance lease", slog.Any("err", err))
	}
	return ok
}

func (m *Maintainer) tick(ctx context.Context) {
	if !m.Leader(ctx) {
		return
	}
	if n, err := m.Sweep(ctx); err != nil && ctx.Err() == nil {
		m.Log.Warn("reconcile", slog.Any("err", err))
	} else if n > 0 {
		m.Log.Info("reconcile settled lost jobs", slog.Int("count", n))
	}
}

// Sweep runs every sweep once, elected or not, and returns how many lost
// jobs it settled.
func (m *Maintainer) Sweep(ctx context.Context) (int, error) {
	if err := m.Followups.SweepStorms(ctx); err != nil {
		m.Log.Warn("storm sweep", slog.Any("err", err))
	}
	if err := m.Followups.SweepOutboxes(ctx); err != nil {
		m.Log.Warn("outbox sweep", slog.Any("err", err))
	}
	// Timeouts armed by a process that has stopped since.
	if err := m.Followups.SweepStragglers(ctx); err != nil && ctx.Err() == nil {
		m.Log.Warn("straggler sweep", slog.Any("err", err))
	}
	if _, err := m.Store.SweepIndex(ctx, indexPages, indexPageSize); err != nil && ctx.Err() == nil {
		m.Log.Warn("index sweep", slog.Any("err", err))
	}
	return m.reconcile(ctx)
}

// RecoverOrphans re-queues the tasks a dead worker left active: their lease
// expired and no live worker reports them. A live worker's task never
// moves: the lease is checked again as the task moves, atomically.
func (m *Maintainer) RecoverOrphans(ctx context.Context) (int, error) {
	expired, err := m.Reclaim.ExpiredLeases(ctx, m.Engine.Queues(), m.Now())
	if err != nil || len(expired) == 0 {
		return 0, err
	}
	live, err := m.Engine.LiveTaskIDs()
	if err != nil {
		return 0, err
	}
	n := 0
	for queue, ids := range expired {
		for _, id := range ids {
			if live[id] {
				continue
			}
			ok, err := m.Reclaim.RequeueOrphan(ctx, queue, id, m.Now())
			if err != nil {
				return n, err
			}
			if ok {
				n++
			}
		}
	}
	return n, nil
}

// reconcile settles jobs whose engine lost them: a row that is not
// terminal while its asynq task is gone (deleted, purged), archived after
// its last retry, or active with no live worker for long ends failed with
// the reason, so nothing stays queued or running forever.
//
// A backlog of queued jobs is normal for a queue, and each sweep looks at
// all of it: it reads reconcilePage jobs at a time, what it needs of their
// rows in two round trips and their tasks' states in one, and a whole row
// only to settle it (one job at a time, 20,000 queued jobs took 4.4–5.5 s
// and 122,000 commands a sweep).
func (m *Maintainer) reconcile(ctx context.Context) (int, error) {
	var live map[string]bool // asynq's running tasks, read once there is a page
	read, settled := false, 0
	err := m.Store.EachActiveBefore(ctx, m.Now().Add(-ReconcileGrace), reconcilePage, func(page []string) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !read {
			var err error
			if live, err = m.Engine.LiveTaskIDs(); err != nil {
				return err
			}
			read = true
		}
		n, err := m.reconcilePage(ctx, page, live)
		settled += n
		return err
	})
	return settled, err
}

// reconcilePage is how many jobs reconcile reads at once.
const reconcilePage = 200

func (m *Maintainer) reconcilePage(ctx context.Context, ids []string, live map[string]bool) (int, error) {
	jobs, err := m.Store.Briefs(ctx, ids)
	if err != nil {
		return 0, err
	}
	var open []*bgjobs.Job
	var ended []string
	for i, j := range jobs {
		if j == nil || j.Status.Terminal() {
			ended = append(ended, ids[i])
		} else {
			open = append(open, j)
		}
	}
	_ = m.Store.DropActive(ctx, ended...)
	if len(open) == 0 {
		return 0, nil
	}
	tasks := make([]reclaim.Task, len(open))
	for i, j := range open {
		tasks[i] = reclaim.Task{Queue: m.Engine.QueueOf(j), ID: j.ID}
	}
	states, err := m.Reclaim.States(ctx, tasks)
	if err != nil {
		return 0, err
	}
	settled := 0
	for i, j := range open {
		reason := m.lostReason(j, states[i], live)
		if reason == "" {
			continue
		}
		if j, err = m.Store.Lookup(ctx, j.ID); err != nil {
			return settled, err
		}
		if j == nil || j.Status.Terminal() {
			continue // ended meanwhile
		}
		ok, err := m.Followups.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusFailed, Error: &reason})
		if err != nil {
			return settled, err
		}
		if ok {
			settled++
			m.Log.Warn("job lost by its engine; settled failed", slog.String("job_id", j.ID), slog.String("reason", reason))
		}
	}
	return settled, nil
}

// lostReason says why j, whose task is in state, can never end on its own,
// or "" if it still can.
func (m *Maintainer) lostReason(j *bgjobs.Job, state string, live map[string]bool) string {
	switch {
	case state == "":
		return "its queued task is gone (deleted or purged from the queue); it will not run"
	case state == reclaim.StateArchived:
		// The retries and the last error are in the task's message.
		st, err := m.Engine.StateOf(j)
		if err != nil || !st.Archived {
			return "" // cannot tell now, or it moved on; the next sweep will
		}
		return fmt.Sprintf("gave up after %d attempts: %s", st.Retried+1, st.LastErr)
	case state == reclaim.StateActive && !live[j.ID] && j.StartedAt != nil && m.Now().Sub(*j.StartedAt) > LostActiveAfter:
		return "its worker lost the task (active with no live worker)"
	}
	return ""
}
