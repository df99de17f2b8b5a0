package tasks

import (
	"context"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/notify"
)

// Drain hands over every ended, unnotified job of the session, oldest
// completion first, each exactly once. A repeat with the same idempotency
// key within 10 minutes returns the same notifications.
func (m *Manager) Drain(ctx context.Context, agent, session, idemKey string) ([]bgjobs.Notification, error) {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return nil, err
	}
	now := m.now()
	rows, err := m.store.Drain(ctx, bgjobs.Tag(agent, session), idemKey, now, m.follow.DrainHold(ctx, now))
	if err != nil {
		return nil, err
	}
	metrics.DrainSize.Observe(float64(len(rows)))
	out := make([]bgjobs.Notification, len(rows))
	for i, r := range rows {
		// A turn report is cut, with a pointer to memory_recall, only once
		// it is searchable: a pointer must never point at nothing.
		cut := 0
		if r.ReportIndexed {
			cut = m.cfg.SummaryChars
		}
		out[i] = notify.Render(r, cut)
	}
	return out, nil
}

// CutReport shortens s to at most max runes at a sentence or line boundary
// when there is one (see notify.CutReport).
func CutReport(s string, max int) string { return notify.CutReport(s, max) }
