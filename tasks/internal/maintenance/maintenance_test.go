package maintenance_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/maintenance"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// Of several processes, one at a time runs the sweeps; when it stops, the
// next takes over.
func TestOneMaintainerIsElected(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	w := pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	store := registry.New(env.RDB, w, env.Namespace, time.Hour)
	deps := maintenance.Deps{Store: store, Interval: time.Minute, Now: time.Now, Log: slog.New(slog.DiscardHandler)}
	a, b := maintenance.New(deps), maintenance.New(deps)

	require.True(t, a.Leader(ctx), "the first to ask is elected")
	require.False(t, b.Leader(ctx), "a second is not, while the first holds the lease")
	require.True(t, a.Leader(ctx), "the leader keeps it")
	a.Stop() // never started: Stop hands the lease on all the same
	require.True(t, b.Leader(ctx), "the next takes over once the leader stops")
	require.False(t, a.Leader(ctx))
}
