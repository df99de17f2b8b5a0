package tenants

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// One configured agent is lone; a second one registered is seen once the
// kept answer is older than loneCheck.
func TestLone(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	now := time.Now()
	k := registry.Keys{NS: env.Namespace}
	l := New(env.RDB, k).Lone(func() time.Time { return now })
	require.True(t, l.Is(ctx), "no agent at all")
	require.NoError(t, env.RDB.SAdd(ctx, k.Agents(), "alpha").Err())
	now = now.Add(loneCheck + time.Millisecond)
	require.True(t, l.Is(ctx))
	require.NoError(t, env.RDB.SAdd(ctx, k.Agents(), "beta").Err())
	require.True(t, l.Is(ctx), "the count is kept a moment")
	now = now.Add(loneCheck + time.Millisecond)
	require.False(t, l.Is(ctx))
}
