package followup

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/tenants"
)

// The rules, each decided here and nowhere else.

// wakeAgent returns the agent to wake when the session may be woken at all,
// or nil: never a background worker's own context, never with auto-resume
// off globally or for the agent, never for an agent bgjobs cannot reach.
// Settles ask it whether to record a resume; deliveries ask it again, since
// the agent's configuration may have changed in between.
func (f *Followups) wakeAgent(ctx context.Context, agent, session string) (*bgjobs.Agent, error) {
	if f.cfg.NoAutoResume || bgjobs.IsBackground(session) {
		return nil, nil
	}
	a, err := f.agents.get(ctx, agent)
	if err != nil || a == nil || !a.Resumes() {
		return nil, err
	}
	return a, nil
}

// mayWake is the wake rule as a yes or no for one job (an incognito job
// never wakes anyone); an unreadable configuration is a no.
func (f *Followups) mayWake(ctx context.Context, agent, session string, incognito bool) bool {
	if incognito {
		return false
	}
	a, _ := f.wakeAgent(ctx, agent, session)
	return a != nil
}

// indexes reports whether j's outcome goes to memory: a turn's report,
// unless the job is incognito or its origin a background worker.
func indexes(j *bgjobs.Job, o bgjobs.Outcome) bool {
	return j.Kind == bgjobs.KindTurn && o.Status == bgjobs.StatusCompleted && o.Result != nil &&
		!j.Incognito && !bgjobs.IsBackground(j.OriginSession)
}

// holdsForIndex reports whether the drain will cut j's report and point at
// memory_recall: its notification must then wait until the report is
// searchable, for a pointer must never point at nothing.
func (f *Followups) holdsForIndex(j *bgjobs.Job, o bgjobs.Outcome) bool {
	return indexes(j, o) && utf8.RuneCountInString(*o.Result) > f.cfg.SummaryChars
}

// IndexGrace is how long a report marked hold-for-index waits for the
// index before its notification goes out whole instead.
const IndexGrace = 30 * time.Second

// awaitingIndex reports whether the drain holds j back for now (so its
// nudge waits too): it is marked, not yet indexed, within the grace, and
// an indexer runs.
func (f *Followups) awaitingIndex(ctx context.Context, j *bgjobs.Job) bool {
	return j.HoldForIndex && !j.ReportIndexed && j.CompletedAt != nil &&
		f.now().Sub(*j.CompletedAt) < IndexGrace && f.indexerAlive(ctx)
}

// DrainHold is how a drain at now treats reports marked hold-for-index.
func (f *Followups) DrainHold(ctx context.Context, now time.Time) handover.DrainHold {
	return handover.DrainHold{On: f.indexerAlive(ctx), Since: now.Add(-IndexGrace)}
}

// indexerAlive reports whether some process is indexing reports, cached for
// a second: without one, nothing waits for an index that is not running.
func (f *Followups) indexerAlive(ctx context.Context) bool {
	f.alive.mu.Lock()
	defer f.alive.mu.Unlock()
	if time.Since(f.alive.at) < time.Second {
		return f.alive.ok
	}
	ok, err := f.feeds.IndexerRunning(ctx)
	f.alive.ok, f.alive.at = err == nil && ok, time.Now()
	return f.alive.ok
}

type aliveCache struct {
	mu sync.Mutex
	ok bool
	at time.Time
}

// ForgetAgent drops a cached agent configuration (it just changed).
func (f *Followups) ForgetAgent(name string) { f.agents.forget(name) }

// agentCache keeps agent configurations for a moment: every settle asks
// whether its agent wants resumes, and the answer rarely changes.
type agentCache struct {
	store *tenants.Store
	ttl   time.Duration
	mu    sync.Mutex
	items map[string]agentCacheItem
}

type agentCacheItem struct {
	a   *bgjobs.Agent
	exp time.Time
}

func (c *agentCache) get(ctx context.Context, name string) (*bgjobs.Agent, error) {
	now := time.Now()
	c.mu.Lock()
	it, ok := c.items[name]
	c.mu.Unlock()
	if ok && now.Before(it.exp) {
		return it.a, nil
	}
	a, err := c.store.GetAgent(ctx, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.items[name] = agentCacheItem{a: a, exp: now.Add(c.ttl)}
	c.mu.Unlock()
	return a, nil
}

func (c *agentCache) forget(name string) {
	c.mu.Lock()
	delete(c.items, name)
	c.mu.Unlock()
}
