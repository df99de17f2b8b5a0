// Package engine is bgjobs' side of asynq: the task types and queues, the
// payloads tasks carry, and every enqueue, delete and inspection bgjobs
// makes. The registry row is the job; an asynq task is only its engine.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
)

// Task type names. They are stored inside queued asynq tasks, which outlive
// deploys: never change them.
const (
	TypeTurn      = "bgjobs:turn"
	TypeWork      = "bgjobs:work"
	TypeResume    = "bgjobs:resume"
	TypeStraggler = "bgjobs:straggler"
	TypeLapse     = "bgjobs:lapse"
	// TypeSeal seals a turn batch once the window after its last spawn
	// has passed.
	TypeSeal = "bgjobs:seal"
)

// Queue base names; Engine.Queue gives the namespaced name.
const (
	QueueTurns   = "turns"
	QueueWork    = "work"
	QueueResume  = "resume"
	QueueControl = "control"
)

// Retry budgets. A turn is not blindly retried: only a transport failure
// tries again, with the same A2A message id so the agent can de-duplicate.
const (
	TurnMaxRetry = 3
	WorkMaxRetry = 3
	// TimerMaxRetry is a control task's retry budget.
	TimerMaxRetry = 10
	// ResumeRetention keeps a delivered resume's task id taken, so a pump
	// that repeats within a day enqueues nothing.
	ResumeRetention = 24 * time.Hour
)

// JobPayload is what a turn or work task carries: enough to find the row.
type JobPayload struct {
	Agent   string `json:"a"`
	Session string `json:"s"`
	// Created is when the job was spawned (ms). A task that finds no row
	// is retried while it is young (its row may be a moment behind) and
	// dropped once it is old (the row was deleted).
	Created int64 `json:"c,omitempty"`
}

// DecodeJobPayload reads a turn or work task's payload. The shape
// EnqueueJob writes, {"a":"…","s":"…","c":…} with nothing escaped, is read
// by hand: encoding/json's first call on a task's fresh goroutine grew its
// stack (about 4 % of a worker's CPU per job); any other spelling of the
// same object, escapes included, goes through encoding/json.
func DecodeJobPayload(b []byte) (JobPayload, error) {
	if p, ok := readJobPayload(b); ok {
		return p, nil
	}
	var p JobPayload
	err := json.Unmarshal(b, &p)
	return p, err
}

func readJobPayload(b []byte) (p JobPayload, ok bool) {
	s := string(b)
	str := func(prefix string) (string, bool) {
		rest, found := strings.CutPrefix(s, prefix)
		if !found {
			return "", false
		}
		end := strings.IndexAny(rest, `"\`)
		if end < 0 || rest[end] != '"' {
			return "", false
		}
		s = rest[end+1:]
		return rest[:end], true
	}
	if p.Agent, ok = str(`{"a":"`); !ok {
		return p, false
	}
	if p.Session, ok = str(`,"s":"`); !ok {
		return p, false
	}
	if digits, found := strings.CutPrefix(s, `,"c":`); found {
		end := strings.IndexByte(digits, '}')
		if end < 0 {
			return p, false
		}
		n, err := strconv.ParseInt(digits[:end], 10, 64)
		if err != nil {
			return p, false
		}
		p.Created, s = n, digits[end:]
	}
	return p, s == "}" && utf8.ValidString(p.Agent) && utf8.ValidString(p.Session)
}

// ResumePayload is what a resume task carries.
type ResumePayload struct {
	Agent     string            `json:"a"`
	Session   string            `json:"s"`
	MessageID string            `json:"m"`
	Meta      bgjobs.ResumeMeta `json:"meta"`
	// Since is when its cause happened (ms), for the latency metric.
	Since int64 `json:"t,omitempty"`
	// Again counts slow re-sends after the retries ran out (0: the first).
	Again int `json:"again,omitempty"`
}

// ControlPayload is what a timer task carries.
type ControlPayload struct {
	Agent   string `json:"a"`
	Session string `json:"s"`
	BatchID string `json:"b,omitempty"`
	// At is when the spawn that armed a seal timer joined its batch (ms).
	At int64 `json:"t,omitempty"`
	// Until is the end of the busy lease a lapse timer was armed for (ms).
	Until int64 `json:"u,omitempty"`
}

// Engine enqueues and inspects bgjobs' asynq tasks.
type Engine struct {
	aq   *asynq.Client
	insp *asynq.Inspector
	ns   string
	// Stops is asynq's word on why it stopped a run (its servers' error
	// handler).
	Stops *Stops
	// RunTimeout bounds a job's run. bgjobs' own limit, counted from the
	// run's start, must end a run before asynq's does, so the job fails
	// "timed out" rather than being retried: work tasks give asynq a
	// minute more, turn tasks an hour more for the wait under the global
	// cap.
	RunTimeout time.Duration
	// ResumeRetries is a resume task's retry budget.
	ResumeRetries int
}

// New returns an engine on an asynq client and inspector, in namespace ns.
func New(aq *asynq.Client, insp *asynq.Inspector, ns string, runTimeout time.Duration, resumeRetries int) *Engine {
	return &Engine{aq: aq, insp: insp, ns: ns, Stops: &Stops{}, RunTimeout: runTimeout, ResumeRetries: resumeRetries}
}

// Inspector is asynq's inspector on the same Redis, for dashboards.
func (e *Engine) Inspector() *asynq.Inspector { return e.insp }

// Queue returns the asynq queue name of a base queue in this namespace. The
// default namespace keeps the bare names (turns, work) that asynqmon shows.
func (e *Engine) Queue(base string) string {
	if e.ns == bgjobs.NamespaceDefault {
		return base
	}
	return e.ns + ":" + base
}

// QueueOf is the queue a job's task lives in.
func (e *Engine) QueueOf(j *bgjobs.Job) string {
	if j.Kind == bgjobs.KindTurn {
		return e.Queue(QueueTurns)
	}
	return e.Queue(QueueWork)
}

// EnqueueJob queues j's task, with the job id as its task id.
func (e *Engine) EnqueueJob(ctx context.Context, j *bgjobs.Job) error {
	payload, _ := json.Marshal(JobPayload{Agent: j.Agent, Session: j.OriginSession, Created: j.CreatedAt.UnixMilli()})
	var t *asynq.Task
	if j.Kind == bgjobs.KindTurn {
		t = asynq.NewTask(TypeTurn, payload, asynq.TaskID(j.ID), asynq.Queue(e.QueueOf(j)),
			asynq.MaxRetry(TurnMaxRetry), asynq.Timeout(e.RunTimeout+time.Hour), startAt(j))
	} else {
		t = asynq.NewTask(TypeWork, payload, asynq.TaskID(j.ID), asynq.Queue(e.QueueOf(j)),
			asynq.MaxRetry(WorkMaxRetry), asynq.Timeout(e.RunTimeout+time.Minute), startAt(j))
	}
	if _, err := e.aq.EnqueueContext(ctx, t); err != nil {
		if errors.Is(err, asynq.ErrTaskIDConflict) {
			return bgjobs.Errorf(bgjobs.EConflict, "job id %s is already queued", j.ID)
		}
		return bgjobs.Unavailable("enqueue", err)
	}
	return nil
}

// startAt holds a job spawned with start_in_s in asynq's scheduled set
// until its time; any other (or one retried after its time) is queued at
// once.
func startAt(j *bgjobs.Job) asynq.Option {
	if time.Until(j.RunAt) > 0 {
		return asynq.ProcessAt(j.RunAt)
	}
	return asynq.ProcessIn(0)
}

// EnqueueResume queues a resume under a deterministic task id, so a repeat
// is a no-op, to go out after a delay (0: now).
func (e *Engine) EnqueueResume(ctx context.Context, taskID string, p ResumePayload, after time.Duration) error {
	p.Meta.Origin, p.Meta.Kind = "background", "background.resume"
	if p.Meta.Jobs == nil {
		p.Meta.Jobs = []string{}
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return once(e.aq.EnqueueContext(ctx, asynq.NewTask(TypeResume, payload, asynq.TaskID(taskID),
		asynq.Queue(e.Queue(QueueResume)), asynq.MaxRetry(e.ResumeRetries), asynq.Retention(ResumeRetention), asynq.ProcessIn(after))))
}

// ArmTimer queues a control task (a busy lease's lapse) to run after a delay,
// once per task id.
func (e *Engine) ArmTimer(ctx context.Context, typ, taskID string, p ControlPayload, after time.Duration) error {
	payload, _ := json.Marshal(p)
	return once(e.aq.EnqueueContext(ctx, asynq.NewTask(typ, payload, asynq.TaskID(taskID),
		asynq.Queue(e.Queue(QueueControl)), asynq.ProcessIn(after), asynq.MaxRetry(TimerMaxRetry))))
}

// once treats a task id that is already taken as done: the task was
// queued before.
func once(_ *asynq.TaskInfo, err error) error {
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	return err
}

// StopTask removes a cancelled job's task from its queue, or signals the
// worker running it. Both are best effort: a worker that starts the task
// anyway finds the row terminal and does nothing.
func (e *Engine) StopTask(j *bgjobs.Job) {
	info, err := e.insp.GetTaskInfo(e.QueueOf(j), j.ID)
	if err != nil {
		return
	}
	if info.State == asynq.TaskStateActive {
		_ = e.insp.CancelProcessing(j.ID)
		return
	}
	_ = e.insp.DeleteTask(e.QueueOf(j), j.ID)
}

// DeleteTask removes a job's leftover task (archived, retained), if any.
func (e *Engine) DeleteTask(j *bgjobs.Job) { _ = e.insp.DeleteTask(e.QueueOf(j), j.ID) }

// TaskState is what asynq knows of a job's task.
type TaskState struct {
	// Gone: no such task (deleted, purged).
	Gone bool
	// Archived: asynq gave up after LastErr.
	Archived bool
	Retried  int
	LastErr  string
}

// StateOf looks up a job's task. An error means it cannot tell now.
func (e *Engine) StateOf(j *bgjobs.Job) (TaskState, error) {
	info, err := e.insp.GetTaskInfo(e.QueueOf(j), j.ID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return TaskState{Gone: true}, nil
	case err != nil:
		return TaskState{}, err
	}
	return TaskState{Archived: info.State == asynq.TaskStateArchived,
		Retried: info.Retried, LastErr: info.LastErr}, nil
}

// Queues are bgjobs' asynq queues in this namespace.
func (e *Engine) Queues() []string {
	return []string{e.Queue(QueueTurns), e.Queue(QueueWork), e.Queue(QueueResume), e.Queue(QueueControl)}
}

// LiveTaskIDs lists the tasks live asynq workers report running.
func (e *Engine) LiveTaskIDs() (map[string]bool, error) {
	servers, err := e.insp.Servers()
	if err != nil {
		return nil, err
	}
	live := map[string]bool{}
	for _, s := range servers {
		for _, w := range s.ActiveWorkers {
			live[w.TaskID] = true
		}
	}
	return live, nil
}
