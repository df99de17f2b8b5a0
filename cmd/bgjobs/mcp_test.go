package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// bearer adds a key to every request of an MCP client.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

func mcpSession(t *testing.T, base, key string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: bearer{key: key, next: http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "bgjobs-test"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func callText(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n"), res.IsError
}

// The go-sdk MCP client connects over HTTP with an agent key, lists the
// tools, spawns, drains and recalls.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_AUTO_RESUME": "false"})
	c := client{t: t, base: base, key: "ka"}
	code, _ := c.do("PUT", "/v1/agents/alpha", map[string]any{"a2a_url": a2aURL,
		"subagent_types": map[string]string{"researcher": "You research.", "writer": "You write."}})
	require.Equal(t, http.StatusOK, code)

	resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no key, no MCP")

	s := mcpSession(t, base, "ka")
	tools, err := s.ListTools(context.Background(), nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tl := range tools.Tools {
		byName[tl.Name] = tl
	}
	for _, name := range []string{"spawn_background", "task_batch", "stop_task", "background_status", "drain_notifications", "memory_recall"} {
		require.Contains(t, byName, name)
	}
	spawn := byName["spawn_background"]
	require.Contains(t, spawn.Description, "do NOT poll")
	schema, _ := json.Marshal(spawn.InputSchema)
	require.Contains(t, string(schema), `"enum":["researcher","writer"]`)

	out, isErr := callText(t, s, "spawn_background", map[string]any{"origin_session": "chat-mcp", "description": "Look into it",
		"subagent_type": "researcher", "prompt": "quetzal migration"})
	require.False(t, isErr, out)
	require.Contains(t, out, "do NOT poll")
	id := out[strings.Index(out, "bg-") : strings.Index(out, "bg-")+15]
	c.waitStatus(id, "completed")

	out, isErr = callText(t, s, "spawn_background", map[string]any{"origin_session": "chat-mcp", "description": "x",
		"subagent_type": "painter", "prompt": "p"})
	require.True(t, isErr, "a subagent type outside the roster is refused: %s", out)

	out, _ = callText(t, s, "drain_notifications", map[string]any{"session": "chat-mcp"})
	require.Contains(t, out, "<task-id>"+id+"</task-id>")
	out, _ = callText(t, s, "drain_notifications", map[string]any{"session": "chat-mcp"})
	require.Equal(t, "No new background results.", out)

	testenv.Eventually(t, 10*time.Second, "the report in memory", func() bool {
		out, _ := callText(t, s, "memory_recall", map[string]any{"query": "quetzal"})
		return strings.Contains(out, id)
	})
	out, _ = callText(t, s, "background_status", map[string]any{"job_id": id})
	require.Contains(t, out, `"status": "completed"`)
}
