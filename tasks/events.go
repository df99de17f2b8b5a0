package tasks

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// Event types published for people watching (SSE, the console). They are
// display only: the model learns of results through the drain.
const (
	EventStarted   = "background.started"
	EventRunning   = "background.running"
	EventCompleted = "background.completed"
)

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
	At            time.Time `json:"at"`
}

// eventStreamLen caps each agent's event stream, so a client reconnecting
// with Last-Event-ID finds what it missed without the log growing forever.
const eventStreamLen = 10000

// eventResultChars is how much of a result an event carries.
const eventResultChars = 500

// publish sends e on the agent's channel and appends it to the agent's
// stream in one round trip. Failures are logged, never returned: events
// must not fail a state change that already happened.
func (m *Manager) publish(ctx context.Context, e Event) {
	e.Result = cutRunes(e.Result, eventResultChars)
	e.Error = cutRunes(e.Error, eventResultChars)
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: m.k.eventStream(e.Agent), MaxLen: eventStreamLen, Approx: true, Values: map[string]any{"type": e.Type, "data": b}})
		p.Publish(ctx, m.k.events(e.Agent), b)
		return nil
	})
	if err != nil {
		m.log.Warn("publish event", slog.String("type", e.Type), slog.String("job_id", e.JobID), slog.Any("err", err))
	}
}

// Subscribe listens to one agent's live events. The caller closes the
// returned PubSub.
func (m *Manager) Subscribe(ctx context.Context, agent string) *redis.PubSub {
	return m.rdb.Subscribe(ctx, m.k.events(agent))
}

func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}
