package tasks

import (
	"context"
	"time"

	"github.com/bgjobs/bgjobs"
)

// ReadEvents returns the events of the agents' streams after the given ids
// (one per agent, "0" for the beginning, "$" for only new ones), blocking
// up to block for the first, and the ids to read on from. An empty result
// means none came.
func (m *Manager) ReadEvents(ctx context.Context, after map[string]string, block time.Duration) ([]bgjobs.StreamEvent, map[string]string, error) {
	return m.feeds.ReadEvents(ctx, after, block)
}

// LastEventID returns the newest event id of an agent's stream, or "0-0".
func (m *Manager) LastEventID(ctx context.Context, agent string) (string, error) {
	return m.feeds.LastEventID(ctx, agent)
}

// EventAgents lists the agents that have an event stream, for an admin
// watching everyone.
func (m *Manager) EventAgents(ctx context.Context) ([]string, error) {
	return m.feeds.EventAgents(ctx)
}
