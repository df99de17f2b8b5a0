package bgjobs

import (
	"context"
	"encoding/json"
	"strings"
	"time"
)

// Version is bgjobs' version, sent as its User-Agent on outbound calls.
const Version = "0.3.0"

// The job model: what a job is, how it ends, and what bgjobs tells people
// and agents about it. Every layer shares these types; none of them knows
// Redis, asynq or HTTP.

// Status is a job's place in its lifecycle:
// queued → running → completed | failed | cancelled. Terminal states never change.
type Status string

// The statuses. Their strings are stored in Redis and shown in the API.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether s can never change again.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// ValidStatus reports whether s names a status.
func ValidStatus(s string) bool {
	switch Status(s) {
	case StatusQueued, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Kind says how a job runs.
type Kind string

const (
	// KindTurn asks an agent over A2A to run a fresh, isolated turn.
	KindTurn Kind = "turn"
	// KindWork runs a registered Go function.
	KindWork Kind = "work"
)

// Job is one registry row.
type Job struct {
	ID            string          `json:"id"`
	Agent         string          `json:"agent"`
	OriginSession string          `json:"origin_session"`
	Kind          Kind            `json:"kind"`
	SubagentType  string          `json:"subagent_type,omitempty"`
	Description   string          `json:"description"`
	Prompt        string          `json:"prompt,omitempty"`
	WorkType      string          `json:"work_type,omitempty"`
	WorkArgs      json.RawMessage `json:"work_args,omitempty"`
	// WorkArgsExcerpt stands in lists for work_args over ListArgsMax bytes:
	// their first characters, so a page stays small.
	WorkArgsExcerpt string  `json:"work_args_excerpt,omitempty"`
	Status          Status  `json:"status"`
	Result          *string `json:"result"`
	Error           *string `json:"error"`
	Notified        bool    `json:"notified"`
	BatchID         *string `json:"batch_id"`
	Incognito       bool    `json:"incognito"`
	Attempts        int     `json:"attempts"`
	ReportIndexed   bool    `json:"report_indexed"`
	// Depth is 0 for a job an agent's session spawned, and one more than
	// its parent's for a job a worker's own turn spawned
	// (origin "background:<parent id>").
	Depth int `json:"depth,omitempty"`
	// Generation counts operator retries; 0 for a job never retried.
	Generation int `json:"generation,omitempty"`
	// Progress is the latest update a streaming agent sent, cut to 500
	// characters.
	Progress string `json:"progress,omitempty"`
	// ResumeState is how the resume that announces this job fares:
	// "held" (the session is busy), "failed" (being retried), "delivered",
	// or "gave_up" (the retries ran out while the job stayed undrained).
	// Empty when no resume was due.
	ResumeState string `json:"resume_state,omitempty"`
	// ResumeError is the resume's last delivery error, if it failed.
	ResumeError *string `json:"resume_error,omitempty"`
	// HoldForIndex is set at settle when the drain cuts this report and
	// points at memory_recall: the notification then waits until the
	// report is searchable.
	HoldForIndex bool `json:"-"`
	// RunAt is when a job spawned with start_in_s starts: its task waits
	// in asynq's scheduled set until then (asynq keeps due times in whole
	// seconds and moves due tasks every 3 s, so it starts between a second
	// before and a few seconds after). Zero for a job that starts at once.
	RunAt time.Time `json:"run_at,omitzero"`
	// TimeoutS is the job's own bound on its run, in seconds, when its
	// spawn set one (timeout_s); zero runs it for up to the process's
	// RunTimeout.
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// WaitUntil is set while a caller waits for the job (wait_ms).
	WaitUntil time.Time `json:"-"`
	// ReplayUntil is set when a drain with an Idempotency-Key handed the
	// job over: until then a repeat of that drain reads the row again.
	ReplayUntil time.Time  `json:"-"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// Outcome is how a job ended.
type Outcome struct {
	Status Status
	Result *string
	Error  *string
	// Run, when set, is the run this outcome is of: it settles the job
	// only while that run is the job's latest. A handler can outlive its
	// task (asynq moves on once a run's context ends), and the job may be
	// retried, queued and running again meanwhile; the old run's late
	// outcome must not end the new one. Nil settles whatever is current (a
	// cancel, the reconciler).
	Run *Run
}

// Run names one run of a job: the job's generation (retries so far) and
// the attempt number its start was given.
type Run struct {
	Generation int
	Attempt    int64
}

// Tag names a session of an agent, "<agent>/<session>". Every Redis key of
// one session carries it as its hash tag, so each script touches one
// Cluster slot.
func Tag(agent, session string) string { return agent + "/" + session }

// SplitTag is Tag's inverse; agent names never contain "/".
func SplitTag(tag string) (agent, session string) {
	agent, session, _ = strings.Cut(tag, "/")
	return agent, session
}

// BackgroundPrefix starts the session of a turn a worker runs
// ("background:<job id>"). Such a session is disposable: bgjobs never
// resumes it and never indexes its reports.
const BackgroundPrefix = "background:"

// IsBackground reports whether session is a worker's own disposable context.
func IsBackground(session string) bool { return strings.HasPrefix(session, BackgroundPrefix) }

// Agent is where bgjobs reaches an agent, kept in Redis.
type Agent struct {
	Name          string            `json:"name"`
	A2AURL        string            `json:"a2a_url"`
	Resume        string            `json:"resume"`
	WebhookURL    string            `json:"webhook_url"`
	WebhookSecret string            `json:"webhook_secret,omitempty"`
	AutoResume    *bool             `json:"auto_resume,omitempty"`
	SubagentTypes map[string]string `json:"subagent_types,omitempty"`
	// DelegateTo names the other agents this agent may send delegate jobs
	// to. Only the admin sets it.
	DelegateTo []string `json:"delegate_to,omitempty"`
}

// Resume modes of an agent.
const (
	ResumeA2A     = "a2a"
	ResumeWebhook = "webhook"
	ResumeNone    = "none"
)

// Resumes reports whether the agent's configuration asks for resumes and
// names somewhere to send them.
func (a *Agent) Resumes() bool {
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

// WorkSpec selects a work kind and its arguments.
type WorkSpec struct {
	Type string          `json:"type"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Turn is everything a TurnRunner needs to run one turn job.
type Turn struct {
	AgentURL      string
	JobID         string
	OriginSession string
	SubagentType  string
	// Preamble is the subagent type's role text, sent before the prompt.
	Preamble string
	Prompt   string
	// Progress, when set, is told of each update a streaming agent sends
	// before its final answer.
	Progress func(state, text string)
}

// TurnRunner runs a turn on an agent and returns its report. An error
// marked Retryable is tried again with the same message id; any other
// fails the job.
type TurnRunner interface {
	RunTurn(ctx context.Context, t Turn) (string, error)
}

// Counts are per-status tallies of ended jobs (a batch, a resume).
type Counts struct {
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// Add counts n jobs that ended with s.
func (c *Counts) Add(s Status, n int) {
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

// Event types published for people watching (SSE, the console). They are
// display only: the model learns of results through the drain.
const (
	EventStarted   = "background.started"
	EventRunning   = "background.running"
	EventCompleted = "background.completed"
	// EventProgress is one update a streaming agent sent during a turn.
	EventProgress = "background.progress"
	EventResumed  = "background.resumed"
	// EventResumeFailed is one failed delivery of a resume (it is retried).
	EventResumeFailed = "background.resume_failed"
	EventBatchJoined  = "batch.joined"
)

// EventTextChars is how much of a result, error or progress line an event
// carries.
const EventTextChars = 500

// Event is one published event.
type Event struct {
	Type          string    `json:"type"`
	JobID         string    `json:"job_id,omitempty"`
	BatchID       string    `json:"batch_id,omitempty"`
	Agent         string    `json:"agent"`
	OriginSession string    `json:"origin_session"`
	Status        Status    `json:"status"`
	Kind          Kind      `json:"kind,omitempty"`
	Description   string    `json:"description,omitempty"`
	Result        string    `json:"result,omitempty"`
	Error         string    `json:"error,omitempty"`
	Attempt       int64     `json:"attempt,omitempty"`
	Trigger       string    `json:"trigger,omitempty"`
	Counts        *Counts   `json:"counts,omitempty"`
	Partial       bool      `json:"partial,omitempty"`
	Seq           int       `json:"seq,omitempty"`
	State         string    `json:"state,omitempty"`
	Text          string    `json:"text,omitempty"`
	At            time.Time `json:"at"`
}

// JobEvent is an event about j, stamped at.
func JobEvent(typ string, j *Job, status Status, at time.Time) Event {
	return Event{Type: typ, JobID: j.ID, Agent: j.Agent, OriginSession: j.OriginSession,
		Status: status, Kind: j.Kind, Description: j.Description, At: at.UTC()}
}

// StreamEvent is one entry of an agent's event stream: its id (usable as an
// SSE Last-Event-ID), type and JSON body.
type StreamEvent struct {
	ID    string
	Agent string
	Type  string
	Data  string
}

// Notification is one finished job handed to the origin's model by a drain.
type Notification struct {
	JobID       string  `json:"job_id"`
	Status      string  `json:"status"`
	Description string  `json:"description"`
	BatchID     *string `json:"batch_id"`
	Truncated   bool    `json:"truncated"`
	Text        string  `json:"text"`
}

// Batch is a fan-out and its join state.
type Batch struct {
	ID            string     `json:"batch_id"`
	OriginSession string     `json:"origin_session"`
	Size          int        `json:"size"`
	Settled       int        `json:"settled"`
	Counts        Counts     `json:"counts"`
	Joined        bool       `json:"joined"`
	Partial       bool       `json:"partial"`
	JoinedAt      *time.Time `json:"joined_at"`
	Jobs          []string   `json:"jobs"`
	CreatedAt     time.Time  `json:"created_at"`
	// AllIncognito is true when every member is incognito: its join wakes
	// nobody, like each of them alone.
	AllIncognito bool `json:"-"`
}

// BatchMember is a spawned member of a batch, by its index in the request.
type BatchMember struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
}

// BatchSkip is a spec that was not spawned, and why.
type BatchSkip struct {
	Index int    `json:"index"`
	Error *Error `json:"error"`
}

// BatchResult is what a fan-out created.
type BatchResult struct {
	BatchID string        `json:"batch_id"`
	Jobs    []BatchMember `json:"jobs"`
	Skipped []BatchSkip   `json:"skipped"`
}
