package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// A 1 MiB report from a streaming A2A agent completes, is cut in the
// drain with a pointer, and is recallable, the agent called once; a report
// over the 4 MiB cap fails the job once, with a clear error, the agent
// called once.
func TestLongReportsFromAStreamingAgent(t *testing.T) {
	t.Parallel()
	a2aURL, agentLog := startAgent(t)
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})}
	code, body := c.do("PUT", "/v1/agents/default", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code, "%v", body)

	spawn := func(prompt string) string {
		code, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-long", "prompt": prompt})
		require.Equal(t, http.StatusAccepted, code, "%v", j)
		return j["id"].(string)
	}
	long := spawn("[long 1048576] [progress 2] audit the zanzibar ledger")
	huge := spawn("[long 5000000] audit everything")

	var job map[string]any
	testenv.Eventually(t, 90*time.Second, "the 1 MiB turn to complete", func() bool {
		_, job = c.do("GET", "/v1/jobs/"+long, nil)
		return job["status"] == "completed" || job["status"] == "failed"
	})
	require.Equal(t, "completed", job["status"], "%v", job["error"])
	require.Len(t, job["result"], 1048576)
	failed := c.waitStatus(huge, "failed")
	require.Contains(t, failed["error"], "over the 4 MiB")
	require.EqualValues(t, 1, failed["attempts"], "failed once, not re-run")

	testenv.Eventually(t, 30*time.Second, "the report to be searchable", func() bool {
		_, res := c.do("GET", "/v1/recall?q="+url.QueryEscape("zanzibar"), nil)
		hits, _ := res["hits"].([]any)
		return len(hits) > 0 && hits[0].(map[string]any)["job_id"] == long
	})
	_, res := c.do("POST", "/v1/sessions/chat-long/drain", nil)
	var text string
	for _, n := range res["notifications"].([]any) {
		if n := n.(map[string]any); n["job_id"] == long {
			require.Equal(t, true, n["truncated"])
			text = n["text"].(string)
		}
	}
	require.Contains(t, text, "<full-report>")
	require.Less(t, len(text), 10_000, "the notification stays short")

	calls := map[string]int{}
	for _, r := range parseReceived(t, agentLog.String()) {
		calls[strings.TrimPrefix(r.ContextID, "background:")]++
	}
	require.Equal(t, 1, calls[long], "the agent ran the long turn once")
	require.Equal(t, 1, calls[huge], "the agent ran the oversize turn once")
}
