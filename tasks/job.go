// Package tasks owns the job model, the Redis registry and its Lua scripts,
// the Manager (spawn, cancel, ack, drain), the asynq handlers that run jobs,
// settle, the work-kind registry and the reconciler. It never speaks HTTP.
package tasks

import (
	"encoding/json"
	"strconv"
	"time"
)

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
	Status        Status          `json:"status"`
	Result        *string         `json:"result"`
	Error         *string         `json:"error"`
	Notified      bool            `json:"notified"`
	BatchID       *string         `json:"batch_id"`
	Incognito     bool            `json:"incognito"`
	Attempts      int             `json:"attempts"`
	ReportIndexed bool            `json:"report_indexed"`
	// Generation counts operator retries; 0 for a job never retried.
	Generation int `json:"generation,omitempty"`
	// Progress is the latest update a streaming agent sent, cut to 500
	// characters.
	Progress string `json:"progress,omitempty"`
	// waitUntil is set while a caller waits for the job (wait_ms).
	waitUntil   time.Time
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	CompletedAt *time.Time `json:"completed_at"`
}

// Row field names in the job hash. One list so the scripts, the reads and
// the writes agree.
const (
	fID, fAgent, fSession, fKind        = "id", "agent", "origin_session", "kind"
	fSubagent, fDescription, fPrompt    = "subagent_type", "description", "prompt"
	fWorkType, fWorkArgs, fStatus       = "work_type", "work_args", "status"
	fResult, fError, fNotified          = "result", "error", "notified"
	fBatch, fIncognito, fAttempts       = "batch_id", "incognito", "attempts"
	fCreated, fStarted, fCompleted      = "created_at", "started_at", "completed_at"
	fReportIndexed, fHasResult, fHasErr = "report_indexed", "has_result", "has_error"
	fGeneration, fWaitUntil, fProgress  = "generation", "wait_until", "progress"
)

// jobFromHash turns a job hash into a Job. Times are unix milliseconds.
func jobFromHash(h map[string]string) *Job {
	j := &Job{
		ID:            h[fID],
		Agent:         h[fAgent],
		OriginSession: h[fSession],
		Kind:          Kind(h[fKind]),
		SubagentType:  h[fSubagent],
		Description:   h[fDescription],
		Prompt:        h[fPrompt],
		WorkType:      h[fWorkType],
		Status:        Status(h[fStatus]),
		Notified:      h[fNotified] == "1",
		Incognito:     h[fIncognito] == "1",
		ReportIndexed: h[fReportIndexed] == "1",
	}
	if a := h[fWorkArgs]; a != "" {
		j.WorkArgs = json.RawMessage(a)
	}
	if h[fHasResult] == "1" {
		r := h[fResult]
		j.Result = &r
	}
	if h[fHasErr] == "1" {
		e := h[fError]
		j.Error = &e
	}
	if b := h[fBatch]; b != "" {
		j.BatchID = &b
	}
	j.Attempts, _ = strconv.Atoi(h[fAttempts])
	j.Generation, _ = strconv.Atoi(h[fGeneration])
	j.Progress = h[fProgress]
	if s := h[fWaitUntil]; s != "" {
		j.waitUntil = msTime(s)
	}
	j.CreatedAt = msTime(h[fCreated])
	if s := h[fStarted]; s != "" {
		t := msTime(s)
		j.StartedAt = &t
	}
	if s := h[fCompleted]; s != "" {
		t := msTime(s)
		j.CompletedAt = &t
	}
	return j
}

func msTime(s string) time.Time {
	ms, _ := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(ms).UTC()
}

// Tag is the hash tag of a job's session: every key of one session shares it,
// so each script touches one Redis Cluster slot.
func Tag(agent, session string) string { return agent + "/" + session }
