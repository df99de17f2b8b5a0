package agents

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/bgjobs/bgjobs/internal/netguard"
)

// cardTTL is how long an agent card's streaming capability is trusted.
const cardTTL = time.Minute

type cardEntry struct {
	streams bool
	at      time.Time
}

var cards = struct {
	mu sync.Mutex
	m  map[string]cardEntry
}{m: map[string]cardEntry{}}

// streams reports whether the agent's card says it streams. The card is
// read from the well-known path of the endpoint's origin; an agent without
// a readable card is spoken to with message/send.
func (r *A2A) streams(ctx context.Context, endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	origin := u.Scheme + "://" + u.Host
	cards.mu.Lock()
	e, ok := cards.m[origin]
	cards.mu.Unlock()
	if ok && time.Since(e.at) < cardTTL {
		return e.streams
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	card, err := agentcard.NewResolver(r.HTTP).Resolve(cctx, origin)
	e = cardEntry{streams: err == nil && card.Capabilities.Streaming, at: time.Now()}
	cards.mu.Lock()
	cards.m[origin] = e
	cards.mu.Unlock()
	return e.streams
}

// stream runs a turn with message/stream: every status or artifact update
// before the end is reported to progress; the final message, artifacts or
// status text is the report.
func (r *A2A) stream(ctx context.Context, client *a2aclient.Client, params *a2a.MessageSendParams, progress func(state, text string)) (string, error) {
	var artifacts []string
	var last *a2a.Task
	var taskID a2a.TaskID
	accepted := false
	for ev, err := range client.SendStreamingMessage(ctx, params) {
		if err != nil {
			if ctx.Err() != nil {
				if taskID != "" {
					cancelRemote(client, taskID)
				}
				return "", ctx.Err()
			}
			return r.streamBroke(ctx, client, taskID, accepted, err)
		}
		accepted = true
		switch v := ev.(type) {
		case *a2a.Message:
			return messageText(v), nil
		case *a2a.Task:
			last, taskID = v, v.ID
			if v.Status.State.Terminal() {
				return taskReport(v)
			}
		case *a2a.TaskArtifactUpdateEvent:
			taskID = v.TaskID
			if s := partsText(v.Artifact.Parts); s != "" {
				artifacts = append(artifacts, s)
				progress("artifact", s)
			}
		case *a2a.TaskStatusUpdateEvent:
			taskID = v.TaskID
			text := ""
			if v.Status.Message != nil {
				text = messageText(v.Status.Message)
			}
			if v.Final || v.Status.State.Terminal() {
				task := &a2a.Task{ID: v.TaskID, Status: v.Status}
				for _, a := range artifacts {
					task.Artifacts = append(task.Artifacts, &a2a.Artifact{Parts: a2a.ContentParts{a2a.TextPart{Text: a}}})
				}
				return taskReport(task)
			}
			progress(string(v.Status.State), text)
		}
	}
	if last != nil {
		return r.follow(ctx, client, last)
	}
	if len(artifacts) > 0 {
		return strings.Join(artifacts, "\n"), nil
	}
	return "", fmt.Errorf("a2a message/stream ended without a result")
}

// streamBroke decides what a broken stream means. Before the agent sent
// anything the turn may not have reached it: send it again (same message
// id). After, the agent has the turn: a task is followed with tasks/get; a
// message reply cannot be fetched again, and re-running the turn would do
// the work twice, so the job fails.
func (r *A2A) streamBroke(ctx context.Context, client *a2aclient.Client, taskID a2a.TaskID, accepted bool, err error) (string, error) {
	err = netguard.Brief(fmt.Errorf("a2a message/stream: %w", err))
	switch {
	case errors.Is(err, ErrReportTooLarge):
		return "", err
	case !accepted:
		return "", retryable(err)
	case taskID != "":
		return r.follow(ctx, client, &a2a.Task{ID: taskID, Status: a2a.TaskStatus{State: a2a.TaskStateWorking}})
	}
	return "", fmt.Errorf("%w; not sent again: the agent had accepted the turn", err)
}

// answered reports whether a message/send error came after the agent's
// answer arrived (a2a-go could not read it), as opposed to the request not
// getting through.
func answered(err error) bool {
	s := err.Error()
	return strings.Contains(s, "failed to decode response") || strings.Contains(s, "violates A2A spec")
}
