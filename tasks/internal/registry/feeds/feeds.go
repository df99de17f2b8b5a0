// Package feeds keeps bgjobs' two Redis streams: each agent's capped
// event stream (for people: SSE, the console) and the reports stream every
// search writer tails (for memory). Keys come from registry.Keys.
package feeds

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/walk"
)

// Store holds the streams.
type Store struct {
	rdb redis.UniversalClient
	w   *pipeline.Writer
	k   registry.Keys
}

// New returns the streams on rdb, writing through w, with keys k.
func New(rdb redis.UniversalClient, w *pipeline.Writer, k registry.Keys) *Store {
	return &Store{rdb: rdb, w: w, k: k}
}

// EventStreamLen caps each agent's event stream, so a client reconnecting
// with Last-Event-ID finds what it missed without the log growing forever.
const EventStreamLen = 10000

// Publish appends e to its agent's capped event stream, as a follow-up
// write: events are display only and never delay or fail the state change
// they report. Texts are cut to bgjobs.EventTextChars.
func (s *Store) Publish(e bgjobs.Event) { s.w.Add(s.Queue(e)) }

// Queue is Publish as a pipeline op, for a caller that sends e in its own
// round trip (a job's first event, ahead of anything a worker publishes).
func (s *Store) Queue(e bgjobs.Event) pipeline.Op {
	e.Result = bgjobs.CutRunes(e.Result, bgjobs.EventTextChars)
	e.Error = bgjobs.CutRunes(e.Error, bgjobs.EventTextChars)
	e.Text = bgjobs.CutRunes(e.Text, bgjobs.EventTextChars)
	data := e.AppendJSON(make([]byte, 0, 256))
	// The op holds the encoded entry alone, not the event it came from.
	args := &redis.XAddArgs{Stream: s.k.EventStream(e.Agent), MaxLen: EventStreamLen, Approx: true, Values: []any{"type", e.Type, "data", data}}
	return func(ctx context.Context, p redis.Pipeliner) { p.XAdd(ctx, args) }
}

// ReadEvents returns the events of the agents' streams after the given ids
// (one per agent, "0" for the beginning, "$" for only new ones), blocking
// up to block for the first, and the ids to read on from.
func (s *Store) ReadEvents(ctx context.Context, after map[string]string, block time.Duration) ([]bgjobs.StreamEvent, map[string]string, error) {
	streams := make([]string, 0, 2*len(after))
	agents := make([]string, 0, len(after))
	for a := range after {
		agents = append(agents, a)
		streams = append(streams, s.k.EventStream(a))
	}
	for _, a := range agents {
		streams = append(streams, after[a])
	}
	res, err := s.rdb.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: 500, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, err
	}
	next := maps.Clone(after)
	var out []bgjobs.StreamEvent
	for _, st := range res {
		agent := s.k.AgentOfEventStream(st.Stream)
		for _, msg := range st.Messages {
			typ, _ := msg.Values["type"].(string)
			data, _ := msg.Values["data"].(string)
			out = append(out, bgjobs.StreamEvent{ID: msg.ID, Agent: agent, Type: typ, Data: data})
			next[agent] = msg.ID
		}
	}
	return out, next, nil
}

// LastEventID returns the newest event id of an agent's stream, or "0-0".
func (s *Store) LastEventID(ctx context.Context, agent string) (string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.k.EventStream(agent), "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		return "0-0", registry.Unavailable("read the event stream", err)
	}
	return msgs[0].ID, nil
}

// EventAgents lists the agents that have an event stream.
func (s *Store) EventAgents(ctx context.Context) ([]string, error) {
	var out []string
	err := walk.Keys(ctx, s.rdb, s.k.EventStreamPattern(), 200, func(key string) error {
		out = append(out, s.k.AgentOfEventStream(key))
		return nil
	})
	return out, registry.Unavailable("list the event streams", err)
}

// ReportsStream is the Redis stream every search writer tails.
func (s *Store) ReportsStream() string { return s.k.Reports() }

// IndexerAliveKey is the key a running search writer keeps fresh.
func (s *Store) IndexerAliveKey() string { return s.k.IndexerAlive() }

// AppendReports adds documents (JSON) to the reports stream and returns
// the id of the last entry.
func (s *Store) AppendReports(ctx context.Context, docs [][]byte) (string, error) {
	cmds := make([]*redis.StringCmd, len(docs))
	err := s.w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		for i, d := range docs {
			cmds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: s.k.Reports(), Values: map[string]any{"doc": d}})
		}
	})
	if err == nil {
		for _, c := range cmds {
			if err = c.Err(); err != nil {
				break
			}
		}
	}
	if err != nil {
		return "", registry.Unavailable("append to the reports stream", err)
	}
	if len(cmds) == 0 {
		return "", nil
	}
	return cmds[len(cmds)-1].Val(), nil
}

// IndexerRunning reports whether some process keeps the indexer key fresh.
func (s *Store) IndexerRunning(ctx context.Context) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.k.IndexerAlive()).Result()
	return n == 1, err
}
