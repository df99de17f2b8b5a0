package tasks

import (
	"context"
	"time"

	"github.com/bgjobs/bgjobs/tasks/internal/followup"
)

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

// BusyTTLDefault is the lease when a busy call names none; BusyTTLMax the
// longest one call may take.
const (
	BusyTTLDefault = followup.BusyTTLDefault
	BusyTTLMax     = followup.BusyTTLMax
)
