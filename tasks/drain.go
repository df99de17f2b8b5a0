package tasks

import (
	"context"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/notify"
)

// Drain page sizes.
const (
	DrainPageDefault = 1000
	DrainPageMax     = 1000
)

// Drain is DrainPage with the default page: every ended, unnotified job of
// the session, up to DrainPageDefault.
func (m *Manager) Drain(ctx context.Context, agent, session, idemKey string) ([]bgjobs.Notification, error) {
	ns, _, err := m.DrainPage(ctx, agent, session, idemKey, DrainPageDefault)
	return ns, err
}

// DrainPage hands over up to limit ended, unnotified jobs of the session,
// oldest completion first, each exactly once; more says others wait for
// the next drain. A repeat with the same idempotency key within 10 minutes
// returns the same notifications. A drain whose caller gives up or fails
// uses nothing up: its results come back on the next drain.
func (m *Manager) DrainPage(ctx context.Context, agent, session, idemKey string, limit int) (ns []bgjobs.Notification, more bool, err error) {
	if err := bgjobs.CheckSession("session", session); err != nil {
		return nil, false, err
	}
	if limit < 1 || limit > DrainPageMax {
		return nil, false, bgjobs.FieldError("limit", "between 1 and %d", DrainPageMax)
	}
	now := m.now()
	tag, nonce := bgjobs.Tag(agent, session), handoverNonce()
	rows, more, err := m.hand.Drain(ctx, tag, idemKey, nonce, now, m.follow.DrainHold(ctx, now), limit)
	if lost(ctx, err, len(rows) > 0) {
		m.giveBack(tag, nonce, idemKey, false)
		if err == nil {
			err = bgjobs.Unavailable("drain", ctx.Err())
		}
		return nil, false, err
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
	return out, more, nil
}

// CutReport shortens s to at most max runes at a sentence or line boundary
// when there is one (see notify.CutReport).
func CutReport(s string, max int) string { return notify.CutReport(s, max) }
