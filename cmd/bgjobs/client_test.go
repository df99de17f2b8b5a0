package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bgclient "github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// The Go client end to end, as a Go agent uses it: the example agent, told
// to drain on every resume, gets its result through the client the moment
// the resume arrives.
func TestGoClientAndADrainingAgent(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka"})
	c := bgclient.New(base, "ka")
	a2aURL, log := startDrainingAgent(t, c)
	ctx := context.Background()
	require.NoError(t, c.PutAgent(ctx, "alpha", bgclient.AgentConfig{A2AURL: a2aURL}))

	sp, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-c", Kind: "work", Description: "hello",
		Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": "from the client"}}})
	require.NoError(t, err)
	require.Contains(t, sp.Message, "do NOT poll")

	testenv.Eventually(t, 10*time.Second, "the agent to drain on its resume", func() bool {
		return strings.Contains(log.String(), "from the client")
	})
	var line struct {
		Session       string                  `json:"drained_session"`
		Notifications []bgclient.Notification `json:"notifications"`
	}
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.Contains(l, "drained_session") {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.Equal(t, "chat-c", line.Session)
	require.Len(t, line.Notifications, 1)
	require.Equal(t, sp.ID, line.Notifications[0].JobID)

	ns, err := c.Drain(ctx, "chat-c", "")
	require.NoError(t, err)
	require.Empty(t, ns, "already handed over, once")
	j, err := c.Get(ctx, sp.ID)
	require.NoError(t, err)
	require.True(t, j.Notified)

	require.NoError(t, c.Busy(ctx, "chat-c", time.Minute))
	require.NoError(t, c.Idle(ctx, "chat-c"))
	_, err = c.Get(ctx, "bg-000000000000")
	var apiErr *bgclient.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 404, apiErr.Status)
	require.Equal(t, "not_found", apiErr.Code)
	jobs, _, err := c.List(ctx, "chat-c", "", 10, "")
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	// A batch through the client completes and joins.
	echo := func(text string) bgclient.SpawnRequest {
		return bgclient.SpawnRequest{Kind: "work", Description: text, Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": text}}}
	}
	res, err := c.Batch(ctx, "chat-batch", []bgclient.SpawnRequest{echo("one"), echo("two")})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.Empty(t, res.Skipped)
	testenv.Eventually(t, 15*time.Second, "the batch to join", func() bool {
		b, err := c.GetBatch(ctx, res.BatchID)
		require.NoError(t, err)
		return b.Joined
	})
	b, err := c.GetBatch(ctx, res.BatchID)
	require.NoError(t, err)
	require.Equal(t, 2, b.Counts["completed"])
	agent, err := c.GetAgent(ctx, "alpha")
	require.NoError(t, err)
	require.Equal(t, a2aURL, agent.A2AURL)
	waited, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-w", Kind: "work", Description: "waited", WaitMS: 10000,
		Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": "right away"}}})
	require.NoError(t, err)
	require.Equal(t, "completed", waited.Status)
	require.Equal(t, "right away", *waited.Result)
}
