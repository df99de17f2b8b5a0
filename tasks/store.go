package tasks

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// Store is the Redis registry: job rows, session sets and the indexes that
// find them. Every write that changes a job's state goes through one of the
// scripts in scripts.go.
type Store struct {
	rdb       redis.UniversalClient
	ap        *autoPipe
	k         keys
	retention time.Duration
}

// NewStore returns a registry in namespace ns on rdb.
func NewStore(rdb redis.UniversalClient, ns string, retention time.Duration) *Store {
	return &Store{rdb: rdb, ap: newAutoPipe(rdb), k: keys{ns: ns}, retention: retention}
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func boolStr(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// unavailable wraps a Redis failure as the 503 a client can retry.
func unavailable(op string, err error) error {
	return &bgjobs.Error{Code: bgjobs.EUnavailable, Message: fmt.Sprintf("%s: redis: %v", op, err)}
}

// create writes a new queued row and indexes it, in one round trip shared
// with concurrent callers.
func (s *Store) create(ctx context.Context, j *Job) error {
	var cmds []redis.Cmder
	err := s.ap.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmds = s.queueCreate(ctx, p, j) })
	for _, c := range cmds {
		err = cmp.Or(err, c.Err())
	}
	if err != nil {
		return unavailable("create job", err)
	}
	return nil
}

// queueCreate adds the writes of a new row to p.
func (s *Store) queueCreate(ctx context.Context, p redis.Pipeliner, j *Job) []redis.Cmder {
	tag := Tag(j.Agent, j.OriginSession)
	fields := map[string]any{
		fID: j.ID, fAgent: j.Agent, fSession: j.OriginSession, fKind: string(j.Kind),
		fSubagent: j.SubagentType, fDescription: j.Description, fPrompt: j.Prompt,
		fWorkType: j.WorkType, fWorkArgs: string(j.WorkArgs), fStatus: string(StatusQueued),
		fNotified: "0", fIncognito: boolStr(j.Incognito), fAttempts: "0",
		fCreated: ms(j.CreatedAt),
	}
	if j.BatchID != nil {
		fields[fBatch] = *j.BatchID
	}
	if !j.waitUntil.IsZero() {
		fields[fWaitUntil] = ms(j.waitUntil)
	}
	score := float64(j.CreatedAt.UnixMilli())
	return []redis.Cmder{
		p.HSet(ctx, s.k.job(tag, j.ID), fields),
		p.ZAdd(ctx, s.k.sessionJobs(tag), redis.Z{Score: score, Member: j.ID}),
		p.ZAdd(ctx, s.k.agentJobs(j.Agent), redis.Z{Score: score, Member: j.ID}),
		p.HSet(ctx, s.k.jobIndex(), j.ID, tag),
		p.ZAdd(ctx, s.k.active(), redis.Z{Score: score, Member: j.ID}),
	}
}

// forget removes a row that never became a job (its task could not be
// enqueued), best effort.
func (s *Store) forget(ctx context.Context, j *Job) {
	tag := Tag(j.Agent, j.OriginSession)
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.k.job(tag, j.ID))
		p.ZRem(ctx, s.k.sessionJobs(tag), j.ID)
		p.ZRem(ctx, s.k.agentJobs(j.Agent), j.ID)
		p.HDel(ctx, s.k.jobIndex(), j.ID)
		p.ZRem(ctx, s.k.active(), j.ID)
		return nil
	})
}

// tagOf returns the session tag of a job id, or "" if unknown.
func (s *Store) tagOf(ctx context.Context, id string) (string, error) {
	var cmd *redis.StringCmd
	if err := s.ap.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = p.HGet(ctx, s.k.jobIndex(), id) }); err != nil {
		return "", unavailable("look up job", err)
	}
	tag, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("look up job", err)
	}
	return tag, nil
}

// load reads a row by tag and id; nil when it does not exist.
func (s *Store) load(ctx context.Context, tag, id string) (*Job, error) {
	var cmd *redis.MapStringStringCmd
	if err := s.ap.do(ctx, func(ctx context.Context, p redis.Pipeliner) { cmd = p.HGetAll(ctx, s.k.job(tag, id)) }); err != nil {
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

// lookup reads a row by id alone; nil when it does not exist.
func (s *Store) lookup(ctx context.Context, id string) (*Job, error) {
	tag, err := s.tagOf(ctx, id)
	if err != nil || tag == "" {
		return nil, err
	}
	j, err := s.load(ctx, tag, id)
	if err == nil && j == nil {
		// The row expired after it was notified: drop the stale index entry.
		s.rdb.HDel(ctx, s.k.jobIndex(), id)
	}
	return j, err
}

// lookupMany reads rows by id in two round trips; a missing row is nil.
func (s *Store) lookupMany(ctx context.Context, ids []string) ([]*Job, error) {
	tags, err := s.rdb.HMGet(ctx, s.k.jobIndex(), ids...).Result()
	if err != nil {
		return nil, unavailable("look up jobs", err)
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if tag, _ := tags[i].(string); tag != "" {
				cmds[i] = p.HGetAll(ctx, s.k.job(tag, id))
			}
		}
		return nil
	}); err != nil {
		return nil, unavailable("read jobs", err)
	}
	out := make([]*Job, len(ids))
	for i, c := range cmds {
		if c != nil && len(c.Val()) > 0 {
			out[i] = jobFromHash(c.Val())
		}
	}
	return out, nil
}

// start runs startCmd. It returns the script's code, the attempt number
// and, when the job is now running, its row.
func (s *Store) start(ctx context.Context, tag, id string, now time.Time) (int64, int64, *Job, error) {
	res, err := s.ap.script(ctx, startCmd, []string{s.k.job(tag, id)}, ms(now)).Slice()
	if err != nil {
		return 0, 0, nil, err
	}
	if len(res) != 3 {
		return 0, 0, nil, fmt.Errorf("start: unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	attempt, _ := res[1].(int64)
	if code <= 0 {
		return code, attempt, nil, nil
	}
	flat, _ := res[2].([]any)
	h := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		h[k] = v
	}
	return code, attempt, jobFromHash(h), nil
}

func (s *Store) requeue(ctx context.Context, tag, id string) error {
	return requeueCmd.Run(ctx, s.rdb, []string{s.k.job(tag, id)}).Err()
}

// Outcome is how a job ended.
type Outcome struct {
	Status Status
	Result *string
	Error  *string
}

// settle runs settleCmd. It reports whether this call ended the job and
// the outbox entries the settle recorded.
func (s *Store) settle(ctx context.Context, tag, id string, o Outcome, now time.Time, announce bool) (bool, []string, error) {
	var res, errText string
	if o.Result != nil {
		res = *o.Result
	}
	if o.Error != nil {
		errText = *o.Error
	}
	reply, err := s.ap.script(ctx, settleCmd, []string{s.k.job(tag, id), s.k.pending(tag), s.k.outbox(tag)},
		string(o.Status), boolStr(o.Result != nil), res, boolStr(o.Error != nil), errText,
		ms(now), int64(s.retention.Seconds()), s.k.sessionPrefix(tag), boolStr(announce)).Slice()
	if err != nil {
		return false, nil, unavailable("settle job", err)
	}
	if len(reply) == 0 {
		return false, nil, fmt.Errorf("settle: empty reply")
	}
	code, _ := reply[0].(int64)
	var entries []string
	for _, e := range reply[1:] {
		if s, ok := e.(string); ok {
			entries = append(entries, s)
		}
	}
	return code == 1, entries, nil
}

// drainRow is one job handed over by drainCmd.
type drainRow struct {
	ID, Status, Description, Kind, SubagentType string
	Result, Error, BatchID                      *string
	ReportIndexed                               bool
}

// drainHold says whether and how a drain holds long turn reports back
// until they are searchable.
type drainHold struct {
	on       bool
	capChars int
	since    time.Time
}

func (s *Store) drain(ctx context.Context, tag, idemKey string, now time.Time, hold drainHold) ([]drainRow, error) {
	useIdem, idem := "0", s.k.drainIdem(tag, "")
	if idemKey != "" {
		useIdem, idem = "1", s.k.drainIdem(tag, idemKey)
	}
	args := []any{s.k.jobPrefix(tag), useIdem, int64(drainIdemTTL.Seconds()), int64(s.retention.Seconds()), ms(now),
		boolStr(hold.on), hold.capChars, ms(hold.since)}
	for _, f := range drainFields {
		args = append(args, f)
	}
	raw, err := s.ap.script(ctx, drainCmd, []string{s.k.pending(tag), idem}, args...).Slice()
	if err != nil {
		return nil, unavailable("drain", err)
	}
	rows := make([]drainRow, 0, len(raw))
	for _, r := range raw {
		vals, _ := r.([]any)
		if len(vals) != len(drainFields) {
			continue
		}
		str := func(i int) string { v, _ := vals[i].(string); return v }
		row := drainRow{ID: str(0), Status: str(1), Description: str(2), Kind: str(3), SubagentType: str(9), ReportIndexed: str(10) == "1"}
		if str(4) == "1" {
			v := str(5)
			row.Result = &v
		}
		if str(6) == "1" {
			v := str(7)
			row.Error = &v
		}
		if b := str(8); b != "" {
			row.BatchID = &b
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// drainIdemTTL is how long a drain's Idempotency-Key replays (API.md).
const drainIdemTTL = 10 * time.Minute

func (s *Store) ack(ctx context.Context, tag, id string, now time.Time) (int64, error) {
	n, err := s.ap.script(ctx, ackCmd, []string{s.k.job(tag, id), s.k.pending(tag)},
		ms(now), int64(s.retention.Seconds())).Int64()
	if err != nil {
		return 0, unavailable("ack", err)
	}
	return n, nil
}

func (s *Store) remove(ctx context.Context, j *Job) (int64, error) {
	tag := Tag(j.Agent, j.OriginSession)
	n, err := deleteCmd.Run(ctx, s.rdb, []string{s.k.job(tag, j.ID), s.k.pending(tag), s.k.sessionJobs(tag)}, j.ID).Int64()
	if err != nil {
		return 0, unavailable("delete job", err)
	}
	if n == 1 {
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ZRem(ctx, s.k.agentJobs(j.Agent), j.ID)
			p.HDel(ctx, s.k.jobIndex(), j.ID)
			p.ZRem(ctx, s.k.active(), j.ID)
			return nil
		})
	}
	return n, nil
}

// putAgent stores an agent's configuration.
func (s *Store) putAgent(ctx context.Context, a *Agent) error {
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.k.agent(a.Name), b, 0)
		p.SAdd(ctx, s.k.agents(), a.Name)
		return nil
	})
	if err != nil {
		return unavailable("store agent", err)
	}
	return nil
}

// getAgent reads an agent's configuration; nil when none is stored.
func (s *Store) getAgent(ctx context.Context, name string) (*Agent, error) {
	b, err := s.rdb.Get(ctx, s.k.agent(name)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable("read agent", err)
	}
	var a Agent
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("agent %s: stored configuration is corrupt: %w", name, err)
	}
	return &a, nil
}
