package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// SpawnRequest asks for one job.
type SpawnRequest struct {
	Agent          string
	OriginSession  string
	Kind           bgjobs.Kind
	SubagentType   string
	Description    string
	Prompt         string
	Work           *bgjobs.WorkSpec
	Incognito      bool
	IdempotencyKey string
	// TurnID names the turn of the origin session that spawns the job:
	// the jobs of one turn join like a batch (one resume) once the turn
	// is sealed (the session goes idle, or Config.TurnWindow after its
	// last spawn). Empty: the job stands alone.
	TurnID string
	// Invalid, when set, is why a batch spec could not even be read; the
	// batch reports it as skipped.
	Invalid *bgjobs.Error
	// Wait is how long SpawnAndWait waits for the job to end.
	Wait time.Duration
	// StartIn holds the job back that long (at most StartInMax): it stays
	// queued, its task in asynq's scheduled set, until then. Zero starts
	// it at once.
	StartIn time.Duration
	// TimeoutS bounds the job's run to that many seconds, from 1 up to
	// the process's RunTimeout (BGJOBS_TURN_TIMEOUT); zero leaves it at
	// RunTimeout. Past it the job ends failed ("timed out after …").
	TimeoutS int64
}

// StartInMax is the furthest ahead a spawn may start its job (start_in_s).
const StartInMax = 30 * 24 * time.Hour

// derivedDescriptionChars caps a description taken from the prompt.
const derivedDescriptionChars = 80

// spawnIdemTTL is how long an Idempotency-Key on spawn returns the first job.
const spawnIdemTTL = 24 * time.Hour

// Spawn validates req, writes a queued row and enqueues its task. existed is
// true when an Idempotency-Key matched an earlier spawn, whose job is returned.
func (m *Manager) Spawn(ctx context.Context, req SpawnRequest) (job *bgjobs.Job, existed bool, err error) {
	j, err := m.checkSpawn(ctx, req)
	if err != nil {
		return nil, false, err
	}
	m.tenants.NoteSpawner(ctx, req.Agent)
	if req.Wait > 0 {
		j.WaitUntil = j.CreatedAt.Add(req.Wait)
	}
	if req.IdempotencyKey != "" {
		prior, err := m.idem.Claim(ctx, req.Agent, req.IdempotencyKey, j.ID, fingerprint(j), spawnIdemTTL)
		if err != nil || prior != nil {
			return prior, prior != nil, err
		}
	}
	also := []pipeline.Op{m.feeds.Queue(bgjobs.JobEvent(bgjobs.EventStarted, j, bgjobs.StatusQueued, j.CreatedAt))}
	if req.TurnID != "" {
		tag := bgjobs.Tag(j.Agent, j.OriginSession)
		bid, err := m.store.JoinTurn(ctx, tag, req.TurnID, newID("bt-"), j.ID, !j.Incognito, j.CreatedAt, m.cfg.BatchJoinTimeout)
		if err != nil {
			return nil, false, err
		}
		j.BatchID = &bid
		also = append(also, m.store.IndexBatch(tag, bid))
	}
	// The row rides in the same pipeline as its task, just ahead of it.
	rowCtx, row := m.store.WithRow(ctx, j, also...)
	enqErr := m.eng.EnqueueJob(rowCtx, j)
	if err := ctx.Err(); err != nil {
		// The pipeline may still be going out: a job that got in runs and
		// settles as usual; one half-written is the reconciler's.
		return nil, false, bgjobs.Unavailable("spawn", err)
	}
	rowErr := row.Err()
	switch {
	case enqErr != nil:
		if !errors.Is(rowErr, pipeline.ErrNotSent) {
			m.store.Forget(context.WithoutCancel(ctx), j)
		}
		return nil, false, enqErr
	case rowErr != nil:
		// The task is queued but its row is not whole: take the task back.
		m.eng.DeleteTask(j)
		m.store.Forget(context.WithoutCancel(ctx), j)
		return nil, false, bgjobs.Unavailable("create job", rowErr)
	}
	if j.BatchID != nil {
		if err := m.follow.ArmSeal(ctx, bgjobs.Tag(j.Agent, j.OriginSession), *j.BatchID, j.CreatedAt); err != nil {
			// The session's idle, or the straggler timer, joins it instead.
			m.log.Warn("arm a turn's seal", slog.String("batch_id", *j.BatchID), slog.Any("err", err))
		}
	}
	metrics.Spawned.WithLabelValues(string(j.Kind)).Inc()
	m.log.Info("job spawned", slog.String("job_id", j.ID), slog.String("agent", j.Agent), slog.String("kind", string(j.Kind)))
	return j, false, nil
}

// fingerprint identifies what a spawn asks for (its row as built, so a
// default spelled out or left out is the same request).
func fingerprint(j *bgjobs.Job) string {
	var args bytes.Buffer
	_ = json.Compact(&args, j.WorkArgs)
	parts := []any{j.OriginSession, j.Kind, j.SubagentType, j.Description, j.Prompt, j.WorkType, args.String(), j.Incognito}
	if !j.RunAt.IsZero() {
		// Only then, so a key claimed before start_in_s existed keeps
		// its fingerprint.
		parts = append(parts, j.RunAt.Sub(j.CreatedAt).Milliseconds())
	}
	if j.TimeoutS > 0 {
		parts = append(parts, "timeout", j.TimeoutS)
	}
	b, _ := json.Marshal(parts)
	return registry.Digest(string(b))
}

// depthOf is the depth of a job spawned by parent's own turn: the parent
// must be a job of the same agent, not cancelled, and the depth within the
// fence.
func (m *Manager) depthOf(ctx context.Context, agent, parent string) (int, error) {
	p, err := m.store.Lookup(ctx, parent)
	if err != nil {
		return 0, err
	}
	if p == nil || p.Agent != agent {
		return 0, bgjobs.FieldError("origin_session", "%s%s names no job of agent %q: a worker's own spawns name the job whose turn spawns them",
			bgjobs.BackgroundPrefix, parent, agent)
	}
	if p.Status == bgjobs.StatusCancelled {
		// Its turn was stopped, and what it had spawned with it: nothing
		// more runs on its behalf.
		return 0, &bgjobs.Error{Code: bgjobs.EConflict, Field: "origin_session",
			Message: fmt.Sprintf("job %s was cancelled; nothing more is spawned for its turn", parent)}
	}
	if p.Depth+1 > m.cfg.MaxDepth {
		return 0, bgjobs.FieldError("origin_session", "background jobs nest at most %d deep (BGJOBS_MAX_DEPTH); job %s is at depth %d", m.cfg.MaxDepth, parent, p.Depth)
	}
	return p.Depth + 1, nil
}

// checkSpawn applies the domain rules and builds the row.
func (m *Manager) checkSpawn(ctx context.Context, req SpawnRequest) (*bgjobs.Job, error) {
	if req.Invalid != nil {
		return nil, req.Invalid
	}
	if err := bgjobs.CheckAgentName("agent", req.Agent); err != nil {
		return nil, err
	}
	if err := bgjobs.CheckSession("origin_session", req.OriginSession); err != nil {
		return nil, err
	}
	if len(req.TurnID) > 200 || !utf8.ValidString(req.TurnID) {
		return nil, bgjobs.FieldError("turn_id", "at most 200 bytes of UTF-8")
	}
	if utf8.RuneCountInString(req.Description) > bgjobs.MaxDescriptionChars {
		return nil, bgjobs.FieldError("description", "at most %d characters", bgjobs.MaxDescriptionChars)
	}
	if !utf8.ValidString(req.Description) || !utf8.ValidString(req.Prompt) {
		return nil, bgjobs.FieldError("prompt", "must be valid UTF-8")
	}
	if req.StartIn < 0 || req.StartIn > StartInMax {
		return nil, bgjobs.FieldError("start_in_s", "between 0 and %d", int64(StartInMax/time.Second))
	}
	if req.StartIn > 0 && req.Wait > 0 {
		return nil, bgjobs.FieldError("start_in_s", "a job that starts later cannot be waited for: leave out wait_ms")
	}
	if req.StartIn > 0 && req.TurnID != "" {
		return nil, bgjobs.FieldError("start_in_s", "a job that starts later is not part of this turn's briefing: leave out turn_id")
	}
	if most := int64(m.cfg.RunTimeout / time.Second); req.TimeoutS < 0 || req.TimeoutS > most {
		return nil, bgjobs.FieldError("timeout_s", "between 1 and %d seconds (BGJOBS_TURN_TIMEOUT, the longest any job runs here), or 0 for that", most)
	}
	j := &bgjobs.Job{
		ID: newID("bg-"), Agent: req.Agent, OriginSession: req.OriginSession,
		Kind: req.Kind, Description: req.Description, Status: bgjobs.StatusQueued,
		Incognito: req.Incognito, CreatedAt: m.now().UTC().Truncate(time.Millisecond), TimeoutS: req.TimeoutS,
	}
	if j.Kind == "" {
		j.Kind = bgjobs.KindTurn
	}
	if req.StartIn > 0 {
		j.RunAt = j.CreatedAt.Add(req.StartIn)
	}
	if bgjobs.IsBackground(req.OriginSession) {
		var err error
		if j.Depth, err = m.depthOf(ctx, req.Agent, strings.TrimPrefix(req.OriginSession, bgjobs.BackgroundPrefix)); err != nil {
			return nil, err
		}
	}
	switch j.Kind {
	case bgjobs.KindTurn:
		if strings.TrimSpace(req.Prompt) == "" {
			return nil, bgjobs.FieldError("prompt", "a turn job needs a prompt")
		}
		if len(req.Prompt) > bgjobs.MaxPromptBytes {
			return nil, &bgjobs.Error{Code: bgjobs.ETooLarge, Message: fmt.Sprintf("prompt is over %d bytes", bgjobs.MaxPromptBytes), Field: "prompt"}
		}
		if req.Work != nil {
			return nil, bgjobs.FieldError("work", "a turn job takes no work spec")
		}
		agent, err := m.tenants.GetAgent(ctx, req.Agent)
		if err != nil {
			return nil, err
		}
		if agent == nil || agent.A2AURL == "" {
			return nil, bgjobs.FieldError("agent", "agent %q has no a2a_url: register it with PUT /v1/agents/%s before spawning turns", req.Agent, req.Agent)
		}
		if len(agent.SubagentTypes) > 0 {
			if _, ok := agent.SubagentTypes[req.SubagentType]; !ok {
				roster := strings.Join(rosterNames(agent), ", ")
				if req.SubagentType == "" {
					return nil, bgjobs.FieldError("subagent_type", "is required: agent %q's roster is %s", req.Agent, roster)
				}
				return nil, bgjobs.FieldError("subagent_type", "%q is not in agent %q's roster (%s)", req.SubagentType, req.Agent, roster)
			}
		}
		j.SubagentType = req.SubagentType
		j.Prompt = req.Prompt
		if j.Description == "" {
			// Every notification and list shows a title: one from the
			// prompt's first line beats a blank.
			first, _, _ := strings.Cut(strings.TrimSpace(req.Prompt), "\n")
			j.Description = bgjobs.Excerpt(first, derivedDescriptionChars)
		}
	case bgjobs.KindWork:
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
		if kind.Authorize != nil {
			if err := kind.Authorize(ctx, req.Agent, req.Work.Args); err != nil {
				return nil, err
			}
		}
		j.WorkType = req.Work.Type
		if j.Description == "" {
			j.Description = req.Work.Type + " job"
		}
		j.WorkArgs = req.Work.Args
	default:
		return nil, bgjobs.FieldError("kind", "want turn or work, got %q", req.Kind)
	}
	return j, nil
}

func rosterNames(a *bgjobs.Agent) []string { return slices.Sorted(maps.Keys(a.SubagentTypes)) }
