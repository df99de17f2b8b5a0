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
}
