package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

func waitJob(session string, delayMS, waitMS int) map[string]any {
	j := echoJob(session, "waited", false)
	j["work"].(map[string]any)["args"].(map[string]any)["delay_ms"] = delayMS
	j["wait_ms"] = waitMS
	return j
}

// wait_ms: a job that ends within the budget comes back whole (200) and is
// never drained or resumed; one that does not comes back 202 at the end of
// the budget and is announced as usual; a client that hangs up loses
// nothing.
func TestSpawnWithATimeBudget(t *testing.T) {
	t.Parallel()
	hook, _, c := serveWithWebhook(t, "k")

	// The margins are wide so a loaded machine cannot blur them: back on
	// completion, well before a 20 s budget ends; back at a 500 ms budget,
	// well before its 8 s job ends.
	start := time.Now()
	code, row := c.do("POST", "/v1/jobs", waitJob("chat-w", 100, 20000))
	require.Equal(t, http.StatusOK, code, "%v", row)
	require.Less(t, time.Since(start), 10*time.Second, "back when the job ended, not at the end of the budget")
	require.Equal(t, "completed", row["status"])
	require.Equal(t, "waited", row["result"])
	require.Equal(t, true, row["notified"])
	fast := row["id"].(string)

	start = time.Now()
	code, sp := c.do("POST", "/v1/jobs", waitJob("chat-w", 8000, 500))
	took := time.Since(start)
	require.Equal(t, http.StatusAccepted, code, "%v", sp)
	require.GreaterOrEqual(t, took, 500*time.Millisecond)
	require.Less(t, took, 4*time.Second, "back at the 500 ms budget, not when the job ended")
	slow := sp["id"].(string)

	// A client that hangs up mid-wait: the job carries on and is announced once.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/jobs", strings.NewReader(`{"origin_session":"chat-w","kind":"work","description":"hung up","wait_ms":60000,"work":{"type":"echo","args":{"text":"after","delay_ms":1500}}}`))
	req.Header.Set("Content-Type", "application/json")
	_, err := http.DefaultClient.Do(req)
	cancel()
	require.Error(t, err, "the client gave up")

	got := map[string]bool{}
	testenv.Eventually(t, 60*time.Second, "both background jobs announced and drained", func() bool {
		_, d := c.do("POST", "/v1/sessions/chat-w/drain", nil)
		for _, n := range d["notifications"].([]any) {
			got[n.(map[string]any)["job_id"].(string)] = true
		}
		return len(got) == 2
	})
	require.True(t, got[slow])
	require.False(t, got[fast], "the waited-for result is never drained")
	time.Sleep(time.Second)
	triggers := map[string]int{}
	for _, b := range hook.all() {
		triggers[b["trigger"].(string)]++
	}
	require.Equal(t, 1, triggers[slow], "announced once")
	require.Zero(t, triggers[fast], "no resume for a result the caller already has")
	require.Len(t, triggers, 2, "the hung-up job is announced once too: %v", triggers)
	for id, n := range triggers {
		require.Equal(t, 1, n, id)
	}
	_, d := c.do("POST", "/v1/sessions/chat-w/drain", nil)
	require.Empty(t, d["notifications"])
}
