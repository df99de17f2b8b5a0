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

// A job with its own time limit, as an agent sets one ("give up on this
// after a minute"): through the Go client, the REST API (a spawn and a
// batch member) and MCP, a job that outruns it ends failed saying so and
// is drained like any other; bad values are a 400 naming timeout_s.
func TestAJobWithItsOwnTimeout(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_AUTO_RESUME": "false", "BGJOBS_TURN_TIMEOUT": "10m"})
	c := bgclient.New(base, "ka")
	ctx := context.Background()
	slow := &bgclient.Work{Type: "echo", Args: map[string]any{"text": "never", "delay_ms": 60000}}
	sp, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-t", Kind: "work", Description: "Bounded", Work: slow, TimeoutS: 1})
	require.NoError(t, err)
	rest := client{t: t, base: base, key: "ka"}
	_, bt := rest.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-t", "jobs": []any{
		map[string]any{"kind": "work", "description": "Bounded member", "timeout_s": 1, "work": map[string]any{"type": "echo", "args": map[string]any{"text": "never", "delay_ms": 60000}}},
		map[string]any{"kind": "work", "description": "Quick member", "timeout_s": 60, "work": map[string]any{"type": "echo", "args": map[string]any{"text": "quick"}}},
	}})
	members := bt["jobs"].([]any)
	require.Len(t, members, 2, "%v", bt)
	s := mcpSession(t, base, "ka")
	text, out, isErr := callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-t", "kind": "work", "description": "Bounded over MCP",
		"timeout_s": 1, "work": map[string]any{"type": "echo", "args": map[string]any{"text": "never", "delay_ms": 60000}}})
	require.False(t, isErr, text)

	ids := []string{sp.ID, members[0].(map[string]any)["id"].(string), out["job_id"].(string)}
	for _, id := range ids {
		var j *bgclient.Job
		testenv.Eventually(t, 30*time.Second, "the bounded job to end", func() bool {
			j, err = c.Get(ctx, id)
			require.NoError(t, err)
			return j.Status != "queued" && j.Status != "running"
		})
		require.Equal(t, "failed", j.Status, id)
		require.Equal(t, "timed out after 1s", *j.Error, id)
		require.Equal(t, 1, j.TimeoutS)
	}
	rest.waitStatus(members[1].(map[string]any)["id"].(string), "completed")
	ns, err := c.Drain(ctx, "chat-t", "")
	require.NoError(t, err)
	require.Len(t, ns, 4)
	status, _, isErr := callTool(t, s, "background_status", map[string]any{"job_id": ids[2]})
	require.False(t, isErr, status)
	require.Contains(t, status, "timed out after 1s")
	require.Contains(t, status, `"timeout_s": 1`)

	work := map[string]any{"type": "echo", "args": map[string]any{"text": "x"}}
	// The console's card of a job not yet ended shows its limit.
	code, later := rest.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-t", "kind": "work", "work": work, "timeout_s": 30, "start_in_s": 3600})
	require.Equal(t, http.StatusAccepted, code, "%v", later)
	_, home := getPage(t, "GET", base+"/", signIn(t, base, "ka"), "")
	require.Regexp(t, `id="job-`+later["id"].(string)+`"(?s:.*?)class="limit"[^>]*>limit 30 s<`, home)
	for _, bad := range []any{-1, 601, "soon", 1.5, 1e30} {
		code, e := rest.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-t", "kind": "work", "work": work, "timeout_s": bad})
		require.Equal(t, http.StatusBadRequest, code, "%v: %v", bad, e)
		require.Equal(t, "timeout_s", e["error"].(map[string]any)["field"], "%v", bad)
	}
	code, e := rest.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-t",
		"jobs": []any{map[string]any{"kind": "work", "work": work, "timeout_s": 601}, map[string]any{"kind": "work", "work": work}}})
	require.Equal(t, http.StatusAccepted, code, "%v", e)
	skipped := e["skipped"].([]any)
	require.Len(t, skipped, 1)
	require.Equal(t, "timeout_s", skipped[0].(map[string]any)["error"].(map[string]any)["field"])
	text, isErr = callText(t, s, "spawn_background", map[string]any{"origin_session": "chat-t", "kind": "work", "work": work, "timeout_s": 601})
	require.True(t, isErr)
	require.Contains(t, text, "timeout_s")
}
