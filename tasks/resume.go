package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/search"
)

// Task types of the follow-ups. Stored in queued tasks: never change them.
const (
	TypeResume    = "bgjobs:resume"
	TypeStraggler = "bgjobs:straggler"
	TypeLapse     = "bgjobs:lapse"
)

// Queues of the follow-ups (base names; see Manager.Queue).
const (
	QueueResume  = "resume"
	QueueControl = "control"
)

// EventResumed and EventBatchJoined are published for people watching.
const (
	EventResumed     = "background.resumed"
	EventBatchJoined = "batch.joined"
)

const (
	resumeMaxRetry = 10
	// resumeRetention keeps a delivered resume's task id taken, so a pump
	// that repeats within a day enqueues nothing.
	resumeRetention = 24 * time.Hour
	// busyTTLMax caps one busy lease; an agent renews for longer turns.
	busyTTLMax = 24 * time.Hour
	// BusyTTLDefault is the lease when a busy call names none.
	BusyTTLDefault = 600 * time.Second
	// foldJobsMax caps the job ids listed in a coalesced nudge.
	foldJobsMax = 100
)

// errNudgeInFlight defers a resume while another of its session is being
// delivered.
var errNudgeInFlight = errors.New("another resume of this session is being delivered")

// inflightTTL bounds a delivery's hold on its session, should the process
// die mid-send.
const inflightTTL = 30 * time.Second

// Counts are a resume's per-status tallies.
type Counts struct {
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

func (c *Counts) add(s Status, n int) {
	switch s {
	case StatusCompleted:
		c.Completed += n
	case StatusFailed:
		c.Failed += n
	case StatusCancelled:
		c.Cancelled += n
	}
}

// ResumeMeta is the metadata of a resume, exactly as API.md "Resume" shows
// it. It carries ids and counts, never a report: the drain hands those over.
type ResumeMeta struct {
	Origin  string   `json:"origin"`
	Kind    string   `json:"kind"`
	Trigger string   `json:"trigger"`
	Jobs    []string `json:"jobs"`
	BatchID *string  `json:"batch_id"`
	Counts  Counts   `json:"counts"`
	Partial bool     `json:"partial"`
}

// Resumer wakes an agent's session: A2A message/send or a signed webhook,
// as the agent's configuration says.
type Resumer interface {
	SendResume(ctx context.Context, a *Agent, session, messageID string, meta ResumeMeta) error
}

type resumePayload struct {
	Agent     string     `json:"a"`
	Session   string     `json:"s"`
	MessageID string     `json:"m"`
	Meta      ResumeMeta `json:"meta"`
	// Since is when its cause happened (ms), for the latency metric.
	Since int64 `json:"t,omitempty"`
}

type controlPayload struct {
	Agent   string `json:"a"`
	Session string `json:"s"`
	BatchID string `json:"b,omitempty"`
}

// splitTag is Tag's inverse; agent names never contain "/".
func splitTag(tag string) (agent, session string) {
	agent, session, _ = strings.Cut(tag, "/")
	return agent, session
}

// pump moves a session's outbox on: each entry becomes an asynq task with a
// deterministic id (so a repeat is a no-op) or is dropped when nothing is
// to be sent, and leaves the outbox only once that is done. It is safe to
// run any number of times, from any process.
func (m *Manager) pump(ctx context.Context, tag string) error {
	ctx = context.WithoutCancel(ctx)
	entries, err := m.rdb.ZRangeWithScores(ctx, m.k.outbox(tag), 0, -1).Result()
	if err != nil {
		return err
	}
	var first error
	for _, z := range entries {
		entry, _ := z.Member.(string)
		if err := m.follow(ctx, tag, entry, int64(z.Score)); err != nil {
			if errors.Is(err, errAwaitingIndex) || errors.Is(err, errAwaitingWaiter) {
				continue // the indexer moves it on
			}
			m.log.Warn("outbox entry will be retried", slog.String("entry", entry), slog.Any("err", err))
			first = cmp.Or(first, err)
			continue
		}
		m.rdb.ZRem(ctx, m.k.outbox(tag), entry)
	}
	return first
}

// pumpEntry moves on one outbox entry its caller just recorded at score
// at, without reading the rest of the session's outbox: concurrent settles
// of one session each carry their own.
func (m *Manager) pumpEntry(ctx context.Context, tag, entry string, at int64) error {
	ctx = context.WithoutCancel(ctx)
	if err := m.follow(ctx, tag, entry, at); err != nil {
		return err
	}
	var cmd *redis.IntCmd
	if err := m.store.ap.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = p.ZRem(ctx, m.k.outbox(tag), entry) }); err != nil {
		return err
	}
	return cmd.Err()
}

// follow carries out one outbox entry.
func (m *Manager) follow(ctx context.Context, tag, entry string, at int64) error {
	kind, ref, _ := strings.Cut(entry, "|")
	agent, session := splitTag(tag)
	switch kind {
	case "r", "w":
		if !m.mayResume(ctx, agent, session) {
			return nil
		}
		j, err := m.store.load(ctx, tag, ref)
		if err != nil || j == nil || j.Incognito {
			return err
		}
		if kind == "w" {
			if m.now().Before(j.waitUntil.Add(waitGrace)) {
				return errAwaitingWaiter // its caller may still take it
			}
			if j.Notified {
				return nil // the caller took it and died before tidying up
			}
		}
		if m.awaitingIndex(ctx, j) {
			return errAwaitingIndex // the drain would hold it back: nudge once it is there
		}
		meta := ResumeMeta{Trigger: j.ID, Jobs: []string{j.ID}, BatchID: j.BatchID}
		meta.Counts.add(j.Status, 1)
		taskID, msgID := "resume:"+j.ID, "resume-"+j.ID
		if g := j.Generation; g > 0 {
			// A retried job's new outcome is news: its own ids.
			taskID, msgID = fmt.Sprintf("%s:r%d", taskID, g), fmt.Sprintf("%s-r%d", msgID, g)
		}
		if m.cfg.ResumeCoalesce > 0 && j.BatchID == nil {
			send, err := m.stormGate(ctx, tag, j)
			if err != nil || !send {
				return err // merged into the window's nudge
			}
		}
		return m.enqueueResume(ctx, agent, session, taskID, msgID, meta)
	case "j":
		b, err := m.loadBatch(ctx, tag, ref)
		if err != nil || b == nil {
			return err
		}
		if m.indexerAlive(ctx) {
			// Like a single job's nudge, the join waits until the drain
			// would hand over every member: a long report is held back
			// until it is searchable.
			members, err := m.store.lookupMany(ctx, b.Jobs)
			if err != nil {
				return err
			}
			for _, j := range members {
				if j != nil && m.awaitingIndex(ctx, j) {
					return errAwaitingIndex
				}
			}
		}
		metrics.BatchJoins.WithLabelValues(strconv.FormatBool(b.Partial)).Inc()
		m.publish(Event{Type: EventBatchJoined, BatchID: b.ID, Agent: agent, OriginSession: session,
			Status: StatusCompleted, Counts: &b.Counts, Partial: b.Partial, At: m.now().UTC()})
		if !m.mayResume(ctx, agent, session) {
			return nil
		}
		id := b.ID
		meta := ResumeMeta{Trigger: b.ID, Jobs: b.Jobs, BatchID: &id, Counts: b.Counts, Partial: b.Partial}
		return m.enqueueResume(ctx, agent, session, "resume:"+b.ID, "resume-"+b.ID, meta)
	case "i":
		j, err := m.store.load(ctx, tag, ref)
		if err != nil || j == nil {
			return err
		}
		_, err = m.AppendDocs(ctx, []search.Doc{reportDoc(j)})
		return err
	case "s":
		payload, _ := json.Marshal(controlPayload{Agent: agent, Session: session, BatchID: ref})
		_, err := m.aq.EnqueueContext(ctx, asynq.NewTask(TypeStraggler, payload,
			asynq.TaskID("straggler:"+ref), asynq.Queue(m.Queue(QueueControl)),
			asynq.ProcessIn(m.cfg.BatchJoinTimeout), asynq.MaxRetry(resumeMaxRetry)))
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return nil
		}
		return err
	case "c":
		if !m.mayResume(ctx, agent, session) {
			return nil
		}
		ids := strings.Split(ref, ",")
		meta := ResumeMeta{Trigger: ids[0], Jobs: []string{}}
		for _, id := range ids {
			j, err := m.store.load(ctx, tag, id)
			if err != nil {
				return err
			}
			if j == nil || j.Incognito {
				continue
			}
			meta.Jobs = append(meta.Jobs, id)
			meta.Counts.add(j.Status, 1)
		}
		if len(meta.Jobs) == 0 {
			return nil
		}
		// The oldest merged job never had a nudge of its own: its id names
		// this one, so a repeat of the pump is a no-op.
		return m.enqueueResume(ctx, agent, session, "storm:"+ids[0], "resume-"+ids[0], meta)
	case "f":
		if !m.mayResume(ctx, agent, session) {
			return nil
		}
		meta, err := m.foldMeta(ctx, tag, ref)
		if err != nil || len(meta.Jobs) == 0 {
			return err
		}
		suffix := strconv.FormatInt(at, 10)
		return m.enqueueResume(ctx, agent, session, "fold:"+ref+":"+suffix, "resume-"+ref+"-"+suffix, meta)
	}
	m.log.Error("unknown outbox entry dropped", slog.String("entry", entry))
	return nil
}

// foldMeta describes a coalesced nudge: what is still undrained now.
func (m *Manager) foldMeta(ctx context.Context, tag, trigger string) (ResumeMeta, error) {
	ids, err := m.rdb.ZRange(ctx, m.k.pending(tag), 0, foldJobsMax-1).Result()
	if err != nil {
		return ResumeMeta{}, err
	}
	meta := ResumeMeta{Trigger: trigger, Jobs: []string{}}
	for _, id := range ids {
		j, err := m.store.load(ctx, tag, id)
		if err != nil {
			return meta, err
		}
		if j == nil {
			continue
		}
		meta.Jobs = append(meta.Jobs, id)
		meta.Counts.add(j.Status, 1)
	}
	if strings.HasPrefix(trigger, "bt-") {
		b := trigger
		meta.BatchID = &b
	}
	return meta, nil
}

// resumeAgent returns the agent to wake when a session may be woken at all,
// or nil: never a background worker's own context, never with auto-resume
// off globally or for the agent, never for an agent bgjobs cannot reach.
// Settles ask it to decide whether to record a resume; deliveries ask it
// again, since the agent's configuration may have changed in between.
func (m *Manager) resumeAgent(ctx context.Context, agent, session string) (*Agent, error) {
	if m.cfg.NoAutoResume || strings.HasPrefix(session, "background:") {
		return nil, nil
	}
	a, err := m.agents.get(ctx, agent)
	if err != nil || a == nil || !a.resumes() {
		return nil, err
	}
	return a, nil
}

// mayResume is resumeAgent as a yes or no; an unreadable configuration is
// a no.
func (m *Manager) mayResume(ctx context.Context, agent, session string) bool {
	a, _ := m.resumeAgent(ctx, agent, session)
	return a != nil
}

// resumes reports whether the agent's configuration asks for resumes.
func (a *Agent) resumes() bool {
	if a.AutoResume != nil && !*a.AutoResume {
		return false
	}
	switch a.Resume {
	case ResumeA2A:
		return a.A2AURL != ""
	case ResumeWebhook:
		return a.WebhookURL != ""
	}
	return false
}

func (m *Manager) enqueueResume(ctx context.Context, agent, session, taskID, messageID string, meta ResumeMeta) error {
	meta.Origin, meta.Kind = "background", "background.resume"
	if meta.Jobs == nil {
		meta.Jobs = []string{}
	}
	payload, err := json.Marshal(resumePayload{Agent: agent, Session: session, MessageID: messageID, Meta: meta, Since: m.now().UnixMilli()})
	if err != nil {
		return err
	}
	_, err = m.aq.EnqueueContext(ctx, asynq.NewTask(TypeResume, payload, asynq.TaskID(taskID),
		asynq.Queue(m.Queue(QueueResume)), asynq.MaxRetry(resumeMaxRetry), asynq.Retention(resumeRetention)))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil // already sent or on its way
	}
	return err
}

// ProcessResume is the asynq handler of resume tasks: hold it if the
// session is busy, otherwise send it. A failed send returns its error and
// asynq retries with backoff; the settle that caused it never waits.
func (m *Manager) ProcessResume(ctx context.Context, t *asynq.Task) error {
	var p resumePayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: resume payload: %v", asynq.SkipRetry, err)
	}
	a, err := m.resumeAgent(ctx, p.Agent, p.Session)
	if err != nil {
		return err
	}
	if a == nil {
		metrics.Resumes.WithLabelValues("dropped").Inc()
		return nil
	}
	tag := Tag(p.Agent, p.Session)
	held, err := holdIfBusyCmd.Run(ctx, m.rdb, []string{m.k.busy(tag), m.k.held(tag)}, m.now().UnixMilli(), p.Meta.Trigger).Int()
	if err != nil {
		return err
	}
	if held == 1 {
		metrics.Resumes.WithLabelValues("held").Inc()
		m.log.Info("resume held: session busy", slog.String("session", p.Session), slog.String("trigger", p.Meta.Trigger))
		return nil
	}
	if m.resumer == nil {
		return fmt.Errorf("%w: this process cannot send resumes", asynq.SkipRetry)
	}
	// One nudge in flight per session: a second waits its turn (asynq
	// tries it again shortly, not counting it as a failure).
	lock := m.k.inflight(tag)
	if ok, err := m.rdb.SetNX(ctx, lock, p.MessageID, inflightTTL).Result(); err != nil {
		return err
	} else if !ok {
		return errNudgeInFlight
	}
	defer releaseLockCmd.Run(context.WithoutCancel(ctx), m.rdb, []string{lock}, p.MessageID)
	// A worker that died after sending but before asynq recorded the task
	// done would send it again on recovery: the delivered mark, set the
	// moment the agent answered, turns that repeat into a no-op.
	sent := m.k.sent(tag, p.MessageID)
	if n, err := m.rdb.Exists(ctx, sent).Result(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	if err := m.resumer.SendResume(ctx, a, p.Session, p.MessageID, p.Meta); err != nil {
		metrics.Resumes.WithLabelValues("failed").Inc()
		return err
	}
	m.rdb.Set(context.WithoutCancel(ctx), sent, "1", resumeRetention)
	metrics.Resumes.WithLabelValues("delivered").Inc()
	if p.Since > 0 {
		metrics.ResumeLatency.Observe(m.now().Sub(time.UnixMilli(p.Since)).Seconds())
	}
	m.log.Info("resume delivered", slog.String("session", p.Session), slog.String("message_id", p.MessageID))
	m.publish(Event{Type: EventResumed, JobID: soleJob(p.Meta.Jobs), Agent: p.Agent, OriginSession: p.Session,
		Status: StatusCompleted, Trigger: p.Meta.Trigger, Counts: &p.Meta.Counts, At: m.now().UTC()})
	return nil
}

// soleJob is the job id a resume event names: the one job it announces,
// or none for a batch or a merge.
func soleJob(ids []string) string {
	if len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// ProcessStraggler is the batch's straggler timer: it forces a partial join
// unless the batch joined already.
func (m *Manager) ProcessStraggler(ctx context.Context, t *asynq.Task) error {
	var p controlPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: straggler payload: %v", asynq.SkipRetry, err)
	}
	tag := Tag(p.Agent, p.Session)
	n, err := forceJoinCmd.Run(ctx, m.rdb,
		[]string{m.k.batch(tag, p.BatchID), m.k.batchClaim(tag, p.BatchID), m.k.outbox(tag)},
		p.BatchID, m.now().UnixMilli()).Int()
	if err != nil {
		return err
	}
	if n == 1 {
		m.log.Info("batch joined partially on its straggler timeout", slog.String("batch_id", p.BatchID))
		return m.pumpEntry(ctx, tag, "j|"+p.BatchID, 0)
	}
	return nil
}

// ProcessLapse runs when a busy lease may have lapsed with no idle call.
func (m *Manager) ProcessLapse(ctx context.Context, t *asynq.Task) error {
	var p controlPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: lapse payload: %v", asynq.SkipRetry, err)
	}
	_, err := m.endBusy(ctx, Tag(p.Agent, p.Session), "lapse")
	return err
}

// Busy marks a session inside a turn for ttl: resumes are held, never
// dropped, until Idle or until the lease lapses.
func (m *Manager) Busy(ctx context.Context, agent, session string, ttl time.Duration) error {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return err
	}
	if ttl <= 0 || ttl > busyTTLMax {
		return bgjobs.FieldError("ttl_s", "between 1 and %d", int(busyTTLMax.Seconds()))
	}
	tag := Tag(agent, session)
	expiry := m.now().Add(ttl).UnixMilli()
	if err := busyCmd.Run(ctx, m.rdb, []string{m.k.busy(tag)}, expiry, int64((ttl + time.Minute).Seconds())).Err(); err != nil {
		return unavailable("busy", err)
	}
	payload, _ := json.Marshal(controlPayload{Agent: agent, Session: session})
	_, err := m.aq.EnqueueContext(ctx, asynq.NewTask(TypeLapse, payload,
		asynq.TaskID("lapse:"+digest(tag)+":"+strconv.FormatInt(expiry, 10)), asynq.Queue(m.Queue(QueueControl)),
		asynq.ProcessIn(ttl+250*time.Millisecond), asynq.MaxRetry(resumeMaxRetry)))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return unavailable("busy lapse timer", err)
	}
	return nil
}

// Idle ends a session's busy lease; one coalesced resume fires if resumes
// were held and anything is still undrained.
func (m *Manager) Idle(ctx context.Context, agent, session string) error {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return err
	}
	_, err := m.endBusy(ctx, Tag(agent, session), "idle")
	return err
}

// IsBusy reports whether a session holds an unexpired busy lease.
func (m *Manager) IsBusy(ctx context.Context, agent, session string) (bool, error) {
	v, err := m.rdb.Get(ctx, m.k.busy(Tag(agent, session))).Int64()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, unavailable("busy", err)
	}
	return v > m.now().UnixMilli(), nil
}

func (m *Manager) endBusy(ctx context.Context, tag, mode string) (bool, error) {
	res, err := idleCmd.Run(ctx, m.rdb, []string{m.k.busy(tag), m.k.held(tag), m.k.pending(tag), m.k.outbox(tag)},
		m.now().UnixMilli(), mode).Int64Slice()
	if err != nil {
		return false, unavailable("idle", err)
	}
	if res[1] == 1 {
		if err := m.pump(ctx, tag); err != nil {
			m.log.Warn("pump after idle", slog.Any("err", err))
		}
	}
	return res[0] == 1, nil
}

// PumpAll moves on every session's outbox: what a crash between a settle
// and its pump left behind. The reconciler runs it at start and on every
// sweep.
func (m *Manager) PumpAll(ctx context.Context) error {
	if err := m.sweepStorms(ctx); err != nil {
		m.log.Warn("storm sweep", slog.Any("err", err))
	}
	prefix := m.cfg.Namespace + ":{"
	iter := m.rdb.Scan(ctx, 0, m.k.outboxPattern(), 500).Iterator()
	var first error
	for iter.Next(ctx) {
		key := iter.Val()
		tag := strings.TrimSuffix(strings.TrimPrefix(key, prefix), "}:outbox")
		if err := m.pump(ctx, tag); err != nil {
			first = cmp.Or(first, err)
		}
	}
	return cmp.Or(first, iter.Err())
}

// agentCache keeps agent configurations for a moment: every settle asks
// whether its agent wants resumes, and the answer rarely changes.
type agentCache struct {
	store *Store
	ttl   time.Duration
	mu    sync.Mutex
	items map[string]agentCacheItem
}

type agentCacheItem struct {
	a   *Agent
	exp time.Time
}

func (c *agentCache) get(ctx context.Context, name string) (*Agent, error) {
	now := time.Now()
	c.mu.Lock()
	it, ok := c.items[name]
	c.mu.Unlock()
	if ok && now.Before(it.exp) {
		return it.a, nil
	}
	a, err := c.store.getAgent(ctx, name)
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
