package registry

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/bgjobs/bgjobs"
)

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
	fHoldIndex, fReplayUntil            = "hold_index", "replay_until"
	fResumeState, fResumeError          = "resume_state", "resume_error"
	fDepth, fRunAt, fTimeout            = "depth", "run_at", "timeout_s"
)

// rowFields is a new job's hash, as field, value pairs: a slice goes to
// HSET as it is, where a map is first copied into one (a spawn's largest
// allocation after the HTTP request).
func rowFields(j *bgjobs.Job) []any {
	fields := make([]any, 0, 34)
	fields = append(fields,
		fID, j.ID, fAgent, j.Agent, fSession, j.OriginSession, fKind, string(j.Kind),
		fSubagent, j.SubagentType, fDescription, j.Description, fPrompt, j.Prompt,
		fWorkType, j.WorkType, fWorkArgs, string(j.WorkArgs), fStatus, string(bgjobs.StatusQueued),
		fNotified, "0", fIncognito, boolStr(j.Incognito), fAttempts, "0",
		fCreated, ms(j.CreatedAt))
	if j.BatchID != nil {
		fields = append(fields, fBatch, *j.BatchID)
	}
	if !j.WaitUntil.IsZero() {
		fields = append(fields, fWaitUntil, ms(j.WaitUntil))
	}
	if j.Depth > 0 {
		fields = append(fields, fDepth, j.Depth)
	}
	if !j.RunAt.IsZero() {
		fields = append(fields, fRunAt, ms(j.RunAt))
	}
	if j.TimeoutS > 0 {
		fields = append(fields, fTimeout, j.TimeoutS)
	}
	return fields
}

// jobFromHash turns a job hash into a Job. Times are unix milliseconds.
func jobFromHash(h map[string]string) *bgjobs.Job {
	j := &bgjobs.Job{
		ID:            h[fID],
		Agent:         h[fAgent],
		OriginSession: h[fSession],
		Kind:          bgjobs.Kind(h[fKind]),
		SubagentType:  h[fSubagent],
		Description:   h[fDescription],
		Prompt:        h[fPrompt],
		WorkType:      h[fWorkType],
		Status:        bgjobs.Status(h[fStatus]),
		Notified:      h[fNotified] == "1",
		Incognito:     h[fIncognito] == "1",
		ReportIndexed: h[fReportIndexed] == "1",
		HoldForIndex:  h[fHoldIndex] == "1",
		Progress:      h[fProgress],
		ResumeState:   h[fResumeState],
	}
	j.Depth, _ = strconv.Atoi(h[fDepth])
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
	if e := h[fResumeError]; e != "" {
		j.ResumeError = &e
	}
	if b := h[fBatch]; b != "" {
		j.BatchID = &b
	}
	j.Attempts, _ = strconv.Atoi(h[fAttempts])
	j.Generation, _ = strconv.Atoi(h[fGeneration])
	if s := h[fWaitUntil]; s != "" {
		j.WaitUntil = msTime(s)
	}
	if s := h[fReplayUntil]; s != "" {
		j.ReplayUntil = msTime(s)
	}
	if s := h[fRunAt]; s != "" {
		j.RunAt = msTime(s)
	}
	if s := h[fTimeout]; s != "" {
		j.TimeoutS, _ = strconv.ParseInt(s, 10, 64)
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

// DrainFields are the row fields a drain returns per job, in order
// (handover.DrainRow reads them by position).
var DrainFields = []string{fID, fStatus, fDescription, fKind, fHasResult, fResult, fHasErr, fError, fBatch, fSubagent, fReportIndexed}

func msTime(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(n).UTC()
}

func ms(t time.Time) string { return Millis(t) }

// Millis is t as the unix milliseconds scripts take.
func Millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func boolStr(b bool) string { return Flag(b) }

// Flag is b as the "1" or "0" scripts take.
func Flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
