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

	// An agent that only spawns work is registered nowhere: its spawns
	// count it.
	k2 := registry.Keys{NS: env.Namespace + "-2"}
	s := New(env.RDB, k2)
	l2 := s.Lone(func() time.Time { return now })
	require.NoError(t, env.RDB.SAdd(ctx, k2.Agents(), "alpha").Err())
	s.NoteSpawner(ctx, "alpha")
	require.True(t, l2.Is(ctx), "the registered agent spawning is still one")
	s.NoteSpawner(ctx, "gamma")
	now = now.Add(loneCheck + time.Millisecond)
	require.False(t, l2.Is(ctx), "a second agent known only by its spawns")
	t.Cleanup(func() { env.RDB.Del(context.Background(), k2.Agents(), k2.Spawners()) })
}
