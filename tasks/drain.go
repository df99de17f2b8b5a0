package tasks

import (
	"context"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/notify"
)

// Drain hands over every ended, unnotified job of the session, oldest
// completion first, each exactly once. A repeat with the same idempotency
// key within 10 minutes returns the same notifications. A drain whose
// caller gives up or fails uses nothing up: its results come back on the
// next drain.
func (m *Manager) Drain(ctx context.Context, agent, session, idemKey string) ([]bgjobs.Notification, error) {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return nil, err
	}
	now := m.now()
	tag, nonce := bgjobs.Tag(agent, session), handoverNonce()
	rows, err := m.hand.Drain(ctx, tag, idemKey, nonce, now, m.follow.DrainHold(ctx, now))
	if lost(ctx, err, len(rows) > 0) {
		m.giveBack(tag, nonce, idemKey, false)
		if err == nil {
			err = bgjobs.Unavailable("drain", ctx.Err())
		}
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
