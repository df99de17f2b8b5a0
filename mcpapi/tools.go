package mcpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
)

// SpawnDescription is the contract the model reads: trust the notification.
const SpawnDescription = "Start long work in the background and keep talking. Returns a job id at once. " +
	"You will be notified when it completes — do NOT poll, check, or spawn a duplicate; continue with other work. " +
	"Results arrive through drain_notifications at the start of your next turn."

// WorkInput selects a registered work type. Args is a JSON object, typed so
// a model sends one (the REST API's raw JSON reads as bytes in a schema).
type WorkInput struct {
	Type string         `json:"type" jsonschema:"the registered work type"`
	Args map[string]any `json:"args,omitempty" jsonschema:"the work type's arguments, a JSON object"`
}

// JobSpec is one job to start, alone or in a batch.
type JobSpec struct {
	Description  string     `json:"description,omitempty" jsonschema:"a short title for the job (taken from the prompt when omitted)"`
	Prompt       string     `json:"prompt,omitempty" jsonschema:"the task for a background agent turn"`
	SubagentType string     `json:"subagent_type,omitempty" jsonschema:"which kind of background agent runs the turn"`
	Kind         string     `json:"kind,omitempty" jsonschema:"turn (default) or work"`
	Work         *WorkInput `json:"work,omitempty" jsonschema:"for kind work: the registered work type and its args"`
	Incognito    bool       `json:"incognito,omitempty" jsonschema:"keep the report out of memory and send no resume"`
	TimeoutS     int64      `json:"timeout_s,omitempty" jsonschema:"the longest the job may run, in seconds (at most the server's limit, 30 minutes unless set otherwise); past it the job ends failed. Default: the server's limit"`
}

// SpawnInput is spawn_background's input.
type SpawnInput struct {
	OriginSession string `json:"origin_session" jsonschema:"your current session id; the result comes back to it"`
	JobSpec
	WaitMS         int64  `json:"wait_ms,omitempty" jsonschema:"wait up to this many milliseconds (at most 120000): a job that ends in time returns its result here and is not notified again"`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"repeat a spawn after a transport error with the same key: you get the first job back, not a second one"`
	TurnID         string `json:"turn_id,omitempty" jsonschema:"your current turn: the jobs one turn spawns come back in one briefing. Defaults to this MCP session's spawns within a few seconds of each other"`
	StartInS       int64  `json:"start_in_s,omitempty" jsonschema:"start the job this many seconds from now (at most 2592000, 30 days) instead of at once: a follow-up for later. It stands alone (no turn_id, no wait_ms)"`
}

// SpawnOutput is what spawn_background started.
type SpawnOutput struct {
	JobID  string        `json:"job_id"`
	Status bgjobs.Status `json:"status"`
	// BatchID is the turn's batch: its jobs come back in one briefing.
	BatchID *string `json:"batch_id,omitempty"`
	// Delivered is true when the job ended within wait_ms: its result is
	// here and drain_notifications will not hand it over again.
	Delivered bool    `json:"delivered"`
	Result    *string `json:"result,omitempty"`
	Error     *string `json:"error,omitempty"`
}

// BatchInput is task_batch's input.
type BatchInput struct {
	OriginSession string    `json:"origin_session" jsonschema:"your current session id; the joined result comes back to it"`
	Jobs          []JobSpec `json:"jobs" jsonschema:"the jobs to fan out"`
}

// BatchOutput is what task_batch started.
type BatchOutput struct {
	BatchID string        `json:"batch_id"`
	JobIDs  []string      `json:"job_ids" jsonschema:"the started jobs, in the order of the request's jobs that were started"`
	Skipped []SkippedSpec `json:"skipped" jsonschema:"jobs of the request that were not started, and why"`
}

// SkippedSpec is a batch item that was not started.
type SkippedSpec struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// JobInput names one job.
type JobInput struct {
	JobID string `json:"job_id" jsonschema:"the job id, bg-…"`
}

// StopBatchInput is stop_batch's input.
type StopBatchInput struct {
	BatchID string `json:"batch_id" jsonschema:"the batch id, bt-…"`
}

// StopBatchOutput is the batch after stop_batch.
type StopBatchOutput struct {
	BatchID   string        `json:"batch_id"`
	Cancelled int           `json:"cancelled" jsonschema:"how many members this call stopped"`
	Counts    bgjobs.Counts `json:"counts" jsonschema:"the members' outcomes so far, by status"`
	Joined    bool          `json:"joined"`
}

// RetryInput is retry_task's input.
type RetryInput struct {
	JobID string `json:"job_id" jsonschema:"the job id, bg-…"`
	Force bool   `json:"force,omitempty" jsonschema:"also run a job that completed again (without it, only failed or cancelled jobs are retried)"`
}

// JobState is a job's id and status.
type JobState struct {
	JobID  string        `json:"job_id"`
	Status bgjobs.Status `json:"status"`
}

// StatusInput asks for one job or a session's jobs.
type StatusInput struct {
	JobID   string `json:"job_id,omitempty" jsonschema:"one job's id"`
	Session string `json:"session,omitempty" jsonschema:"or: a session whose recent jobs to list"`
}

// JobStatus is what background_status shows of a job. Result and Error
// appear only once the job's result has been handed over (drained, acked
// or returned within wait_ms): status is never a second way to collect it.
type JobStatus struct {
	JobID        string        `json:"job_id"`
	Description  string        `json:"description"`
	Status       bgjobs.Status `json:"status"`
	Kind         bgjobs.Kind   `json:"kind"`
	SubagentType string        `json:"subagent_type,omitempty"`
	BatchID      *string       `json:"batch_id,omitempty"`
	Progress     string        `json:"progress,omitempty"`
	Attempts     int           `json:"attempts"`
	Delivered    bool          `json:"delivered" jsonschema:"the result has been handed over"`
	Result       *string       `json:"result,omitempty"`
	Error        *string       `json:"error,omitempty"`
	Note         string        `json:"note,omitempty"`
	CreatedAt    time.Time     `json:"created_at"`
	RunAt        *time.Time    `json:"run_at,omitempty" jsonschema:"when a job spawned with start_in_s starts (within a few seconds)"`
	TimeoutS     int64         `json:"timeout_s,omitempty" jsonschema:"the job's own time limit in seconds, when its spawn set one"`
	StartedAt    *time.Time    `json:"started_at,omitempty"`
	CompletedAt  *time.Time    `json:"completed_at,omitempty"`
}

// StatusOutput lists the jobs asked for.
type StatusOutput struct {
	Jobs []JobStatus `json:"jobs"`
}

// DrainInput is drain_notifications' input.
type DrainInput struct {
	Session        string `json:"session" jsonschema:"your current session id"`
	IdempotencyKey string `json:"idempotency_key,omitempty" jsonschema:"a fresh random key per drain; after a transport error repeat the call with the same key to get the same results back"`
}

// DrainOutput is the results handed over.
type DrainOutput struct {
	Notifications []bgjobs.Notification `json:"notifications"`
	More          bool                  `json:"more" jsonschema:"more results wait: call drain_notifications again (with a new idempotency_key)"`
}

// AckOutput says whether an ack handed the result over now.
type AckOutput struct {
	JobID        string `json:"job_id"`
	Acknowledged bool   `json:"acknowledged" jsonschema:"true when this call marked it; false when it was already handed over"`
}

// RecallInput is memory_recall's input.
type RecallInput struct {
	Query      string `json:"query" jsonschema:"words and \"quoted phrases\" to search for"`
	Session    string `json:"session,omitempty" jsonschema:"only this session's documents"`
	SourceType string `json:"source_type,omitempty" jsonschema:"background_report, ingest or knowledge"`
	Limit      int    `json:"limit,omitempty" jsonschema:"at most this many hits (default 10, at most 100)"`
}

func (in JobSpec) request(agent, session string) (tasks.SpawnRequest, error) {
	req := tasks.SpawnRequest{Agent: agent, OriginSession: session, Kind: bgjobs.Kind(in.Kind),
		SubagentType: in.SubagentType, Description: in.Description, Prompt: in.Prompt, Incognito: in.Incognito, TimeoutS: in.TimeoutS}
	if in.Work != nil {
		req.Work = &bgjobs.WorkSpec{Type: in.Work.Type}
		if in.Work.Args != nil {
			raw, err := json.Marshal(in.Work.Args)
			if err != nil {
				return req, bgjobs.FieldError("work.args", "not JSON: %v", err)
			}
			req.Work.Args = raw
		}
	}
	return req, nil
}

func statusOf(j *bgjobs.Job) JobStatus {
	s := JobStatus{JobID: j.ID, Description: j.Description, Status: j.Status, Kind: j.Kind, SubagentType: j.SubagentType,
		BatchID: j.BatchID, Progress: j.Progress, Attempts: j.Attempts, Delivered: j.Notified,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, CompletedAt: j.CompletedAt, TimeoutS: j.TimeoutS}
	if !j.RunAt.IsZero() {
		s.RunAt = &j.RunAt
	}
	switch {
	case !j.Status.Terminal():
		s.Note = "Still " + string(j.Status) + ". You will be notified when it ends — do NOT poll."
	case j.Notified:
		s.Result, s.Error = j.Result, j.Error
	default:
		s.Note = "Ended " + string(j.Status) + "; drain_notifications hands you its result (once)."
	}
	return s
}

// enumOf sets the enum of a string property, when there are values.
func enumOf(p *jsonschema.Schema, values []string) {
	if p == nil || len(values) == 0 {
		return
	}
	p.Enum = make([]any, len(values))
	for i, v := range values {
		p.Enum[i] = v
	}
}

// specSchema fills a JobSpec schema with the agent's roster and the
// registered work types.
func specSchema(s *jsonschema.Schema, roster, kinds []string) {
	enumOf(s.Properties["subagent_type"], roster)
	enumOf(s.Properties["kind"], []string{string(bgjobs.KindTurn), string(bgjobs.KindWork)})
	if w := s.Properties["work"]; w != nil {
		enumOf(w.Properties["type"], kinds)
	}
}

// NewServer builds the tools for one agent.
func NewServer(ctx context.Context, m *tasks.Manager, mem Recaller, agent string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bgjobs", Version: bgjobs.Version}, nil)

	var roster []string
	if a, err := m.GetAgent(ctx, agent); err == nil {
		for k := range a.SubagentTypes {
			roster = append(roster, k)
		}
		sort.Strings(roster)
	}
	kinds := m.Kinds().Names()
	spawnSchema, _ := jsonschema.For[SpawnInput](nil)
	specSchema(spawnSchema, roster, kinds)
	batchSchema, _ := jsonschema.For[BatchInput](nil)
	specSchema(batchSchema.Properties["jobs"].Items, roster, kinds)

	addTool(s, &mcp.Tool{Name: "spawn_background", Description: SpawnDescription, InputSchema: spawnSchema,
		Annotations: &mcp.ToolAnnotations{Title: "Start background work", DestructiveHint: no(), OpenWorldHint: yes()}},
		func(ctx context.Context, call *mcp.CallToolRequest, in SpawnInput) (answer[SpawnOutput], error) {
			var a answer[SpawnOutput]
			req, err := in.request(agent, in.OriginSession)
			if err != nil {
				return a, err
			}
			req.IdempotencyKey, req.TurnID = in.IdempotencyKey, in.TurnID
			if req.StartIn, err = bgjobs.Within("start_in_s", in.StartInS, time.Second, tasks.StartInMax); err != nil {
				return a, err
			}
			if req.TurnID == "" && in.WaitMS == 0 && req.StartIn == 0 && call != nil && call.Session != nil && call.Session.ID() != "" {
				// One MCP session's spawns close together are one turn (a
				// waited-for job is handed over in the call instead).
				req.TurnID = "mcp:" + call.Session.ID()
			}
			if req.Wait, err = bgjobs.Within("wait_ms", in.WaitMS, time.Millisecond, tasks.WaitMax); err != nil {
				return a, err
			}
			j, _, delivered, err := m.SpawnAndWait(ctx, req)
			if err != nil {
				return a, err
			}
			a.out = SpawnOutput{JobID: j.ID, Status: j.Status, BatchID: j.BatchID, Delivered: delivered}
			if !delivered {
				a.text = bgjobs.SpawnMessage(j)
				return a, nil
			}
			a.out.Result, a.out.Error = j.Result, j.Error
			out := ""
			switch {
			case j.Result != nil:
				out = *j.Result
			case j.Error != nil:
				out = "Error: " + *j.Error
			}
			a.text = fmt.Sprintf("Job %s %s within the wait:\n%s", j.ID, j.Status, out)
			return a, nil
		})
	addTool(s, &mcp.Tool{Name: "task_batch", InputSchema: batchSchema,
		Description: "Fan out several background jobs at once; one notification wakes you when all of them have ended (or the straggler timeout passes). Do NOT poll.",
		Annotations: &mcp.ToolAnnotations{Title: "Start a batch of background work", DestructiveHint: no(), OpenWorldHint: yes()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in BatchInput) (answer[BatchOutput], error) {
			var a answer[BatchOutput]
			specs := make([]tasks.SpawnRequest, len(in.Jobs))
			for i, j := range in.Jobs {
				req, err := j.request(agent, in.OriginSession)
				if err != nil {
					req.Invalid, _ = err.(*bgjobs.Error)
				}
				specs[i] = req
			}
			res, err := m.SpawnBatch(ctx, agent, in.OriginSession, specs)
			if err != nil {
				return a, err
			}
			a.out = BatchOutput{BatchID: res.BatchID, JobIDs: make([]string, len(res.Jobs)), Skipped: make([]SkippedSpec, len(res.Skipped))}
			for i, j := range res.Jobs {
				a.out.JobIDs[i] = j.ID
			}
			for i, sk := range res.Skipped {
				a.out.Skipped[i] = SkippedSpec{Index: sk.Index, Error: sk.Error.Error()}
			}
			a.text = fmt.Sprintf("Batch %s started %d jobs (%s); one notification wakes you when they have all ended — do NOT poll.",
				res.BatchID, len(res.Jobs), strings.Join(a.out.JobIDs, ", "))
			for _, sk := range a.out.Skipped {
				a.text += fmt.Sprintf("\nNot started: jobs[%d]: %s", sk.Index, sk.Error)
			}
			return a, nil
		})
	addTool(s, &mcp.Tool{Name: "stop_task", Description: "Cancel a queued or running background job, and the jobs its own turn spawned. It is still reported by drain_notifications, as cancelled.",
		Annotations: &mcp.ToolAnnotations{Title: "Cancel background work", DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in JobInput) (answer[JobState], error) {
			j, err := m.Cancel(ctx, agent, in.JobID)
			if err != nil {
				return answer[JobState]{}, err
			}
			return answer[JobState]{out: JobState{JobID: j.ID, Status: j.Status}, text: fmt.Sprintf("Job %s is %s.", j.ID, j.Status)}, nil
		})
	addTool(s, &mcp.Tool{Name: "stop_batch", Description: "Cancel every job of a batch (task_batch) that has not ended. The batch is still reported by drain_notifications, once, its stopped jobs as cancelled.",
		Annotations: &mcp.ToolAnnotations{Title: "Cancel a batch", DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in StopBatchInput) (answer[StopBatchOutput], error) {
			b, n, err := m.CancelBatch(ctx, agent, in.BatchID)
			if err != nil {
				return answer[StopBatchOutput]{}, err
			}
			return answer[StopBatchOutput]{out: StopBatchOutput{BatchID: b.ID, Cancelled: n, Counts: b.Counts, Joined: b.Joined},
				text: fmt.Sprintf("Batch %s: %d jobs stopped; %d of %d have ended.", b.ID, n, b.Settled, b.Size)}, nil
		})
	addTool(s, &mcp.Tool{Name: "retry_task", Description: "Run an ended background job again, under the same id: a failed or cancelled one, or with force one that completed. Its new outcome reaches you through drain_notifications like the first.",
		Annotations: &mcp.ToolAnnotations{Title: "Retry background work", DestructiveHint: no(), OpenWorldHint: yes()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RetryInput) (answer[JobState], error) {
			j, err := m.RetryFor(ctx, agent, in.JobID, in.Force)
			if err != nil {
				return answer[JobState]{}, err
			}
			return answer[JobState]{out: JobState{JobID: j.ID, Status: j.Status}, text: fmt.Sprintf("Job %s is %s again. You will be notified when it ends.", j.ID, j.Status)}, nil
		})
	addTool(s, &mcp.Tool{Name: "background_status",
		Description: "Read one job (job_id) or a session's recent jobs (session): state and progress. For people asking; you are notified of results without it, and a result shows here only after it was handed to you.",
		Annotations: &mcp.ToolAnnotations{Title: "Background job status", ReadOnlyHint: true, OpenWorldHint: no()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in StatusInput) (answer[StatusOutput], error) {
			var a answer[StatusOutput]
			var jobs []*bgjobs.Job
			switch {
			case in.JobID != "":
				j, err := m.Get(ctx, agent, in.JobID)
				if err != nil {
					return a, err
				}
				jobs = []*bgjobs.Job{j}
			case in.Session != "":
				var err error
				if jobs, _, err = m.List(ctx, tasks.ListRequest{Agent: agent, Session: in.Session, Limit: 20}); err != nil {
					return a, err
				}
			default:
				return a, bgjobs.FieldError("job_id", "give job_id or session")
			}
			a.out.Jobs = make([]JobStatus, len(jobs))
			for i, j := range jobs {
				a.out.Jobs[i] = statusOf(j)
			}
			return a, nil
		})
	addTool(s, &mcp.Tool{Name: "drain_notifications",
		Description: "Collect every background result of your session that has not been handed to you yet. Each result is handed over exactly once. " +
			"Pass a fresh idempotency_key; if the call fails in transport, call again with the same key and you get the same results.",
		Annotations: &mcp.ToolAnnotations{Title: "Collect background results", DestructiveHint: no(), IdempotentHint: true, OpenWorldHint: no()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in DrainInput) (answer[DrainOutput], error) {
			var a answer[DrainOutput]
			ns, more, err := m.DrainPage(ctx, agent, in.Session, in.IdempotencyKey, tasks.DrainPageDefault)
			if err != nil {
				return a, err
			}
			a.out.Notifications, a.out.More = ns, more
			if len(ns) == 0 {
				a.out.Notifications = []bgjobs.Notification{}
				a.text = "No new background results."
				return a, nil
			}
			parts := make([]string, len(ns))
			for i, n := range ns {
				parts[i] = n.Text
			}
			a.text = strings.Join(parts, "\n\n")
			if more {
				a.text += "\n\nMore background results are waiting: call drain_notifications again."
			}
			return a, nil
		})
	addTool(s, &mcp.Tool{Name: "acknowledge_result",
		Description: "Mark an ended job's result as handed over when you got it another way (a webhook, a person): drain_notifications will not hand it over again.",
		Annotations: &mcp.ToolAnnotations{Title: "Acknowledge a result", DestructiveHint: no(), IdempotentHint: true, OpenWorldHint: no()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in JobInput) (answer[AckOutput], error) {
			flipped, err := m.Ack(ctx, agent, in.JobID)
			if err != nil {
				return answer[AckOutput]{}, err
			}
			text := fmt.Sprintf("Job %s acknowledged.", in.JobID)
			if !flipped {
				text = fmt.Sprintf("Job %s was already handed over.", in.JobID)
			}
			return answer[AckOutput]{out: AckOutput{JobID: in.JobID, Acknowledged: flipped}, text: text}, nil
		})
	addTool(s, &mcp.Tool{Name: "memory_recall", Description: "Search your full background reports and ingested documents. Use it when a notification's report was cut short.",
		Annotations: &mcp.ToolAnnotations{Title: "Search memory", ReadOnlyHint: true, OpenWorldHint: no()}},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RecallInput) (answer[search.RecallResult], error) {
			var a answer[search.RecallResult]
			if mem == nil {
				return a, bgjobs.Errorf(bgjobs.EUnavailable, "this server has no search index")
			}
			res, err := mem.Recall(ctx, search.RecallRequest{Agent: agent, Query: in.Query, Session: in.Session, SourceType: in.SourceType, Limit: in.Limit})
			if err != nil {
				return a, err
			}
			a.out = *res
			return a, nil
		})
	return s
}
