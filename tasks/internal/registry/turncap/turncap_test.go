package turncap

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// The cap: two slots; a third waits until a lease lapses; a holder asking
// again keeps its slot; a renewed slot does not lapse; an agent at its
// share waits while another agent takes a free slot.
func TestCapAndShare(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	now := time.UnixMilli(1_800_000_000_000)
	c := New(env.RDB, registry.Keys{NS: env.Namespace}, 2, 1, time.Millisecond, func(context.Context) bool { return false }, func() time.Time { return now }, slog.New(slog.DiscardHandler))
	acquire := func(agent, id string, at time.Time, share int) int {
		t.Helper()
		now = at
		got, err := c.acquire(ctx, agent, id, share)
		require.NoError(t, err)
		return got
	}
	renew := func(agent, id string, expiry time.Time) {
		require.NoError(t, renewTurnCmd.Run(ctx, env.RDB, []string{c.k.TurnSem()}, member(agent, id), expiry.UnixMilli()).Err())
	}
	release := func(agent, id string) { env.RDB.ZRem(ctx, c.k.TurnSem(), member(agent, id)) }

	require.Equal(t, held, acquire("alpha", "a", now, 2), "first slot")
	require.Equal(t, held, acquire("alpha", "b", now, 2), "second slot")
	require.Equal(t, capFull, acquire("alpha", "c", now, 2), "cap reached")
	require.Equal(t, held, acquire("alpha", "a", now.Add(time.Second), 2), "a holder keeps its slot")
	start := now.Add(-time.Second)
	renew("alpha", "b", start.Add(2*lease))
	require.Equal(t, held, acquire("alpha", "c", start.Add(lease+2*time.Second), 2), "a's lease lapsed, b's was renewed: c takes a's slot")
	require.Equal(t, capFull, acquire("alpha", "d", now, 2))
	renew("alpha", "a", start.Add(3*lease)) // renewing a lapsed slot is a no-op
	release("alpha", "c")
	// Alpha holds b; with a share of one its next turn waits, while
	// alphabet (whose slots alpha's prefix must not count) takes the free one.
	require.Equal(t, shareFull, acquire("alpha", "d", now, 1), "alpha holds its share")
	require.Equal(t, held, acquire("alphabet", "e", now, 1), "another agent takes the free slot")
	require.Equal(t, capFull, acquire("gamma", "f", now, 1))
	release("alpha", "b")
	require.Equal(t, held, acquire("alpha", "d", now, 1), "a released slot is free")
}

// A lone agent's share is the whole cap; with others it is the configured
// share (tenants.Lone says which, TestLone there).
func TestShareOfALoneAgent(t *testing.T) {
	t.Parallel()
	lone := true
	c := New(nil, registry.Keys{}, 3, 2, time.Millisecond, func(context.Context) bool { return lone }, time.Now, slog.New(slog.DiscardHandler))
	require.Equal(t, 3, c.shareOf(context.Background()))
	lone = false
	require.Equal(t, 2, c.shareOf(context.Background()))
}
