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

// A job that starts later, as an agent asks for one (a follow-up in an
// hour): through the Go client, the REST API and MCP it is answered
// "scheduled" with its time, waits queued with run_at on its row, then
// runs and is drained once like any other; bad values are a 400 naming
// start_in_s, and a batch's jobs, which start together, refuse it.
func TestAJobThatStartsLater(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_AUTO_RESUME": "false"})
	c := bgclient.New(base, "ka")
	ctx := context.Background()
	spawned := time.Now()
	sp, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-later", Kind: "work", Description: "Follow up",
		Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": "checked again"}}, StartInS: 2})
	require.NoError(t, err)
	require.Contains(t, sp.Message, "Background agent scheduled: "+sp.ID+", to start at ")
	j, err := c.Get(ctx, sp.ID)
	require.NoError(t, err)
	require.Equal(t, "queued", j.Status)
	require.NotNil(t, j.RunAt)
	require.WithinDuration(t, spawned.Add(2*time.Second), *j.RunAt, time.Second)
	testenv.Eventually(t, 30*time.Second, "the job to run at its time", func() bool {
		j, err = c.Get(ctx, sp.ID)
		require.NoError(t, err)
		return j.Status == "completed"
	})
	require.False(t, j.StartedAt.Before(j.RunAt.Add(-time.Second)), "started %s, due %s", j.StartedAt, j.RunAt)
	ns, err := c.Drain(ctx, "chat-later", "")
	require.NoError(t, err)
	require.Len(t, ns, 1)
	require.Contains(t, ns[0].Text, "checked again")

	rest := client{t: t, base: base, key: "ka"}
	work := map[string]any{"type": "echo", "args": map[string]any{"text": "x"}}
	for _, bad := range []map[string]any{
		{"start_in_s": -1}, {"start_in_s": 2592001}, {"start_in_s": "soon"}, {"start_in_s": 1.5},
		{"start_in_s": 60, "wait_ms": 1000}, {"start_in_s": 60, "turn_id": "t1"},
	} {
		body := map[string]any{"origin_session": "chat-later", "kind": "work", "work": work}
		for k, v := range bad {
			body[k] = v
		}
		code, e := rest.do("POST", "/v1/jobs", body)
		require.Equal(t, http.StatusBadRequest, code, "%v", bad)
		require.Equal(t, "start_in_s", e["error"].(map[string]any)["field"], "%v", bad)
	}
	code, e := rest.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-later",
		"jobs": []any{map[string]any{"kind": "work", "work": work, "start_in_s": 60}}})
	require.Equal(t, http.StatusBadRequest, code, "%v", e)

	s := mcpSession(t, base, "ka")
	text, out, isErr := callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-later", "kind": "work",
		"work": work, "start_in_s": 3600})
	require.False(t, isErr, text)
	require.Contains(t, text, "Background agent scheduled: ")
	status, _, isErr := callTool(t, s, "background_status", map[string]any{"job_id": out["job_id"]})
	require.False(t, isErr, status)
	require.Contains(t, status, `"run_at"`)
	// The console shows when it starts.
	_, home := getPage(t, "GET", base+"/", signIn(t, base, "ka"), "")
	require.Regexp(t, `class="run-at">starts <time datetime="[^"]+">`, home)
	text, isErr = callText(t, s, "spawn_background", map[string]any{"origin_session": "chat-later", "kind": "work",
		"work": work, "start_in_s": 60, "wait_ms": 1000})
	require.True(t, isErr)
	require.Contains(t, text, "start_in_s")
}
