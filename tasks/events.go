package tasks

import (
	"context"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/followup"
)

// ReadEvents returns the events of the agents' streams after the given ids
// (one per agent, "0" for the beginning, "$" for only new ones), blocking
// up to block for the first, and the ids to read on from. An empty result
// means none came.
func (m *Manager) ReadEvents(ctx context.Context, after map[string]string, block time.Duration) ([]bgjobs.StreamEvent, map[string]string, error) {
	return m.store.ReadEvents(ctx, after, block)
}

// LastEventID returns the newest event id of an agent's stream, or "0-0".
func (m *Manager) LastEventID(ctx context.Context, agent string) (string, error) {
	return m.store.LastEventID(ctx, agent)
}

// EventAgents lists the agents that have an event stream, for an admin
// watching everyone.
func (m *Manager) EventAgents(ctx context.Context) ([]string, error) {
	return m.store.EventAgents(ctx)
}

// Busy marks a session inside a turn for ttl: resumes are held, never
// dropped, until Idle or until the lease lapses.
func (m *Manager) Busy(ctx context.Context, agent, session string, ttl time.Duration) error {
	return m.follow.Busy(ctx, agent, session, ttl)
}

// Idle ends a session's busy lease; one coalesced resume fires if resumes
// were held and anything is still undrained.
func (m *Manager) Idle(ctx context.Context, agent, session string) error {
	return m.follow.Idle(ctx, agent, session)
}

// IsBusy reports whether a session holds an unexpired busy lease.
func (m *Manager) IsBusy(ctx context.Context, agent, session string) (bool, error) {
	return m.follow.IsBusy(ctx, agent, session)
}

// BusyTTLDefault is the lease when a busy call names none.
const BusyTTLDefault = followup.BusyTTLDefault
