package reclaim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// Unpark against the pinned asynq's own keys: a task waiting to be retried
// goes to its queue at once and runs; one running, archived, queued or
// missing is named and left as it is.
func TestUnpark(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	q := env.Namespace + ":work"
	insp := asynq.NewInspectorFromRedisClient(env.RDB)
	ran := make(chan string, 10)
	release := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(env.RDB, asynq.Config{
		Concurrency: 4, Queues: map[string]int{q: 1}, TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return time.Hour },
	})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		ran <- id
		if id == "hold" {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}
		return errors.New("later")
	})))
	t.Cleanup(srv.Shutdown)
	t.Cleanup(func() { close(release) })
	client := asynq.NewClientFromRedisClient(env.RDB)
	for id, retries := range map[string]int{"parked": 3, "archived": 0, "hold": 0} {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.Queue(q), asynq.TaskID(id), asynq.MaxRetry(retries))
		require.NoError(t, err)
	}
	state := func(id string) asynq.TaskState {
		info, err := insp.GetTaskInfo(q, id)
		require.NoError(t, err)
		return info.State
	}
	testenv.Eventually(t, 30*time.Second, "one task waiting to be retried, one archived, one running", func() bool {
		return state("parked") == asynq.TaskStateRetry && state("archived") == asynq.TaskStateArchived && state("hold") == asynq.TaskStateActive
	})
	s := New(env.RDB)
	now := time.Now()

	// States reads what the inspector reads, for every state the
	// reconciler tells apart, in one round trip.
	idle := env.Namespace + ":idle" // no server works it
	_, err := client.EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.Queue(idle), asynq.TaskID("waiting"))
	require.NoError(t, err)
	_, err = client.EnqueueContext(ctx, asynq.NewTask("t", nil), asynq.Queue(idle), asynq.TaskID("later"), asynq.ProcessIn(time.Hour))
	require.NoError(t, err)
	states, err := s.States(ctx, []Task{{q, "parked"}, {q, "archived"}, {q, "hold"}, {idle, "waiting"}, {idle, "later"}, {q, "nobody"}, {"no-such-queue", "hold"}})
	require.NoError(t, err)
	require.Equal(t, []string{asynq.TaskStateRetry.String(), StateArchived, StateActive, asynq.TaskStatePending.String(),
		asynq.TaskStateScheduled.String(), "", ""}, states)
	require.Equal(t, StateArchived, asynq.TaskStateArchived.String())
	require.Equal(t, StateActive, asynq.TaskStateActive.String())
	require.ErrorIs(t, s.Unpark(ctx, q, "hold", now), ErrTaskRunning)
	require.ErrorIs(t, s.Unpark(ctx, q, "archived", now), ErrTaskNotWaiting)
	require.Equal(t, asynq.TaskStateArchived, state("archived"), "an archived task is never run again")
	require.ErrorIs(t, s.Unpark(ctx, q, "nobody", now), ErrTaskGone)

	for len(ran) > 0 {
		<-ran
	}
	require.NoError(t, s.Unpark(ctx, q, "parked", now))
	select {
	case id := <-ran:
		require.Equal(t, "parked", id, "brought back, it runs again within its hour")
	case <-time.After(30 * time.Second):
		t.Fatal("the task brought back did not run")
	}
	testenv.Eventually(t, 30*time.Second, "sent back again", func() bool { return state("parked") == asynq.TaskStateRetry })
	require.NoError(t, insp.PauseQueue(q))
	require.NoError(t, s.Unpark(ctx, q, "parked", now))
	require.Equal(t, asynq.TaskStatePending, state("parked"))
	require.ErrorIs(t, s.Unpark(ctx, q, "parked", now), ErrTaskQueued)
	require.NoError(t, insp.UnpauseQueue(q))
}
