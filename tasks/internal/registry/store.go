// Package registry owns bgjobs' Redis data: every key (keys.go), and the
// scripts and commands of the job registry — rows, sessions, batches,
// outboxes, lists, the turn cap, leases (scripts.go). Its sub-packages keep
// the rest, on keys built here: wake (a session's busy lease, held nudges,
// storm guard, delivery marks), feeds (the event and report streams) and
// tenants (agents and their keys). Script outcomes become typed errors
// here, once (errors.go). Nothing else in the project touches bgjobs' keys.
//
// Commands take one of two write paths, both through the process's
// pipeline.Writer:
//
//   - waited (Store.Do, scripts): the caller gets the reply; the command
//     shares a round trip with whatever else is in flight. State changes
//     take this path.
//   - follow-up (Store.later): fire and forget, in order; events, progress
//     lines and bookkeeping the reconciler would repair. Losing them in a
//     crash is harmless by construction.
//
// Reads that scan (sweeps, purge) go straight to the client.
package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
)

// Store is the Redis registry: job rows, session sets and the indexes that
// find them.
type Store struct {
	rdb       redis.UniversalClient
	w         *pipeline.Writer
	k         Keys
	retention time.Duration
}

// New returns a registry in namespace ns on rdb, writing through w.
// retention is how long a row is kept once notified.
func New(rdb redis.UniversalClient, w *pipeline.Writer, ns string, retention time.Duration) *Store {
	return &Store{rdb: rdb, w: w, k: Keys{NS: ns}, retention: retention}
}

// Keys returns the store's key builder (tests and docs read keys through it).
func (s *Store) Keys() Keys { return s.k }

// Ping checks that Redis answers.
// A single-node URL pointing at a Redis Cluster node answers PING but
// MOVEDs most writes: it is refused as not ready, with what to do.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return err
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		return nil
	}
	info, err := s.rdb.Info(ctx, "cluster").Result()
	if err == nil && strings.Contains(info, "cluster_enabled:1") {
		return ErrClusterNode
	}
	return nil
}

// do runs queued commands on the waited path.
func (s *Store) do(ctx context.Context, queue pipeline.Op) error { return s.w.Do(ctx, queue) }

// later queues commands on the follow-up path.
func (s *Store) later(op pipeline.Op) { s.w.Add(op) }

// queueCreate adds the writes of a new row to p.
func (s *Store) queueCreate(ctx context.Context, p redis.Pipeliner, j *bgjobs.Job) []redis.Cmder {
	tag := bgjobs.Tag(j.Agent, j.OriginSession)
	score := float64(j.CreatedAt.UnixMilli())
	// The reconciler looks at a job once it is older than its grace; one
	// that starts later, only once its time has come.
	due := float64(max(j.CreatedAt.UnixMilli(), j.RunAt.UnixMilli()))
	return []redis.Cmder{
		p.HSet(ctx, s.k.Job(tag, j.ID), rowFields(j)...),
		p.ZAdd(ctx, s.k.SessionJobs(tag), redis.Z{Score: score, Member: j.ID}),
		p.ZAdd(ctx, s.k.AgentJobs(j.Agent), redis.Z{Score: score, Member: j.ID}),
		p.HSet(ctx, s.k.JobIndex(), j.ID, tag),
		p.ZAdd(ctx, s.k.active(), redis.Z{Score: due, Member: j.ID}),
	}
}

// WithRow returns a context under which the next asynq script call (the
// job's enqueue) carries j's new row just ahead of it: one round trip for
// both, the row first. Lead.Err reports whether the row was written.
// also rides with the row (the job's first event: it must reach its stream
// before a worker can publish the next); its errors are not the row's.
func (s *Store) WithRow(ctx context.Context, j *bgjobs.Job, also ...pipeline.Op) (context.Context, *pipeline.Lead) {
	return pipeline.WithLead(ctx, func(ctx context.Context, p redis.Pipeliner) []redis.Cmder {
		cmds := s.queueCreate(ctx, p, j)
		for _, op := range also {
			op(ctx, p)
		}
		return cmds
	})
}

// Forget removes a row that never became a job (its task could not be
// enqueued), best effort.
func (s *Store) Forget(ctx context.Context, j *bgjobs.Job) {
	tag := bgjobs.Tag(j.Agent, j.OriginSession)
	_ = s.do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		p.Del(ctx, s.k.Job(tag, j.ID))
		p.ZRem(ctx, s.k.SessionJobs(tag), j.ID)
		p.ZRem(ctx, s.k.AgentJobs(j.Agent), j.ID)
		p.HDel(ctx, s.k.JobIndex(), j.ID)
		p.ZRem(ctx, s.k.active(), j.ID)
	})
}

// TagOf returns the session tag of a job id, or "" if unknown.
func (s *Store) TagOf(ctx context.Context, id string) (string, error) {
	var cmd *redis.StringCmd
	if err := s.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = p.HGet(ctx, s.k.JobIndex(), id) }); err != nil {
		return "", unavailable("look up job", err)
	}
	tag, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return tag, unavailable("look up job", err)
}

// Load reads a row by tag and id; nil when it does not exist.
func (s *Store) Load(ctx context.Context, tag, id string) (*bgjobs.Job, error) {
	var cmd *redis.MapStringStringCmd
	if err := s.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = p.HGetAll(ctx, s.k.Job(tag, id)) }); err != nil {
		return nil, unavailable("read job", err)
	}
	h, err := cmd.Result()
	if err != nil {
		return nil, unavailable("read job", err)
	}
	if len(h) == 0 {
		return nil, nil
	}
	return jobFromHash(h), nil
}

// Lookup reads a row by id alone; nil when it does not exist.
func (s *Store) Lookup(ctx context.Context, id string) (*bgjobs.Job, error) {
	tag, err := s.TagOf(ctx, id)
	if err != nil || tag == "" {
		return nil, err
	}
	j, err := s.Load(ctx, tag, id)
	if err == nil && j == nil {
		// The row expired after it was notified: drop the stale index entry.
		s.later(func(ctx context.Context, p redis.Pipeliner) { p.HDel(ctx, s.k.JobIndex(), id) })
	}
	return j, err
}

// LookupMany reads rows by id in two round trips; a missing row is nil.
func (s *Store) LookupMany(ctx context.Context, ids []string) ([]*bgjobs.Job, error) {
	return s.readRows(ctx, ids, func(p redis.Pipeliner, key string) func() map[string]string {
		return p.HGetAll(ctx, key).Val
	})
}

// briefFields are the row fields Briefs reads.
var briefFields = []string{fID, fAgent, fSession, fKind, fStatus, fStarted, fCompleted, fNotified, fHoldIndex, fReportIndexed}

// Briefs reads, in two round trips, only the small fields of each job (nil
// for a missing row): id, agent, session, kind, status, start and end,
// notified, held for the index and indexed. What looks at many rows at once
// (a sweep over a backlog, a join of 1,000 members) must not load their
// prompts (up to 256 KiB each) and reports.
func (s *Store) Briefs(ctx context.Context, ids []string) ([]*bgjobs.Job, error) {
	return s.readRows(ctx, ids, func(p redis.Pipeliner, key string) func() map[string]string {
		c := p.HMGet(ctx, key, briefFields...)
		return func() map[string]string {
			h := make(map[string]string, len(briefFields))
			for k, v := range c.Val() {
				if v, ok := v.(string); ok {
					h[briefFields[k]] = v
				}
			}
			return h
		}
	})
}

// readRows reads the rows of ids in two round trips: the job index's tags,
// then each row, pipelined; read queues one row's read and returns what
// gives its fields once the pipeline ran. A missing row is nil.
func (s *Store) readRows(ctx context.Context, ids []string, read func(p redis.Pipeliner, key string) func() map[string]string) ([]*bgjobs.Job, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	tags, err := s.rdb.HMGet(ctx, s.k.JobIndex(), ids...).Result()
	if err != nil {
		return nil, unavailable("look up jobs", err)
	}
	rows := make([]func() map[string]string, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if tag, _ := tags[i].(string); tag != "" {
				rows[i] = read(p, s.k.Job(tag, id))
			}
		}
		return nil
	}); err != nil {
		return nil, unavailable("read jobs", err)
	}
	out := make([]*bgjobs.Job, len(ids))
	for i, row := range rows {
		if row == nil {
			continue
		}
		if h := row(); h[fID] != "" {
			out[i] = jobFromHash(h)
		}
	}
	return out, nil
}

// Started is a job a worker may run now.
type Started struct {
	Job     *bgjobs.Job
	Attempt int64
	// Rerun is true when the row was already running: a re-run after a
	// lost lease.
	Rerun bool
}

// Start moves a job to running (startCmd). ErrNoJob: no row; ErrEnded: do
// not run it.
func (s *Store) Start(ctx context.Context, tag, id string, now time.Time) (Started, error) {
	key := s.k.Job(tag, id)
	var row *redis.MapStringStringCmd
	// The row is read just behind the script, in its round trip.
	res, err := s.w.ScriptThen(ctx, startCmd, []string{key}, []any{ms(now)},
		func(ctx context.Context, p redis.Pipeliner) { row = p.HGetAll(ctx, key) }).Slice()
	if err != nil {
		return Started{}, unavailable("start job", err)
	}
	if len(res) != 2 {
		return Started{}, fmt.Errorf("start: unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	if err := CodeErr(code); err != nil {
		return Started{}, err
	}
	if code == 0 {
		return Started{}, ErrEnded
	}
	attempt, _ := res[1].(int64)
	h, err := row.Result()
	if err != nil {
		return Started{}, unavailable("start job", err)
	}
	if len(h) == 0 {
		// Another client's commands may run between the two: the job was
		// cancelled and deleted in that instant. Nothing to run.
		return Started{}, ErrEnded
	}
	return Started{Job: jobFromHash(h), Attempt: attempt, Rerun: code == 2}, nil
}

// Requeue hands a running job back to queued while asynq waits to try it
// again, if run (nil: any) is still its latest.
func (s *Store) Requeue(ctx context.Context, tag, id string, run *bgjobs.Run) error {
	return unavailable("requeue job", s.w.Script(ctx, requeueCmd, []string{s.k.Job(tag, id)}, runArg(run)).Err())
}

// runArg is a run as the scripts take it (LuaRun): "" for any.
func runArg(r *bgjobs.Run) string {
	if r == nil {
		return ""
	}
	return strconv.Itoa(r.Generation) + ":" + strconv.FormatInt(r.Attempt, 10)
}

// Settlement is one settle: how the job ended and what its settler decided
// must follow.
type Settlement struct {
	Tag, ID string
	Outcome bgjobs.Outcome
	Now     time.Time
	// Announce records an r| (or w|) entry: the session may be woken.
	Announce bool
	// Index records an i| entry: the report goes to memory.
	Index bool
	// HoldForIndex makes the drain wait until the report is searchable.
	HoldForIndex bool
	// Expire starts the row's retention now, read or not: no one drains
	// or resumes a worker's own session, so its rows go with retention.
	Expire bool
}

// Settle ends a job (settleCmd) and returns the outbox entries it
// recorded. ErrEnded: it had ended already, nothing changed; ErrNoJob: no row.
func (s *Store) Settle(ctx context.Context, st Settlement) ([]Entry, error) {
	o := st.Outcome
	var res, errText string
	if o.Result != nil {
		res = *o.Result
	}
	if o.Error != nil {
		errText = *o.Error
	}
	reply, err := s.w.Script(ctx, settleCmd, []string{s.k.Job(st.Tag, st.ID), s.k.Pending(st.Tag), s.k.Outbox(st.Tag)},
		string(o.Status), boolStr(o.Result != nil), res, boolStr(o.Error != nil), errText,
		ms(st.Now), int64(s.retention.Seconds()), s.k.sessionPrefix(st.Tag),
		boolStr(st.Announce), boolStr(st.Index), boolStr(st.HoldForIndex), boolStr(st.Expire), runArg(o.Run)).Slice()
	if err != nil {
		return nil, unavailable("settle job", err)
	}
	if len(reply) == 0 {
		return nil, fmt.Errorf("settle: empty reply")
	}
	code, _ := reply[0].(int64)
	if err := CodeErr(code); err != nil {
		return nil, err
	}
	if code == 0 {
		return nil, ErrEnded
	}
	entries := make([]Entry, 0, len(reply)-1)
	for _, e := range reply[1:] {
		if raw, ok := e.(string); ok {
			entries = append(entries, ParseEntry(raw, st.Now.UnixMilli()))
		}
	}
	// The reconciler's to-do list: a follow-up, since the reconciler drops
	// a stale entry itself.
	s.later(func(ctx context.Context, p redis.Pipeliner) { p.ZRem(ctx, s.k.active(), st.ID) })
	return entries, nil
}

// Remove deletes an ended job (deleteCmd), then its index entries as a
// follow-up: should those be lost, the index sweep drops them.
// ErrNoJob, ErrNotEnded.
func (s *Store) Remove(ctx context.Context, j *bgjobs.Job) error {
	tag := bgjobs.Tag(j.Agent, j.OriginSession)
	n, err := s.w.Script(ctx, deleteCmd, []string{s.k.Job(tag, j.ID), s.k.Pending(tag), s.k.SessionJobs(tag)}, j.ID).Int64()
	if err != nil {
		return unavailable("delete job", err)
	}
	if err := CodeErr(n); err != nil {
		return err
	}
	s.later(func(ctx context.Context, p redis.Pipeliner) {
		p.ZRem(ctx, s.k.AgentJobs(j.Agent), j.ID)
		p.HDel(ctx, s.k.JobIndex(), j.ID)
		p.ZRem(ctx, s.k.active(), j.ID)
	})
	return nil
}

// Retry re-arms an ended job for a new attempt (retryCmd) and puts it back
// on the reconciler's list. ErrNoJob, ErrNotEnded, ErrCompleted.
func (s *Store) Retry(ctx context.Context, j *bgjobs.Job, force bool, now time.Time) error {
	tag := bgjobs.Tag(j.Agent, j.OriginSession)
	n, err := s.w.Script(ctx, retryCmd, []string{s.k.Job(tag, j.ID), s.k.Pending(tag)}, boolStr(force), s.k.sessionPrefix(tag)).Int64()
	if err != nil {
		return unavailable("retry", err)
	}
	if err := CodeErr(n); err != nil {
		return err
	}
	return unavailable("retry", s.do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		p.ZAdd(ctx, s.k.active(), redis.Z{Score: float64(now.UnixMilli()), Member: j.ID})
	}))
}

// SetProgress records a streaming agent's latest update on the row, as a
// follow-up write; a row that is gone is not brought back.
func (s *Store) SetProgress(tag, id, line string) {
	key := s.k.Job(tag, id)
	s.later(func(ctx context.Context, p redis.Pipeliner) {
		hsetIfExistsCmd.Eval(ctx, p, []string{key}, fProgress, line)
	})
}

// SetResumeState records on each job's row how the resume that announces
// it fares (queued, held, failed, delivered) and the last delivery error
// ("" clears it), as a follow-up write.
func (s *Store) SetResumeState(tag string, ids []string, state, lastErr string) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.k.Job(tag, id)
	}
	s.later(func(ctx context.Context, p redis.Pipeliner) {
		for chunk := range slices.Chunk(keys, hsetIfExistsMax) {
			hsetIfExistsCmd.Eval(ctx, p, chunk, fResumeState, state, fResumeError, lastErr)
		}
	})
}

// MarkIndexed records that the reports of these jobs are searchable and
// returns the tags of their sessions.
func (s *Store) MarkIndexed(ctx context.Context, jobs []JobRef) (map[string]bool, error) {
	bySession := map[string][]string{}
	for _, r := range jobs {
		bySession[r.Tag] = append(bySession[r.Tag], s.k.Job(r.Tag, r.ID))
	}
	err := s.do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		for _, keys := range bySession {
			for chunk := range slices.Chunk(keys, hsetIfExistsMax) {
				hsetIfExistsCmd.Eval(ctx, p, chunk, fReportIndexed, "1")
			}
		}
	})
	tags := make(map[string]bool, len(bySession))
	for tag := range bySession {
		tags[tag] = true
	}
	return tags, unavailable("mark reports indexed", err)
}

// JobRef names a job by its session tag and id.
type JobRef struct{ Tag, ID string }

// firstErr is the first error among cmds.
func firstErr(cmds []redis.Cmder) error {
	var err error
	for _, c := range cmds {
		err = cmp.Or(err, c.Err())
	}
	return err
}
