package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// One tenant's agent accepts every turn and never answers. Over HTTP, with
// the default cap (3) and share (2), it holds two slots; another tenant's
// turn still runs on a real A2A agent at once instead of waiting the silent
// turns' 30 minutes out.
func TestASilentAgentCannotStarveAnother(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	}))
	t.Cleanup(silent.Close)
	t.Cleanup(func() { close(hang) })
	goodURL, _ := startAgent(t)
	c := client{t: t, base: startServe(t, map[string]string{"BGJOBS_ADMIN_KEY": "admin-key"}), key: "admin-key"}
	for name, url := range map[string]string{"silent": silent.URL + "/a2a", "good": goodURL} {
		code, body := c.do("PUT", "/v1/agents/"+name, map[string]any{"a2a_url": url})
		require.Equal(t, http.StatusOK, code, "%v", body)
	}
	spawn := func(agent string) string {
		c := c
		c.as = agent
		code, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-1", "kind": "turn", "description": "research", "prompt": "go"})
		require.Equal(t, http.StatusAccepted, code, "%v", j)
		return j["id"].(string)
	}
	status := func(agent, id string) string {
		c := c
		c.as = agent
		_, j := c.do("GET", "/v1/jobs/"+id, nil)
		return j["status"].(string)
	}
	var silentIDs []string
	for range 5 {
		silentIDs = append(silentIDs, spawn("silent"))
	}
	running := func() int {
		n := 0
		for _, id := range silentIDs {
			if status("silent", id) == "running" {
				n++
			}
		}
		return n
	}
	testenv.Eventually(t, 30*time.Second, "the silent agent to hold its share", func() bool { return running() == 2 })

	start := time.Now()
	id := spawn("good")
	testenv.Eventually(t, 30*time.Second, "the other tenant's turn to complete", func() bool { return status("good", id) == "completed" })
	t.Logf("the other tenant's turn completed %s after its spawn", time.Since(start).Round(time.Millisecond))
	good := c
	good.as = "good"
	_, j := good.do("GET", "/v1/jobs/"+id, nil)
	require.Contains(t, j["result"], "Report on: go", "the other tenant got its agent's report")
	require.Equal(t, 2, running(), "the silent agent still holds its share, no more")
}
