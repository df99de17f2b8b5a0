// Package agents makes the outbound calls bgjobs sends to agents: A2A turns
// through github.com/a2aproject/a2a-go.
package agents

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/work"
)

// A2A runs turn jobs over A2A JSON-RPC (protocol 0.3, message/send).
type A2A struct {
	// HTTP is the client for every call. Its Timeout should be zero: the
	// job's context bounds each turn.
	HTTP *http.Client
	// PollMin and PollMax bound the tasks/get backoff while a returned task
	// is not terminal. Default 200ms and 2s.
	PollMin, PollMax time.Duration
}

// NewA2A returns a runner whose every call (turns, resumes, webhooks,
// delegates) goes through the guarded client: internal addresses are
// refused at every dial and redirect unless allow-listed.
func NewA2A(allow netguard.Allow) *A2A {
	return &A2A{HTTP: netguard.Client(0, allow)}
}

// BackgroundContext is the contextId of a turn job: the agent runs it as a
// disposable worker, apart from any real conversation.
func BackgroundContext(jobID string) string { return "background:" + jobID }

// RunTurn sends the turn and returns the report. A task that is not yet
// terminal is followed with tasks/get until it ends or ctx is done; when ctx
// ends first (cancel or timeout) the agent is sent tasks/cancel. A report
// over bgjobs.MaxReportBytes fails the job, once.
func (r *A2A) RunTurn(ctx context.Context, t bgjobs.Turn) (string, error) {
	report, err := r.runTurn(ctx, t)
	if err == nil && len(report) > bgjobs.MaxReportBytes {
		return "", fmt.Errorf("%w (%.1f MiB)", ErrReportTooLarge, float64(len(report))/(1<<20))
	}
	return report, err
}

func (r *A2A) runTurn(ctx context.Context, t bgjobs.Turn) (string, error) {
	client, err := a2aclient.NewFromEndpoints(ctx,
		[]a2a.AgentInterface{{URL: t.AgentURL, Transport: a2a.TransportProtocolJSONRPC}},
		jsonrpcWithLongStreams(r.HTTP))
	if err != nil {
		return "", fmt.Errorf("a2a client for %s: %w", t.AgentURL, err)
	}
	defer client.Destroy()

	text := t.Prompt
	if t.Preamble != "" {
		text = t.Preamble + "\n\n" + t.Prompt
	}
	meta := map[string]any{
		"origin":         "background",
		"trigger":        t.JobID,
		"origin_session": t.OriginSession,
		"subagent_type":  t.SubagentType,
		"disposable":     true,
	}
	msg := &a2a.Message{
		ID:        t.JobID,
		ContextID: BackgroundContext(t.JobID),
		Role:      a2a.MessageRoleUser,
		Parts:     a2a.ContentParts{a2a.TextPart{Text: text}},
		Metadata:  meta,
	}
	if t.Progress != nil && r.streams(ctx, t.AgentURL) {
		return r.stream(ctx, client, &a2a.MessageSendParams{Message: msg, Metadata: meta}, t.Progress)
	}
	res, err := client.SendMessage(ctx, &a2a.MessageSendParams{Message: msg, Metadata: meta})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		err = netguard.Brief(fmt.Errorf("a2a message/send: %w", err))
		if answered(err) {
			// The agent took the turn and answered: running it again
			// would do the work twice.
			return "", err
		}
		// The same message id goes out again, so the agent can de-duplicate.
		return "", work.Retryable(err)
	}
	switch v := res.(type) {
	case *a2a.Message:
		return messageText(v), nil
	case *a2a.Task:
		return r.follow(ctx, client, v)
	default:
		return "", fmt.Errorf("a2a message/send: unexpected result %T", res)
	}
}

// follow polls a non-terminal task until it ends.
func (r *A2A) follow(ctx context.Context, client *a2aclient.Client, task *a2a.Task) (string, error) {
	delay := r.PollMin
	if delay <= 0 {
		delay = 200 * time.Millisecond
	}
	maxDelay := r.PollMax
	if maxDelay <= 0 {
		maxDelay = 2 * time.Second
	}
	for !task.Status.State.Terminal() && task.Status.State != a2a.TaskStateInputRequired && task.Status.State != a2a.TaskStateAuthRequired {
		select {
		case <-ctx.Done():
			cancelRemote(client, task.ID)
			return "", ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, maxDelay)
		next, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: task.ID})
		if err != nil {
			if ctx.Err() != nil {
				cancelRemote(client, task.ID)
				return "", ctx.Err()
			}
			continue // a blip while following: keep polling until the deadline
		}
		task = next
	}
	return taskReport(task)
}

// cancelRemote asks the agent to stop; best effort with its own deadline,
// since the job's context has already ended.
func cancelRemote(client *a2aclient.Client, id a2a.TaskID) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = client.CancelTask(ctx, &a2a.TaskIDParams{ID: id})
}

// ErrTurnFailed wraps the message of a task that ended failed, rejected,
// canceled or waiting for input no background worker can give.
var ErrTurnFailed = errors.New("agent turn did not complete")

func taskReport(task *a2a.Task) (string, error) {
	status := ""
	if task.Status.Message != nil {
		status = messageText(task.Status.Message)
	}
	if task.Status.State != a2a.TaskStateCompleted {
		if status == "" {
			status = "no message"
		}
		return "", fmt.Errorf("%w: task %s: %s", ErrTurnFailed, task.Status.State, status)
	}
	var b strings.Builder
	for _, art := range task.Artifacts {
		if s := partsText(art.Parts); s != "" {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(s)
		}
	}
	if b.Len() > 0 {
		return b.String(), nil
	}
	return status, nil
}

func messageText(m *a2a.Message) string { return partsText(m.Parts) }

func partsText(parts a2a.ContentParts) string {
	var texts []string
	for _, p := range parts {
		switch v := p.(type) {
		case a2a.TextPart:
			texts = append(texts, v.Text)
		case *a2a.TextPart:
			texts = append(texts, v.Text)
		}
	}
	return strings.Join(texts, "\n")
}

func retryable(err error) error { return work.Retryable(err) }
