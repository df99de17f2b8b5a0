package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
)

// Event types published for people watching (SSE, the console). They are
// display only: the model learns of results through the drain.
const (
	EventStarted   = "background.started"
	EventRunning   = "background.running"
	EventCompleted = "background.completed"
	// EventProgress is one update a streaming agent sent during a turn.
	EventProgress = "background.progress"
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
	Trigger       string    `json:"trigger,omitempty"`
	Counts        *Counts   `json:"counts,omitempty"`
	Partial       bool      `json:"partial,omitempty"`
	Seq           int       `json:"seq,omitempty"`
	State         string    `json:"state,omitempty"`
	Text          string    `json:"text,omitempty"`
	At            time.Time `json:"at"`
}

// eventStreamLen caps each agent's event stream, so a client reconnecting
// with Last-Event-ID finds what it missed without the log growing forever.
const eventStreamLen = 10000

// eventResultChars is how much of a result an event carries.
const eventResultChars = 500

// publish queues e for the agent's channel and its capped stream. Events
// are display only: they go out through the sink, batched with other
// bookkeeping, and never delay or fail the state change they report.
func (m *Manager) publish(e Event) {
	e.Result = bgjobs.CutRunes(e.Result, eventResultChars)
	e.Error = bgjobs.CutRunes(e.Error, eventResultChars)
	e.Text = bgjobs.CutRunes(e.Text, eventResultChars)
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	stream, channel := m.k.eventStream(e.Agent), m.k.events(e.Agent)
	m.sink.add(func(ctx context.Context, p redis.Pipeliner) {
		p.XAdd(ctx, &redis.XAddArgs{Stream: stream, MaxLen: eventStreamLen, Approx: true, Values: map[string]any{"type": e.Type, "data": b}})
		p.Publish(ctx, channel, b)
	})
}

// Subscribe listens to one agent's live events. The caller closes the
// returned PubSub.
func (m *Manager) Subscribe(ctx context.Context, agent string) *redis.PubSub {
	return m.rdb.Subscribe(ctx, m.k.events(agent))
}

// sink runs the writes that follow a state change but need not share its
// round trip — events, and removing a settled job from the reconciler's
// to-do list — in pipelines, in the order they were queued. Whatever is
// queued while one pipeline is in flight goes out in the next, so under load
// a hundred follow-ups cost one round trip. Losing them in a crash is
// harmless: events are display only and the reconciler clears stale entries.
type sink struct {
	rdb    redis.UniversalClient
	log    *slog.Logger
	ch     chan sinkOp
	done   chan struct{}
	mu     sync.RWMutex
	closed bool
}

type sinkOp func(ctx context.Context, p redis.Pipeliner)

const sinkBatch = 256

func newSink(rdb redis.UniversalClient, log *slog.Logger) *sink {
	s := &sink{rdb: rdb, log: log, ch: make(chan sinkOp, 4*sinkBatch), done: make(chan struct{})}
	go s.loop()
	return s
}

// add queues op; after close it is dropped.
func (s *sink) add(op sinkOp) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	s.ch <- op
}

func (s *sink) loop() {
	defer close(s.done)
	for op := range s.ch {
		batch := []sinkOp{op}
	gather:
		for len(batch) < sinkBatch {
			select {
			case next, ok := <-s.ch:
				if !ok {
					break gather
				}
				batch = append(batch, next)
			default:
				break gather
			}
		}
		ctx := context.Background()
		if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, op := range batch {
				op(ctx, p)
			}
			return nil
		}); err != nil {
			s.log.Warn("follow-up writes", slog.Int("count", len(batch)), slog.Any("err", err))
		}
	}
}

// close flushes what is queued and stops.
func (s *sink) close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.ch)
	}
	s.mu.Unlock()
	<-s.done
}

// StreamEvent is one entry of an agent's event stream: its id (usable as an
// SSE Last-Event-ID), type and JSON body.
type StreamEvent struct {
	ID   string
	Type string
	Data string
}

// ReadEvents returns the events of the agents' streams after the given ids
// (one per agent, "0" for the beginning, "$" for only new ones), blocking
// up to block for the first. An empty result means none came.
func (m *Manager) ReadEvents(ctx context.Context, after map[string]string, block time.Duration) ([]StreamEvent, map[string]string, error) {
	streams := make([]string, 0, 2*len(after))
	agents := make([]string, 0, len(after))
	for a := range after {
		agents = append(agents, a)
		streams = append(streams, m.k.eventStream(a))
	}
	for _, a := range agents {
		streams = append(streams, after[a])
	}
	res, err := m.rdb.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: 500, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, err
	}
	next := maps.Clone(after)
	var out []StreamEvent
	for _, s := range res {
		agent := strings.TrimSuffix(strings.TrimPrefix(s.Stream, m.k.ns+":events:"), ":stream")
		for _, msg := range s.Messages {
			typ, _ := msg.Values["type"].(string)
			data, _ := msg.Values["data"].(string)
			out = append(out, StreamEvent{ID: msg.ID, Type: typ, Data: data})
			next[agent] = msg.ID
		}
	}
	return out, next, nil
}

// LastEventID returns the newest event id of an agent's stream, or "0-0".
func (m *Manager) LastEventID(ctx context.Context, agent string) (string, error) {
	msgs, err := m.rdb.XRevRangeN(ctx, m.k.eventStream(agent), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		return "0-0", err
	}
	return msgs[0].ID, nil
}

// EventAgents lists the agents that have an event stream, for an admin
// watching everyone.
func (m *Manager) EventAgents(ctx context.Context) ([]string, error) {
	var out []string
	iter := m.rdb.Scan(ctx, 0, m.k.ns+":events:*:stream", 200).Iterator()
	for iter.Next(ctx) {
		out = append(out, strings.TrimSuffix(strings.TrimPrefix(iter.Val(), m.k.ns+":events:"), ":stream"))
	}
	return out, iter.Err()
}
