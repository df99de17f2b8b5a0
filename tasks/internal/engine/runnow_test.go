package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// RunNow brings a waiting task to its queue at once and names each way it
// cannot: the pinned asynq says two of them only in words, which this
// fences. A task sent back with LaterBy waits what it was given.
func TestRunNow(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	e := New(asynq.NewClientFromRedisClient(env.RDB), asynq.NewInspectorFromRedisClient(env.RDB), env.Namespace, time.Minute, 3)
	_, err := e.aq.EnqueueContext(ctx, asynq.NewTask(TypeWork, []byte(`{}`)), asynq.Queue(e.Queue(QueueWork)), asynq.TaskID("t1"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	require.NoError(t, e.RunNow(QueueWork, "t1"))
	info, err := e.insp.GetTaskInfo(e.Queue(QueueWork), "t1")
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStatePending, info.State)
	require.ErrorIs(t, e.RunNow(QueueWork, "t1"), ErrTaskQueued)
	require.ErrorIs(t, e.RunNow(QueueWork, "nobody"), ErrTaskGone)
	require.NoError(t, env.RDB.HSet(ctx, "asynq:{"+e.Queue(QueueWork)+"}:t:t1", "state", "active").Err())
	require.ErrorIs(t, e.RunNow(QueueWork, "t1"), ErrTaskRunning)

	require.Equal(t, 7*time.Second, retryDelay(0, LaterBy(ErrLater, 7*time.Second), nil))
	require.Equal(t, time.Second, retryDelay(0, ErrLater, nil))
	require.True(t, errors.Is(LaterBy(ErrRowBehind, time.Second), ErrLater))
}
