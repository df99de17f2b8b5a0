// Package followup carries out what must follow a job's end: the settle
// itself (settle.go), the outbox pump with one function per entry kind
// (pump.go), resume delivery (resume.go), the busy lease that holds nudges
// (busy.go), the batch straggler and lease-lapse timers (timers.go), and
// the resume storm guard (storm.go). Each rule about who may be woken and
// what waits for the index is decided once, in policy.go.
package followup

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/feeds"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/stragglers"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/tenants"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/wake"
)

// Config is the part of the service configuration follow-ups read.
type Config struct {
	// NoAutoResume turns push-resume off for every agent.
	NoAutoResume bool
	// ResumeCoalesce is the storm guard's window; zero or less turns it off.
	ResumeCoalesce time.Duration
	// ResumeCoalesceMax is the longest a storm window grows to in a
	// sustained burst.
	ResumeCoalesceMax time.Duration
	// BatchJoinTimeout is the straggler timeout of a batch join.
	BatchJoinTimeout time.Duration
	// SummaryChars is where the drain cuts a turn report.
	SummaryChars int
	// ResumeAgainInterval and ResumeAgainMax: how often, and how many
	// times, a resume whose retries ran out is sent again while what it
	// announces stays undrained.
	ResumeAgainInterval time.Duration
	ResumeAgainMax      int
	// TurnWindow seals a turn batch this long after its last spawn.
	TurnWindow time.Duration
}

// Deps are what follow-ups run with.
type Deps struct {
	Store *registry.Store
	Wake  *wake.Store
	Feeds *feeds.Store
	// Stragglers are the batches' straggler timeouts.
	Stragglers *stragglers.Set
	// Tenants are the agents' configurations (who takes resumes, where).
	Tenants *tenants.Store
	Engine  *engine.Engine
	// Resumer sends resumes; nil in a process that cannot (it then leaves
	// them queued for one that can).
	Resumer bgjobs.Resumer
	Now     func() time.Time
	Log     *slog.Logger
}

// Followups settles jobs and carries out their follow-ups.
type Followups struct {
	cfg     Config
	store   *registry.Store
	wake    *wake.Store
	feeds   *feeds.Store
	strag   *stragglers.Set
	eng     *engine.Engine
	resumer bgjobs.Resumer
	now     func() time.Time
	log     *slog.Logger
	agents  *agentCache
	alive   aliveCache
	storm   *stormTimers
	// persisting are writes retried until Redis answers (Persist); quit
	// ends their retries at Stop.
	persisting sync.WaitGroup
	quit       chan struct{}
	// stragglerDue is when the earliest straggler timeout this process
	// knows of is due (unix ms; 0: none).
	stragglerDue atomic.Int64
}

// New returns follow-ups; Start runs their timers.
func New(cfg Config, d Deps) *Followups {
	f := &Followups{cfg: cfg, store: d.Store, wake: d.Wake, feeds: d.Feeds, strag: d.Stragglers, eng: d.Engine, resumer: d.Resumer, now: d.Now, log: d.Log,
		quit: make(chan struct{})}
	f.agents = &agentCache{store: d.Tenants, ttl: 2 * time.Second, items: map[string]agentCacheItem{}}
	f.storm = &stormTimers{f: f}
	return f
}

// Start arms the storm guard's timers (they are armed as windows open).
func (f *Followups) Start(ctx context.Context) error { return f.storm.Start(ctx) }

// Stop stops the storm guard's timers and flushes their windows now, so a
// graceful stop leaves nothing to the sweep, and ends Persist's retries.
func (f *Followups) Stop() {
	close(f.quit)
	f.persisting.Wait()
	f.storm.Stop()
}

// Persist runs op in the background until it succeeds (Redis stalls, fails
// over) or for at most `within`, or until Stop. what names it in the log.
func (f *Followups) Persist(what string, within time.Duration, op func(ctx context.Context) error) {
	f.persisting.Add(1)
	go func() {
		defer f.persisting.Done()
		deadline := f.now().Add(within)
		for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := op(ctx)
			cancel()
			if err == nil {
				return
			}
			if f.now().After(deadline) {
				f.log.Error(what+": Redis did not answer in time", slog.Any("err", err))
				return
			}
			select {
			case <-f.quit:
				f.log.Warn(what+": stopped before Redis answered", slog.Any("err", err))
				return
			case <-time.After(delay):
			}
		}
	}()
}
