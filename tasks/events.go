package tasks

import (
	"context"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/eventhub"
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

// SubscribeEvents opens a subscription to the agents' events after the
// given ids (one per agent; "0" from the start) on the process's one
// reader. owner is who holds it (the caller's agent, "" for the admin):
// each owner may hold Config.EventStreamsPerAgent at once, the process
// Config.EventStreams in all; past either the answer is rate_limited.
func (m *Manager) SubscribeEvents(owner string, after map[string]string) (*eventhub.Subscription, error) {
	return m.hub.Subscribe(owner, after)
}
