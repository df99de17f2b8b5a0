package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bgclient "github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// An agent retries its own ended jobs over the API, as the Go client does
// it: a failed job runs again under its id and its new outcome is drained
// once more; a completed one only when forced; a job still running, or
// another agent's, is refused; a retried batch member counts once, with
// its new outcome.
func TestRetryOverTheAPI(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_AUTO_RESUME": "false"})
	c := bgclient.New(base, "ka")
	ctx := context.Background()
	echo := func(args map[string]any) *bgclient.Work { return &bgclient.Work{Type: "echo", Args: args} }
	ended := func(id string) *bgclient.Job {
		t.Helper()
		var j *bgclient.Job
		testenv.Eventually(t, 60*time.Second, id+" to end", func() bool {
			var err error
			j, err = c.Get(ctx, id)
			require.NoError(t, err)
			return j.Status != "queued" && j.Status != "running"
		})
		return j
	}
	drained := func() []bgclient.Notification {
		t.Helper()
		ns, err := c.Drain(ctx, "chat-r", "")
		require.NoError(t, err)
		return ns
	}

	flaky, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-r", Kind: "work", Description: "Flaky", Work: echo(map[string]any{"text": "down", "fail": true})})
	require.NoError(t, err)
	require.Equal(t, "failed", ended(flaky.ID).Status)
	require.Len(t, drained(), 1)
	j, err := c.Retry(ctx, flaky.ID, false)
	require.NoError(t, err)
	require.Equal(t, flaky.ID, j.ID)
	require.Equal(t, "queued", j.Status, "back in the queue, its outcome cleared")
	require.Nil(t, j.Error)
	require.False(t, j.Notified)
	again := ended(flaky.ID)
	require.Equal(t, "failed", again.Status)
	require.Equal(t, 2, again.Attempts, "its attempts go on counting")
	ns := drained()
	require.Len(t, ns, 1, "the new outcome is handed over once more")
	require.Equal(t, flaky.ID, ns[0].JobID)
	require.Empty(t, drained(), "and once only")

	done, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-r", Kind: "work", Work: echo(map[string]any{"text": "fine"})})
	require.NoError(t, err)
	require.Equal(t, "completed", ended(done.ID).Status)
	_, err = c.Retry(ctx, done.ID, false)
	require.ErrorIs(t, err, bgclient.ErrConflict, "a job that succeeded runs again only when forced")
	j, err = c.Retry(ctx, done.ID, true)
	require.NoError(t, err)
	require.Equal(t, "queued", j.Status)
	require.Equal(t, "completed", ended(done.ID).Status)
	ns = drained()
	require.Len(t, ns, 1, "its first outcome was not drained: the job is handed over once, with the new one: %+v", ns)
	require.Equal(t, done.ID, ns[0].JobID)

	// The same over MCP, as an agent's model calls it.
	s := mcpSession(t, base, "ka")
	text, out, isErr := callTool(t, s, "retry_task", map[string]any{"job_id": flaky.ID})
	require.False(t, isErr, text)
	require.Equal(t, "queued", out["status"])
	require.Contains(t, text, "You will be notified when it ends")
	require.Equal(t, "failed", ended(flaky.ID).Status)
	require.Len(t, drained(), 1)
	text, isErr = callText(t, s, "retry_task", map[string]any{"job_id": done.ID})
	require.True(t, isErr, "completed, not forced: %s", text)
	require.Contains(t, text, "force")

	slow, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-r", Kind: "work", Work: echo(map[string]any{"text": "slow", "delay_ms": 60000})})
	require.NoError(t, err)
	_, err = c.Retry(ctx, slow.ID, false)
	require.ErrorIs(t, err, bgclient.ErrConflict, "not while it is queued or running")
	_, err = bgclient.New(base, "kb").Retry(ctx, flaky.ID, false)
	require.ErrorIs(t, err, bgclient.ErrNotFound, "another agent's job does not exist for it")
	_, err = c.Retry(ctx, "bg-000000000000", false)
	require.ErrorIs(t, err, bgclient.ErrNotFound)
	rest := client{t: t, base: base, key: "ka"}
	for body, field := range map[string]string{`{"force":"yes"}`: "force", `{"forse":true}`: "forse"} {
		code, e := rest.do("POST", "/v1/jobs/"+flaky.ID+"/retry", body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", body, e)
		require.Equal(t, field, e["error"].(map[string]any)["field"], body)
	}
	_, err = c.Cancel(ctx, slow.ID)
	require.NoError(t, err)

	// A batch joins once, with the member that was cancelled; retried, that
	// member's new outcome replaces its old one in the counts.
	bt, err := c.Batch(ctx, "chat-r", []bgclient.SpawnRequest{
		{Kind: "work", Description: "quick", Work: echo(map[string]any{"text": "a"})},
		{Kind: "work", Description: "stopped", Work: echo(map[string]any{"text": "b", "delay_ms": 1500})},
	})
	require.NoError(t, err)
	require.Len(t, bt.Jobs, 2)
	member := bt.Jobs[1].ID
	_, err = c.Cancel(ctx, member)
	require.NoError(t, err)
	var b *bgclient.Batch
	testenv.Eventually(t, 60*time.Second, "the batch to join", func() bool {
		b, err = c.GetBatch(ctx, bt.BatchID)
		require.NoError(t, err)
		return b.Joined
	})
	require.Equal(t, map[string]int{"completed": 1, "failed": 0, "cancelled": 1}, b.Counts)
	_, err = c.Retry(ctx, member, false)
	require.NoError(t, err)
	require.Equal(t, "completed", ended(member).Status)
	b, err = c.GetBatch(ctx, bt.BatchID)
	require.NoError(t, err)
	require.Equal(t, map[string]int{"completed": 2, "failed": 0, "cancelled": 0}, b.Counts)
	require.Equal(t, 2, b.Settled)
	require.True(t, b.Joined)
}
