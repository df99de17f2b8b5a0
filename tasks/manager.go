package tasks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
)

// Task type names. They are stored inside queued asynq tasks, which outlive
// deploys: never change them.
const (
	TypeTurn = "bgjobs:turn"
	TypeWork = "bgjobs:work"
)

// Queue base names. See Manager.Queue for the namespaced name.
const (
	QueueTurns = "turns"
	QueueWork  = "work"
)

// Retry budgets. A turn is not blindly retried: only a transport failure
// tries again, with the same A2A message id so the agent can de-duplicate.
const (
	turnMaxRetry = 3
	workMaxRetry = 3
)

// Deps are what a Manager runs with besides Redis and its configuration.
type Deps struct {
	// Kinds is the work-kind registry. Defaults to NewKinds().
	Kinds *Kinds
	// Turns runs turn jobs. Required to run turns; spawn works without it.
	Turns TurnRunner
	// Resumer sends resumes. Required to deliver them; without it they
	// wait in their queue.
	Resumer Resumer
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Manager is the job API: spawn, read, cancel, ack, delete, drain, agents.
// The HTTP handlers, the MCP tools and embedding programs all go through it.
type Manager struct {
	cfg     bgjobs.Config
	rdb     redis.UniversalClient
	store   *Store
	k       keys
	aq      *asynq.Client
	insp    *asynq.Inspector
	kinds   *Kinds
	turns   TurnRunner
	resumer Resumer
	agents  *agentCache
	sink    *sink
	alive   aliveCache
	storm   stormTimers
	now     func() time.Time
	log     *slog.Logger
}

// NewManager returns a Manager on rdb. The caller owns rdb and closes it
// after Close.
func NewManager(rdb redis.UniversalClient, cfg bgjobs.Config, d Deps) *Manager {
	cfg = cfg.WithDefaults()
	if d.Kinds == nil {
		d.Kinds = NewKinds()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	store := NewStore(rdb, cfg.Namespace, cfg.Retention)
	return &Manager{
		cfg:     cfg,
		rdb:     rdb,
		store:   store,
		resumer: d.Resumer,
		agents:  &agentCache{store: store, ttl: 2 * time.Second, items: map[string]agentCacheItem{}},
		sink:    newSink(rdb, d.Logger),
		k:       keys{ns: cfg.Namespace},
		aq:      asynq.NewClientFromRedisClient(pipedScripts{rdb, store.ap}),
		insp:    asynq.NewInspectorFromRedisClient(rdb),
		kinds:   d.Kinds,
		turns:   d.Turns,
		now:     d.Now,
		log:     d.Logger,
	}
}

// Close flushes pending follow-up writes and releases the asynq client; the
// Redis client stays the caller's. Stop workers first.
func (m *Manager) Close() error {
	m.stopStorms()
	m.sink.close()
	return m.aq.Close()
}

// Kinds returns the work-kind registry, for embedders to register kinds.
func (m *Manager) Kinds() *Kinds { return m.kinds }

// Inspector returns the asynq inspector on the Manager's Redis, for
// dashboards and metrics.
func (m *Manager) Inspector() *asynq.Inspector { return m.insp }

// Redis returns the client the Manager uses, for health checks.
func (m *Manager) Redis() redis.UniversalClient { return m.rdb }

// Queue returns the asynq queue name of a base queue in this namespace. The
// default namespace keeps the bare names (turns, work) that asynqmon shows.
func (m *Manager) Queue(base string) string {
	if m.cfg.Namespace == bgjobs.NamespaceDefault {
		return base
	}
	return m.cfg.Namespace + ":" + base
}

func newID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// WorkSpec selects a work kind and its arguments.
type WorkSpec struct {
	Type string          `json:"type"`
	Args json.RawMessage `json:"args,omitempty"`
}

// SpawnRequest asks for one job.
type SpawnRequest struct {
	Agent          string
	OriginSession  string
	Kind           Kind
	SubagentType   string
	Description    string
	Prompt         string
	Work           *WorkSpec
	Incognito      bool
	IdempotencyKey string
	// Invalid, when set, is why a batch spec could not even be read; the
	// batch reports it as skipped.
	Invalid *bgjobs.Error
	// Wait is how long SpawnAndWait waits for the job to end.
	Wait time.Duration
}

// spawnIdemTTL is how long an Idempotency-Key on spawn returns the first job.
const spawnIdemTTL = 24 * time.Hour

// Spawn validates req, writes a queued row and enqueues its task. existed is
// true when an Idempotency-Key matched an earlier spawn, whose job is returned.
func (m *Manager) Spawn(ctx context.Context, req SpawnRequest) (job *Job, existed bool, err error) {
	j, err := m.checkSpawn(ctx, req)
	if err != nil {
		return nil, false, err
	}
	if req.Wait > 0 {
		j.waitUntil = j.CreatedAt.Add(req.Wait)
	}
	if req.IdempotencyKey != "" {
		prior, err := m.claimIdempotency(ctx, req.Agent, req.IdempotencyKey, j.ID)
		if err != nil || prior != nil {
			return prior, prior != nil, err
		}
	}
	// The row rides in the same pipeline as its task, just ahead of it.
	row := &lead{queue: func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		return m.store.queueCreate(ctx, p, j)
	}}
	enqErr := m.enqueue(withLead(ctx, row), j)
	if err := ctx.Err(); err != nil {
		// The pipeline may still be going out: a job that got in runs and
		// settles as usual; one half-written is the reconciler's.
		return nil, false, unavailable("spawn", err)
	}
	rowErr := row.err()
	switch {
	case enqErr != nil:
		if !errors.Is(rowErr, errNotSent) {
			m.store.forget(context.WithoutCancel(ctx), j)
		}
		return nil, false, enqErr
	case rowErr != nil:
		// The task is queued but its row is not whole: take the task back.
		_ = m.insp.DeleteTask(m.queueOf(j), j.ID)
		m.store.forget(context.WithoutCancel(ctx), j)
		return nil, false, unavailable("create job", rowErr)
	}
	m.publish(Event{Type: EventStarted, JobID: j.ID, Agent: j.Agent, OriginSession: j.OriginSession,
		Status: StatusQueued, Kind: j.Kind, Description: j.Description, At: j.CreatedAt})
	metrics.Spawned.WithLabelValues(string(j.Kind)).Inc()
	m.log.Info("job spawned", slog.String("job_id", j.ID), slog.String("agent", j.Agent), slog.String("kind", string(j.Kind)))
	return j, false, nil
}

// claimIdempotency records id under the agent's key, or returns the job an
// earlier spawn recorded there.
func (m *Manager) claimIdempotency(ctx context.Context, agent, key, id string) (*Job, error) {
	k := m.k.spawnIdem(agent, key)
	for range 3 {
		ok, err := m.rdb.SetNX(ctx, k, id, spawnIdemTTL).Result()
		if err != nil {
			return nil, unavailable("idempotency key", err)
		}
		if ok {
			return nil, nil
		}
		prior, err := m.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired between the two calls
		}
		if err != nil {
			return nil, unavailable("idempotency key", err)
		}
		j, err := m.store.lookup(ctx, prior)
		if err != nil {
			return nil, err
		}
		if j != nil && j.Agent == agent {
			return j, nil
		}
		// The first spawn never got its row written (or it was deleted):
		// take the key over rather than answer with a job that is not there.
		if err := m.rdb.Set(ctx, k, id, spawnIdemTTL).Err(); err != nil {
			return nil, unavailable("idempotency key", err)
		}
		return nil, nil
	}
	return nil, bgjobs.Errorf(bgjobs.EConflict, "idempotency key is being reused concurrently; retry")
}

// checkSpawn applies the domain rules and builds the row.
func (m *Manager) checkSpawn(ctx context.Context, req SpawnRequest) (*Job, error) {
	if req.Invalid != nil {
		return nil, req.Invalid
	}
	if err := bgjobs.CheckAgentName("agent", req.Agent); err != nil {
		return nil, err
	}
	if err := bgjobs.CheckSession("origin_session", req.OriginSession); err != nil {
		return nil, err
	}
	if utf8.RuneCountInString(req.Description) > bgjobs.MaxDescriptionChars {
		return nil, bgjobs.FieldError("description", "at most %d characters", bgjobs.MaxDescriptionChars)
	}
	if !utf8.ValidString(req.Description) || !utf8.ValidString(req.Prompt) {
		return nil, bgjobs.FieldError("prompt", "must be valid UTF-8")
	}
	j := &Job{
		ID: newID("bg-"), Agent: req.Agent, OriginSession: req.OriginSession,
		Kind: req.Kind, Description: req.Description, Status: StatusQueued,
		Incognito: req.Incognito, CreatedAt: m.now().UTC().Truncate(time.Millisecond),
	}
	if j.Kind == "" {
		j.Kind = KindTurn
	}
	switch j.Kind {
	case KindTurn:
		if strings.TrimSpace(req.Prompt) == "" {
			return nil, bgjobs.FieldError("prompt", "a turn job needs a prompt")
		}
		if len(req.Prompt) > bgjobs.MaxPromptBytes {
			return nil, &bgjobs.Error{Code: bgjobs.ETooLarge, Message: fmt.Sprintf("prompt is over %d bytes", bgjobs.MaxPromptBytes), Field: "prompt"}
		}
		if req.Work != nil {
			return nil, bgjobs.FieldError("work", "a turn job takes no work spec")
		}
		agent, err := m.store.getAgent(ctx, req.Agent)
		if err != nil {
			return nil, err
		}
		if agent == nil || agent.A2AURL == "" {
			return nil, bgjobs.FieldError("kind", "agent %q has no a2a_url: register it with PUT /v1/agents/%s before spawning turns", req.Agent, req.Agent)
		}
		if len(agent.SubagentTypes) > 0 {
			if _, ok := agent.SubagentTypes[req.SubagentType]; !ok {
				return nil, bgjobs.FieldError("subagent_type", "not in agent %q's roster: %s", req.Agent, strings.Join(rosterNames(agent), ", "))
			}
		}
		j.SubagentType = req.SubagentType
		j.Prompt = req.Prompt
	case KindWork:
		if req.Work == nil || req.Work.Type == "" {
			return nil, bgjobs.FieldError("work.type", "a work job needs work.type (one of: %s)", strings.Join(m.kinds.Names(), ", "))
		}
		kind, ok := m.kinds.Lookup(req.Work.Type)
		if !ok {
			return nil, bgjobs.FieldError("work.type", "unknown work kind %q (one of: %s)", req.Work.Type, strings.Join(m.kinds.Names(), ", "))
		}
		if req.Prompt != "" {
			return nil, bgjobs.FieldError("prompt", "a work job takes no prompt")
		}
		if kind.Check != nil {
			if err := kind.Check(req.Work.Args); err != nil {
				var be *bgjobs.Error
				if errors.As(err, &be) {
					return nil, be
				}
				return nil, bgjobs.FieldError("work.args", "%v", err)
			}
		}
		j.WorkType = req.Work.Type
		j.WorkArgs = req.Work.Args
	default:
		return nil, bgjobs.FieldError("kind", "want turn or work, got %q", req.Kind)
	}
	return j, nil
}

func rosterNames(a *Agent) []string {
	names := make([]string, 0, len(a.SubagentTypes))
	for n := range a.SubagentTypes {
		names = append(names, n)
	}
	return names
}

// taskPayload is what an asynq task carries: enough to find the row. The
// row itself is the job; the task is only its engine.
type taskPayload struct {
	Agent   string `json:"a"`
	Session string `json:"s"`
}

// turnTaskTimeout bounds an asynq turn task: the turn's own timeout starts
// when it gets a slot under the cap, so the task allows for the wait.
func (m *Manager) turnTaskTimeout() time.Duration { return m.cfg.TurnTimeout + time.Hour }

func (m *Manager) enqueue(ctx context.Context, j *Job) error {
	payload, _ := json.Marshal(taskPayload{Agent: j.Agent, Session: j.OriginSession})
	var t *asynq.Task
	if j.Kind == KindTurn {
		t = asynq.NewTask(TypeTurn, payload, asynq.TaskID(j.ID), asynq.Queue(m.Queue(QueueTurns)),
			asynq.MaxRetry(turnMaxRetry), asynq.Timeout(m.turnTaskTimeout()))
	} else {
		t = asynq.NewTask(TypeWork, payload, asynq.TaskID(j.ID), asynq.Queue(m.Queue(QueueWork)),
			asynq.MaxRetry(workMaxRetry), asynq.Timeout(m.cfg.TurnTimeout))
	}
	if _, err := m.aq.EnqueueContext(ctx, t); err != nil {
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return bgjobs.Errorf(bgjobs.EConflict, "job id %s is already queued", j.ID)
		}
		return unavailable("enqueue", err)
	}
	return nil
}

// Get returns the caller's job, or not_found (also for another agent's id).
func (m *Manager) Get(ctx context.Context, agent, id string) (*Job, error) {
	if !bgjobs.ValidJobID(id) {
		return nil, bgjobs.FieldError("id", "job ids look like bg-0123456789ab")
	}
	j, err := m.store.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if j == nil || j.Agent != agent {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
	}
	return j, nil
}

// Cancel stops a queued or running job: it ends cancelled (and is drained
// like any other), its queued task is deleted, a running one is told to stop.
func (m *Manager) Cancel(ctx context.Context, agent, id string) (*Job, error) {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return nil, err
	}
	reason := "cancelled by request"
	settled, err := m.settle(ctx, j, Outcome{Status: StatusCancelled, Error: &reason})
	if err != nil {
		return nil, err
	}
	if !settled {
		return nil, bgjobs.Errorf(bgjobs.EConflict, "job %s already ended", id)
	}
	m.stopTask(j)
	return m.Get(ctx, agent, id)
}

// stopTask removes a cancelled job's task from its queue, or signals the
// worker running it. Both are best effort: a worker that starts the task
// anyway finds the row terminal and does nothing.
func (m *Manager) stopTask(j *Job) {
	info, err := m.insp.GetTaskInfo(m.queueOf(j), j.ID)
	if err != nil {
		return
	}
	if info.State == asynq.TaskStateActive {
		_ = m.insp.CancelProcessing(j.ID)
		return
	}
	_ = m.insp.DeleteTask(m.queueOf(j), j.ID)
}

// Ack marks a finished job consumed another way, so drain skips it. It
// reports whether this call flipped it.
func (m *Manager) Ack(ctx context.Context, agent, id string) (bool, error) {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return false, err
	}
	n, err := m.store.ack(ctx, Tag(j.Agent, j.OriginSession), id, m.now())
	if err != nil {
		return false, err
	}
	switch n {
	case 1:
		return true, nil
	case 0:
		return false, nil
	case -2:
		return false, bgjobs.Errorf(bgjobs.EConflict, "job %s has not ended", id)
	}
	return false, bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
}

// Delete removes an ended job.
func (m *Manager) Delete(ctx context.Context, agent, id string) error {
	j, err := m.Get(ctx, agent, id)
	if err != nil {
		return err
	}
	n, err := m.store.remove(ctx, j)
	if err != nil {
		return err
	}
	switch n {
	case 1:
		_ = m.insp.DeleteTask(m.queueOf(j), id) // archived leftovers, if any
		return nil
	case -2:
		return bgjobs.Errorf(bgjobs.EConflict, "job %s is still %s", id, j.Status)
	}
	return bgjobs.Errorf(bgjobs.ENotFound, "no job %s", id)
}

// Drain hands over every ended, unnotified job of the session, oldest
// completion first, each exactly once. A repeat with the same idempotency
// key within 10 minutes returns the same notifications.
func (m *Manager) Drain(ctx context.Context, agent, session, idemKey string) ([]Notification, error) {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return nil, err
	}
	now := m.now()
	hold := drainHold{on: m.indexerAlive(ctx), capChars: m.cfg.SummaryChars, since: now.Add(-indexGrace)}
	rows, err := m.store.drain(ctx, Tag(agent, session), idemKey, now, hold)
	if err != nil {
		return nil, err
	}
	metrics.DrainSize.Observe(float64(len(rows)))
	out := make([]Notification, len(rows))
	for i, r := range rows {
		// A turn report is cut, with a pointer to memory_recall, only once
		// it is searchable: a pointer must never point at nothing.
		cut := 0
		if r.ReportIndexed {
			cut = m.cfg.SummaryChars
		}
		out[i] = notification(r, cut)
	}
	return out, nil
}

// PutAgent stores where bgjobs reaches an agent.
func (m *Manager) PutAgent(ctx context.Context, a *Agent) error {
	if err := bgjobs.CheckAgentName("name", a.Name); err != nil {
		return err
	}
	if a.Resume == "" {
		a.Resume = ResumeNone
		if a.A2AURL != "" {
			a.Resume = ResumeA2A
		}
	}
	switch a.Resume {
	case ResumeA2A:
		if a.A2AURL == "" {
			return bgjobs.FieldError("a2a_url", "resume a2a needs a2a_url")
		}
	case ResumeWebhook:
		if a.WebhookURL == "" {
			return bgjobs.FieldError("webhook_url", "resume webhook needs webhook_url")
		}
		if a.WebhookSecret == "" {
			return bgjobs.FieldError("webhook_secret", "resume webhook needs webhook_secret to sign with")
		}
	case ResumeNone:
	default:
		return bgjobs.FieldError("resume", "want a2a, webhook or none, got %q", a.Resume)
	}
	for _, u := range []struct{ field, url string }{{"a2a_url", a.A2AURL}, {"webhook_url", a.WebhookURL}} {
		if u.url != "" && !strings.HasPrefix(u.url, "http://") && !strings.HasPrefix(u.url, "https://") {
			return bgjobs.FieldError(u.field, "want an http:// or https:// URL")
		}
	}
	for name := range a.SubagentTypes {
		if name == "" || len(name) > 64 {
			return bgjobs.FieldError("subagent_types", "subagent type names are 1–64 characters")
		}
	}
	if err := m.store.putAgent(ctx, a); err != nil {
		return err
	}
	m.agents.forget(a.Name)
	return nil
}

// GetAgent returns an agent's configuration, or not_found.
func (m *Manager) GetAgent(ctx context.Context, name string) (*Agent, error) {
	if err := bgjobs.CheckAgentName("name", name); err != nil {
		return nil, err
	}
	a, err := m.store.getAgent(ctx, name)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, bgjobs.Errorf(bgjobs.ENotFound, "no agent %s", name)
	}
	return a, nil
}
