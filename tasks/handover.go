package tasks

import (
	"context"
	"log/slog"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
)

// A hand-over is a call that marks results delivered to its caller: a
// drain, an ack, a wait's take. Its flip runs in Redis, which may stall; a
// caller that gives up meanwhile (its context ends) or gets an error must
// not have its results used up. Each such call carries a fresh nonce, and
// on either outcome the nonce is given back: what it took returns to
// pending, and a call of it still on its way flips nothing.

// handoverNonce names one hand-over call.
func handoverNonce() string { return newID("") }

// lost reports whether a hand-over's results cannot have reached its
// caller: Redis did not answer (the call may still run later), or it took
// something for a caller that is gone. A definite refusal (no such job)
// took nothing.
func lost(ctx context.Context, err error, took bool) bool {
	return bgjobs.ErrorCode(err) == bgjobs.EUnavailable || (took && ctx.Err() != nil)
}

// giveBack undoes nonce's hand-over, retrying in the background until
// Redis answers or the nonce's records lapse.
func (m *Manager) giveBack(tag, nonce, idemKey string, announce bool) {
	m.follow.Persist("give back results", handover.DrainIdemTTL, func(ctx context.Context) error {
		n, err := m.hand.Undo(ctx, tag, nonce, idemKey, announce, m.now())
		if n > 0 {
			m.log.Info("results given back: their caller did not receive them", slog.String("session", tag), slog.Int("jobs", n))
		}
		return err
	})
}
