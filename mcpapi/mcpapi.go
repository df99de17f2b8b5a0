// Package mcpapi serves bgjobs to MCP clients (streamable HTTP): the tools
// an agent uses to fire background work, stop it, read its status, drain
// its notifications and recall its memory. It runs behind the HTTP API's
// auth: the same keys, the same tenancy.
package mcpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
)

// Recaller searches an agent's memory.
type Recaller interface {
	Recall(ctx context.Context, r search.RecallRequest) (*search.RecallResult, error)
}

// Handler returns the /mcp endpoint. Each MCP session gets a server built
// for its agent, so spawn_background's subagent_type lists that agent's
// roster; the session stays bound to the agent that opened it.
func Handler(m *tasks.Manager, mem Recaller, open bool) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		agent, ok := handlers.CallerAgent(r.Context())
		if !ok {
			return nil
		}
		return NewServer(r.Context(), m, mem, agent)
	}, nil)
	if open {
		return h
	}
	// The API's middleware has already checked the key; this hands the
	// agent to the SDK so a session cannot be taken over by another key.
	verify := func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		agent, ok := handlers.CallerAgent(r.Context())
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: agent, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	return auth.RequireBearerToken(verify, nil)(h)
}

// SpawnDescription is the contract the model reads: trust the notification.
const SpawnDescription = "Start long work in the background and keep talking. Returns a job id at once. " +
	"You will be notified when it completes — do NOT poll, check, or spawn a duplicate; continue with other work. " +
	"Results arrive through drain_notifications at the start of your next turn."

// SpawnInput is spawn_background's input.
type SpawnInput struct {
	OriginSession string           `json:"origin_session" jsonschema:"your current session id; the result comes back to it"`
	Description   string           `json:"description" jsonschema:"a short title for the job"`
	Prompt        string           `json:"prompt,omitempty" jsonschema:"the task for a background agent turn"`
	SubagentType  string           `json:"subagent_type,omitempty" jsonschema:"which kind of background agent runs the turn"`
	Kind          string           `json:"kind,omitempty" jsonschema:"turn (default) or work"`
	Work          *bgjobs.WorkSpec `json:"work,omitempty" jsonschema:"for kind work: the registered work type and its args"`
	Incognito     bool             `json:"incognito,omitempty" jsonschema:"keep the report out of memory and send no resume"`
	WaitMS        int64            `json:"wait_ms,omitempty" jsonschema:"wait up to this many milliseconds (at most 120000): a job that ends in time returns its result here and is not notified again"`
}

// BatchInput is task_batch's input.
type BatchInput struct {
	OriginSession string       `json:"origin_session" jsonschema:"your current session id"`
	Jobs          []SpawnInput `json:"jobs" jsonschema:"the jobs to fan out (origin_session of each is ignored)"`
}

// JobInput names one job.
type JobInput struct {
	JobID string `json:"job_id" jsonschema:"the job id, bg-…"`
}

// StatusInput asks for one job or a session's jobs.
type StatusInput struct {
	JobID   string `json:"job_id,omitempty" jsonschema:"one job's id"`
	Session string `json:"session,omitempty" jsonschema:"or: a session whose recent jobs to list"`
}

// SessionInput names a session.
type SessionInput struct {
	Session string `json:"session" jsonschema:"your current session id"`
}

// RecallInput is memory_recall's input.
type RecallInput struct {
	Query      string `json:"query" jsonschema:"words and \"quoted phrases\" to search for"`
	Session    string `json:"session,omitempty" jsonschema:"only this session's documents"`
	SourceType string `json:"source_type,omitempty" jsonschema:"background_report or ingest"`
	Limit      int    `json:"limit,omitempty" jsonschema:"at most this many hits (default 10, at most 100)"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func jsonText(v any) *mcp.CallToolResult {
	b, _ := json.MarshalIndent(v, "", "  ")
	return text(string(b))
}

// toolError turns a bgjobs error into a tool result the model can read and
// correct, rather than a protocol failure.
func toolError(err error) (*mcp.CallToolResult, any, error) {
	r := text(err.Error())
	r.IsError = true
	return r, nil, nil
}

func (in SpawnInput) request(agent, session string) tasks.SpawnRequest {
	return tasks.SpawnRequest{Agent: agent, OriginSession: session, Kind: bgjobs.Kind(in.Kind),
		SubagentType: in.SubagentType, Description: in.Description, Prompt: in.Prompt, Work: in.Work, Incognito: in.Incognito}
}

// NewServer builds the tools for one agent.
func NewServer(ctx context.Context, m *tasks.Manager, mem Recaller, agent string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "bgjobs", Version: "1"}, nil)

	spawnSchema, _ := jsonschema.For[SpawnInput](nil)
	if a, err := m.GetAgent(ctx, agent); err == nil && len(a.SubagentTypes) > 0 {
		var names []any
		keys := make([]string, 0, len(a.SubagentTypes))
		for k := range a.SubagentTypes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			names = append(names, k)
		}
		spawnSchema.Properties["subagent_type"].Enum = names
	}
	mcp.AddTool(s, &mcp.Tool{Name: "spawn_background", Description: SpawnDescription, InputSchema: spawnSchema},
		func(ctx context.Context, _ *mcp.CallToolRequest, in SpawnInput) (*mcp.CallToolResult, any, error) {
			req := in.request(agent, in.OriginSession)
			wait, err := bgjobs.Within("wait_ms", in.WaitMS, time.Millisecond, tasks.WaitMax)
			if err != nil {
				return toolError(err)
			}
			req.Wait = wait
			j, _, delivered, err := m.SpawnAndWait(ctx, req)
			if err != nil {
				return toolError(err)
			}
			if delivered {
				out := ""
				switch {
				case j.Result != nil:
					out = *j.Result
				case j.Error != nil:
					out = "Error: " + *j.Error
				}
				return text(fmt.Sprintf("Job %s %s within the wait:\n%s", j.ID, j.Status, out)), nil, nil
			}
			return text(fmt.Sprintf("Background agent started: %s. You will be notified when it completes — do NOT poll, check, or spawn a duplicate; continue with other work.", j.ID)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "task_batch", Description: "Fan out several background jobs at once; one notification wakes you when all of them have ended (or the straggler timeout passes). Do NOT poll."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in BatchInput) (*mcp.CallToolResult, any, error) {
			specs := make([]tasks.SpawnRequest, len(in.Jobs))
			for i, j := range in.Jobs {
				specs[i] = j.request(agent, in.OriginSession)
			}
			res, err := m.SpawnBatch(ctx, agent, in.OriginSession, specs)
			if err != nil {
				return toolError(err)
			}
			return jsonText(res), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "stop_task", Description: "Cancel a queued or running background job. It is still reported by drain_notifications, as cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in JobInput) (*mcp.CallToolResult, any, error) {
			j, err := m.Cancel(ctx, agent, in.JobID)
			if err != nil {
				return toolError(err)
			}
			return text(fmt.Sprintf("Job %s is %s.", j.ID, j.Status)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "background_status", Description: "Read one job (job_id) or a session's recent jobs (session). For people asking; you are notified of results without it."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in StatusInput) (*mcp.CallToolResult, any, error) {
			if in.JobID != "" {
				j, err := m.Get(ctx, agent, in.JobID)
				if err != nil {
					return toolError(err)
				}
				return jsonText(j), nil, nil
			}
			if in.Session == "" {
				return toolError(bgjobs.FieldError("job_id", "give job_id or session"))
			}
			jobs, _, err := m.List(ctx, tasks.ListRequest{Agent: agent, Session: in.Session, Limit: 20})
			if err != nil {
				return toolError(err)
			}
			return jsonText(jobs), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "drain_notifications", Description: "Collect every background result of your session that has not been handed to you yet. Each result is handed over exactly once."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in SessionInput) (*mcp.CallToolResult, any, error) {
			ns, err := m.Drain(ctx, agent, in.Session, "")
			if err != nil {
				return toolError(err)
			}
			if len(ns) == 0 {
				return text("No new background results."), nil, nil
			}
			parts := make([]string, len(ns))
			for i, n := range ns {
				parts[i] = n.Text
			}
			return text(strings.Join(parts, "\n\n")), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "memory_recall", Description: "Search your full background reports and ingested documents. Use it when a notification's report was cut short."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in RecallInput) (*mcp.CallToolResult, any, error) {
			if mem == nil {
				return toolError(bgjobs.Errorf(bgjobs.EUnavailable, "this server has no search index"))
			}
			res, err := mem.Recall(ctx, search.RecallRequest{Agent: agent, Query: in.Query, Session: in.Session, SourceType: in.SourceType, Limit: in.Limit})
			if err != nil {
				return toolError(err)
			}
			return jsonText(res), nil, nil
		})
	return s
}
