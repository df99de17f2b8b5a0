package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bgclient "github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// An agent abandons a fan-out: one call stops the members still queued or
// running, the batch joins once with them counted cancelled, the agent is
// woken once, and each member is drained once; another agent's batch does
// not exist for it, and a second cancel stops nothing.
func TestCancelABatch(t *testing.T) {
	t.Parallel()
	a2aURL, agentLog := startAgent(t)
	// Slots for every member at once: the quick one must not queue behind
	// the long ones (their enqueue order is not the spec's).
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_RESUME_COALESCE": "0",
		"BGJOBS_WORK_CONCURRENCY": "40", "BGJOBS_WORK_SHARE": "40"})
	c := bgclient.New(base, "ka")
	ctx := context.Background()
	require.NoError(t, c.PutAgent(ctx, "alpha", bgclient.AgentConfig{A2AURL: a2aURL}))
	echo := func(args map[string]any) *bgclient.Work { return &bgclient.Work{Type: "echo", Args: args} }
	specs := []bgclient.SpawnRequest{{Kind: "work", Description: "quick", Work: echo(map[string]any{"text": "done"})}}
	for range 30 {
		specs = append(specs, bgclient.SpawnRequest{Kind: "work", Description: "long", Work: echo(map[string]any{"text": "never", "delay_ms": 120000})})
	}
	bt, err := c.Batch(ctx, "chat-cb", specs)
	require.NoError(t, err)
	require.Len(t, bt.Jobs, 31)
	testenv.Eventually(t, 60*time.Second, "the quick member to complete", func() bool {
		j, err := c.Get(ctx, bt.Jobs[0].ID)
		require.NoError(t, err)
		return j.Status == "completed"
	})

	_, _, err = bgclient.New(base, "kb").CancelBatch(ctx, bt.BatchID)
	require.ErrorIs(t, err, bgclient.ErrNotFound, "another agent's batch does not exist for it")
	b, n, err := c.CancelBatch(ctx, bt.BatchID)
	require.NoError(t, err)
	require.Equal(t, 30, n, "the members still queued or running")
	require.Equal(t, map[string]int{"completed": 1, "failed": 0, "cancelled": 30}, b.Counts)
	require.Equal(t, 31, b.Settled)
	require.True(t, b.Joined)
	require.False(t, b.Partial)
	for _, m := range bt.Jobs[1:] {
		j, err := c.Get(ctx, m.ID)
		require.NoError(t, err)
		require.Equal(t, "cancelled", j.Status)
		require.Equal(t, "cancelled with its batch "+bt.BatchID, *j.Error)
	}
	_, n, err = c.CancelBatch(ctx, bt.BatchID)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to stop")

	var joins int
	testenv.Eventually(t, 60*time.Second, "the join's resume", func() bool {
		joins = 0
		for _, r := range parseReceived(t, agentLog.String()) {
			if strings.HasPrefix(r.MessageID, "resume-"+bt.BatchID) {
				joins++
			}
		}
		return joins > 0
	})
	ns, err := c.Drain(ctx, "chat-cb", "")
	require.NoError(t, err)
	require.Len(t, ns, 31, "each member once")
	time.Sleep(time.Second) // a second resume would have been sent by now
	joins = 0
	for _, r := range parseReceived(t, agentLog.String()) {
		if strings.HasPrefix(r.MessageID, "resume-") {
			require.True(t, strings.HasPrefix(r.MessageID, "resume-"+bt.BatchID), "only the join wakes the agent: %s", r.MessageID)
			joins++
		}
	}
	require.Equal(t, 1, joins, "one resume for the whole batch")

	// The same over MCP, as an agent's model calls it.
	bt, err = c.Batch(ctx, "chat-cb", specs[1:3])
	require.NoError(t, err)
	s := mcpSession(t, base, "ka")
	text, out, isErr := callTool(t, s, "stop_batch", map[string]any{"batch_id": bt.BatchID})
	require.False(t, isErr, text)
	require.Equal(t, float64(2), out["cancelled"])
	require.Equal(t, map[string]any{"completed": float64(0), "failed": float64(0), "cancelled": float64(2)}, out["counts"])
	require.Contains(t, text, "2 jobs stopped")
	text, isErr = callText(t, s, "stop_batch", map[string]any{"batch_id": "bt-000000000000"})
	require.True(t, isErr, text)

	rest := client{t: t, base: base, key: "ka"}
	code, e := rest.do("POST", "/v1/batches/bt-zz/cancel", nil)
	require.Equal(t, http.StatusBadRequest, code, "%v", e)
	require.Equal(t, map[string]any{"code": "invalid_argument", "field": "id", "message": "batch ids look like bt-0123456789ab"}, e["error"])
	code, e = rest.do("POST", "/v1/batches/bt-000000000000/cancel", nil)
	require.Equal(t, http.StatusNotFound, code, "%v", e)
	require.Equal(t, map[string]any{"code": "not_found", "message": "no batch bt-000000000000"}, e["error"])
}
