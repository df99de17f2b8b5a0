// Package tasks is bgjobs' job API: Manager spawns, reads, cancels, acks,
// deletes and drains jobs, fans out batches, and runs them on asynq
// workers. It never speaks HTTP. Its parts live in internal packages, each
// with one concern:
//
//	internal/registry     every Redis key, Lua script and command on them
//	internal/engine       asynq task types, queues, payloads, enqueues
//	internal/followup     settle, the outbox pump, resumes, busy, timers, storm guard
//	internal/maintenance  the elected sweeps: lost jobs, outboxes, index walk
package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/tasks/eventhub"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/followup"
	"github.com/bgjobs/bgjobs/tasks/internal/maintenance"
	"github.com/bgjobs/bgjobs/tasks/internal/parking"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/feeds"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/idem"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/reclaim"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/stragglers"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/tenants"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/turncap"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/wake"
	"github.com/bgjobs/bgjobs/tasks/internal/workshare"
	"github.com/bgjobs/bgjobs/work"
)

// Deps are what a Manager runs with besides Redis and its configuration.
type Deps struct {
	// Kinds is the work-kind registry. Defaults to work.NewKinds().
	Kinds *work.Kinds
	// Turns runs turn jobs. Required to run turns; spawn works without it.
	Turns bgjobs.TurnRunner
	// Resumer sends resumes. Without it this process leaves resumes queued
	// for a process that has one.
	Resumer bgjobs.Resumer
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Manager is the job API: spawn, read, cancel, ack, delete, drain, agents.
// The HTTP handlers, the MCP tools and embedding programs all go through it.
type Manager struct {
	cfg     bgjobs.Config
	writer  *pipeline.Writer
	store   *registry.Store
	hand    *handover.Store
	feeds   *feeds.Store
	tenants *tenants.Store
	idem    *idem.Store
	eng     *engine.Engine
	follow  *followup.Followups
	maint   *maintenance.Maintainer
	hub     *eventhub.Hub
	// stopping is set while the workers shut down: a task whose context
	// ends then goes back to its queue rather than ending cancelled.
	stopping atomic.Bool
	running  engine.Inflight // the workers' handlers
	kinds    *work.Kinds
	// agentAllow is where agents may live in internal space.
	agentAllow netguard.Allow
	turns      bgjobs.TurnRunner
	turnCap    *turncap.Cap
	// turnsParked: turns this process sent back, their agent holding its
	// share of the turn cap.
	turnsParked *parking.Lot
	// asynqKeys moves tasks on asynq's own keys (a parked task back).
	asynqKeys  *reclaim.Store
	workParked *parking.Lot
	workShare  *workshare.Slots
	stragglers *stragglers.Set
	now        func() time.Time
	log        *slog.Logger
}

// NewManager returns a running Manager on rdb. The caller owns rdb and
// closes it after Close. rdb is the only use of go-redis outside the
// registry: it is handed on, never called.
func NewManager(rdb redis.UniversalClient, cfg bgjobs.Config, d Deps) *Manager {
	cfg = cfg.WithDefaults()
	if d.Kinds == nil {
		d.Kinds = work.NewKinds()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	w := pipeline.New(rdb, d.Logger)
	w.Replicas(cfg.MinReplicas, cfg.MinReplicasTimeout)
	_ = w.Start(context.Background())
	store := registry.New(rdb, w, cfg.Namespace, cfg.Retention)
	streams := feeds.New(rdb, w, store.Keys())
	agents := tenants.New(rdb, store.Keys())
	lone := agents.Lone(d.Now)
	strag := stragglers.New(w, store.Keys())
	eng := engine.New(asynq.NewClientFromRedisClient(w.AsynqClient()), asynq.NewInspectorFromRedisClient(rdb), cfg.Namespace, cfg.RunTimeout, cfg.ResumeRetries)
	follow := followup.New(followup.Config{NoAutoResume: cfg.NoAutoResume, ResumeCoalesce: cfg.ResumeCoalesce, ResumeCoalesceMax: cfg.ResumeCoalesceMax,
		BatchJoinTimeout: cfg.BatchJoinTimeout, SummaryChars: cfg.SummaryChars,
		ResumeAgainInterval: cfg.ResumeAgainInterval, ResumeAgainMax: cfg.ResumeAgainMax, TurnWindow: cfg.TurnWindow},
		followup.Deps{Store: store, Wake: wake.New(rdb, w, store.Keys()), Feeds: streams, Stragglers: strag, Tenants: agents, Engine: eng, Resumer: d.Resumer, Now: d.Now, Log: d.Logger})
	_ = follow.Start(context.Background())
	hub := eventhub.New(streams, d.Logger, cfg.EventStreamsPerAgent, cfg.EventStreams)
	_ = hub.Start(context.Background())
	asynqKeys := reclaim.New(rdb)
	m := &Manager{
		cfg: cfg, writer: w, store: store, hand: handover.New(w, store.Keys(), cfg.Retention), feeds: streams, tenants: agents, eng: eng, hub: hub, follow: follow,
		maint: maintenance.New(maintenance.Deps{Store: store, Reclaim: asynqKeys, Engine: eng, Followups: follow,
			Interval: cfg.ReconcileInterval, BatchJoinTimeout: cfg.BatchJoinTimeout, Now: d.Now, Log: d.Logger}),
		kinds: d.Kinds, agentAllow: netguard.NewAllow(cfg.AgentAllow), turns: d.Turns, now: d.Now, log: d.Logger,
		stragglers: strag, idem: idem.New(rdb, store.Keys(), store.Lookup),
		asynqKeys: asynqKeys,
		turnCap:   turncap.New(rdb, store.Keys(), cfg.TurnConcurrency, cfg.TurnShare, cfg.PollInterval, lone.Is, d.Now, d.Logger),
	}
	m.turnsParked = parking.New("turn", func(id string) error { return m.runNow(engine.QueueTurns, id) })
	m.turnsParked.JoinFleet(w, "turn:"+cfg.Namespace, nil)
	m.workParked = parking.New("work", func(id string) error { return m.runNow(engine.QueueWork, id) })
	m.workParked.JoinFleet(w, "work:"+cfg.Namespace, func(agent string) bool { return m.workShare.Room(agent) })
	m.workShare = workshare.New(cfg.WorkConcurrency, cfg.WorkShare, lone.Is, m.workParked)
	return m
}

// runNow brings a parked task back to its queue and wakes the fetches held
// on that queue.
func (m *Manager) runNow(queue, id string) error {
	q := m.eng.Queue(queue)
	if err := m.asynqKeys.Unpark(context.Background(), q, id, m.now()); err != nil {
		return err
	}
	m.writer.AnnounceQueue(q)
	return nil
}

// Close flushes the storm guard's windows and pending follow-up writes.
// The Redis client (which asynq's client shares) stays the caller's. Stop
// workers first.
func (m *Manager) Close() error {
	m.hub.Stop()
	m.follow.Stop()
	m.writer.Stop()
	return nil
}

// Kinds returns the work-kind registry, for embedders to register kinds.
func (m *Manager) Kinds() *work.Kinds { return m.kinds }

// Inspector returns the asynq inspector on the Manager's Redis, for
// dashboards and metrics.
func (m *Manager) Inspector() *asynq.Inspector { return m.eng.Inspector() }

// ErrClusterNode is Ping's answer when REDIS_URL names one node of a Redis
// Cluster instead of the cluster.
var ErrClusterNode = registry.ErrClusterNode

// Ping checks that Redis answers, for readiness probes.
func (m *Manager) Ping(ctx context.Context) error { return m.store.Ping(ctx) }

// Queue returns the asynq queue name of a base queue (QueueTurns,
// QueueWork, …) in this namespace.
func (m *Manager) Queue(base string) string { return m.eng.Queue(base) }

// Queue base names, as asynq and asynqmon show them in the default
// namespace.
const (
	QueueTurns   = engine.QueueTurns
	QueueWork    = engine.QueueWork
	QueueResume  = engine.QueueResume
	QueueControl = engine.QueueControl
)

// Queues are bgjobs' asynq queues in this namespace.
func (m *Manager) Queues() []string { return m.eng.Queues() }

// WakeQueue tells the workers of every process that tasks may wait in
// queue, one of Queues (no worker holds a fetch on any other): for a
// change made with asynq's own tools, which announce nothing — a task run
// now or a queue resumed from asynqmon — so a worker holding an empty
// fetch takes it at once rather than when its hold (Config.FetchWait)
// runs out.
func (m *Manager) WakeQueue(queue string) { m.writer.AnnounceQueue(queue) }

// Reconcile runs every maintenance sweep once, here and now (elected or
// not), and returns how many lost jobs it settled.
func (m *Manager) Reconcile(ctx context.Context) (int, error) { return m.maint.Sweep(ctx) }

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
