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

// callTool calls a tool and returns its text, its structured content
// (decoded) and whether it is an error result.
func callTool(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) (string, map[string]any, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	var out map[string]any
	if res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		require.NoError(t, json.Unmarshal(b, &out))
	}
	return strings.Join(parts, "\n"), out, res.IsError
}

func callText(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	text, _, isErr := callTool(t, s, tool, args)
	return text, isErr
}

// schemaAt walks a JSON schema's properties.
func schemaAt(t *testing.T, schema any, path ...string) map[string]any {
	t.Helper()
	b, _ := json.Marshal(schema)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, p := range path {
		m = m["properties"].(map[string]any)[p].(map[string]any)
	}
	return m
}

// The go-sdk MCP client connects over HTTP with an agent key and uses every
// tool the way a model would: each answers with structured content, status
// never hands over an undrained result, a drain repeated with its key gets
// the same results, work jobs take object args, errors name the parameter.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_AUTO_RESUME": "false", "BGJOBS_TURN_WINDOW": "1m"})
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
		require.NotNil(t, tl.OutputSchema, "%s has an output schema", tl.Name)
		require.NotNil(t, tl.Annotations, "%s has annotations", tl.Name)
	}
	for _, name := range []string{"spawn_background", "task_batch", "stop_task", "background_status",
		"drain_notifications", "acknowledge_result", "memory_recall", "retry_task", "stop_batch"} {
		require.Contains(t, byName, name)
	}
	require.True(t, byName["background_status"].Annotations.ReadOnlyHint)
	require.True(t, byName["memory_recall"].Annotations.ReadOnlyHint)
	require.True(t, *byName["stop_task"].Annotations.DestructiveHint)
	spawn := byName["spawn_background"]
	require.Contains(t, spawn.Description, "do NOT poll")
	schema, _ := json.Marshal(spawn.InputSchema)
	require.Contains(t, string(schema), `"enum":["researcher","writer"]`)
	require.Equal(t, "object", schemaAt(t, spawn.InputSchema, "work", "args")["type"], "work.args is an object, not bytes")
	item := schemaAt(t, byName["task_batch"].InputSchema, "jobs")["items"].(map[string]any)["properties"].(map[string]any)
	require.Equal(t, []any{"researcher", "writer"}, item["subagent_type"].(map[string]any)["enum"], "batch items list the roster")
	require.NotContains(t, item, "origin_session", "batch items take no origin_session")
	schema, _ = json.Marshal(byName["drain_notifications"].InputSchema)
	require.Contains(t, string(schema), "idempotency_key")

	// A turn: the id is a field; status shows no result until it is drained.
	out, st, isErr := callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-mcp", "description": "Look into it",
		"subagent_type": "researcher", "prompt": "quetzal migration"})
	require.False(t, isErr, out)
	require.Contains(t, out, "do NOT poll")
	id, _ := st["job_id"].(string)
	require.True(t, strings.HasPrefix(id, "bg-"), "%v", st)
	c.waitStatus(id, "completed")
	out, st, _ = callTool(t, s, "background_status", map[string]any{"job_id": id})
	job := st["jobs"].([]any)[0].(map[string]any)
	require.Equal(t, "completed", job["status"])
	require.Nil(t, job["result"], "status never hands over an undrained result")
	require.NotContains(t, out, "Report on:", "nor in its text")
	require.Contains(t, job["note"], "drain_notifications")

	// A work job with object args, over MCP.
	out, st, isErr = callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-mcp", "kind": "work",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "hello from echo"}}})
	require.False(t, isErr, out)
	echo := st["job_id"].(string)
	require.NotNil(t, st["batch_id"], "an MCP spawn joins its session's turn")
	c.waitStatus(echo, "completed")
	_, st, _ = callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-turn", "kind": "work",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "first of the turn"}}})
	turn := st["batch_id"]
	_, st, _ = callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-turn", "kind": "work",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "same turn"}}})
	require.Equal(t, turn, st["batch_id"], "spawns of one MCP session within the window are one turn")
	_, st, _ = callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-turn", "kind": "work", "turn_id": "other",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "another turn"}}})
	require.NotEqual(t, turn, st["batch_id"], "unless turn_id says otherwise")

	out, isErr = callText(t, s, "spawn_background", map[string]any{"origin_session": "chat-mcp", "description": "x",
		"subagent_type": "painter", "prompt": "p"})
	require.True(t, isErr, "a subagent type outside the roster is refused: %s", out)

	// The drain: both results, once; a repeat with the key gets them again.
	out, st, _ = callTool(t, s, "drain_notifications", map[string]any{"session": "chat-mcp", "idempotency_key": "d-1"})
	require.Contains(t, out, "<task-id>"+id+"</task-id>")
	require.Contains(t, out, "hello from echo")
	require.Len(t, st["notifications"], 2)
	again, _ := callText(t, s, "drain_notifications", map[string]any{"session": "chat-mcp", "idempotency_key": "d-1"})
	require.Equal(t, out, again, "a repeated key returns the same notifications")
	out, _ = callText(t, s, "drain_notifications", map[string]any{"session": "chat-mcp", "idempotency_key": "d-2"})
	require.Equal(t, "No new background results.", out)
	_, st, _ = callTool(t, s, "background_status", map[string]any{"job_id": id})
	job = st["jobs"].([]any)[0].(map[string]any)
	require.Equal(t, true, job["delivered"])
	require.Contains(t, job["result"], "quetzal", "once handed over, status shows the result")

	// Ack: a result consumed another way is not drained.
	_, st, _ = callTool(t, s, "spawn_background", map[string]any{"origin_session": "chat-ack", "kind": "work",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "seen elsewhere"}}})
	acked := st["job_id"].(string)
	c.waitStatus(acked, "completed")
	_, st, isErr = callTool(t, s, "acknowledge_result", map[string]any{"job_id": acked})
	require.False(t, isErr)
	require.Equal(t, true, st["acknowledged"])
	out, _ = callText(t, s, "drain_notifications", map[string]any{"session": "chat-ack"})
	require.Equal(t, "No new background results.", out)

	// A batch: items carry no origin_session; ids come back as fields.
	out, st, isErr = callTool(t, s, "task_batch", map[string]any{"origin_session": "chat-batch", "jobs": []any{
		map[string]any{"subagent_type": "researcher", "prompt": "first [sleep 30s]"},
		map[string]any{"kind": "work", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "second"}}},
	}})
	require.False(t, isErr, out)
	require.True(t, strings.HasPrefix(st["batch_id"].(string), "bt-"), "%v", st)
	members := st["job_ids"].([]any)
	require.Len(t, members, 2)

	// Stop: the slow member ends cancelled.
	_, st, isErr = callTool(t, s, "stop_task", map[string]any{"job_id": members[0]})
	require.False(t, isErr)
	require.Equal(t, "cancelled", st["status"])

	// A session's list, and errors that name the tool's own parameters.
	_, st, _ = callTool(t, s, "background_status", map[string]any{"session": "chat-batch"})
	require.Len(t, st["jobs"], 2)
	out, isErr = callText(t, s, "background_status", map[string]any{"job_id": "nope"})
	require.True(t, isErr)
	require.Contains(t, out, "field job_id")
	out, isErr = callText(t, s, "memory_recall", map[string]any{"query": `"unclosed`})
	require.True(t, isErr)
	require.Contains(t, out, "field query")

	testenv.Eventually(t, 10*time.Second, "the report in memory", func() bool {
		_, st, _ := callTool(t, s, "memory_recall", map[string]any{"query": "quetzal"})
		b, _ := json.Marshal(st["hits"])
		return strings.Contains(string(b), id)
	})
}

// The MCP transport's own refusals (the SDK writes them as plain text) reach
// the caller in the API's JSON error shape with their status, and a real
// client still completes a call through the same endpoint.
func TestMCPTransportErrorsAreJSON(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})
	both := "application/json, text/event-stream"
	for _, try := range []struct {
		desc, method, host, contentType, accept, session, body string
		status                                                 int
		code                                                   string
	}{
		{desc: "malformed JSON-RPC", method: "POST", contentType: "application/json", accept: both, body: "{bad", status: 400, code: "invalid_argument"},
		{desc: "not JSON", method: "POST", contentType: "text/plain", accept: both, body: "{}", status: 415, code: "unsupported_media_type"},
		{desc: "unknown session", method: "POST", contentType: "application/json", accept: both, session: "nope",
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, status: 404, code: "not_found"},
		{desc: "GET without a session", method: "GET", accept: "text/event-stream", status: 400, code: "invalid_argument"},
		{desc: "a foreign Host on loopback (DNS rebinding)", method: "POST", host: "rebind.example", contentType: "application/json", accept: both,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, status: 403, code: "forbidden"},
	} {
		req, err := http.NewRequest(try.method, base+"/mcp", strings.NewReader(try.body))
		require.NoError(t, err)
		if try.host != "" {
			req.Host = try.host // the connection still goes to loopback
		}
		for k, v := range map[string]string{"Content-Type": try.contentType, "Accept": try.accept, "Mcp-Session-Id": try.session} {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err, try.desc)
		var body struct {
			Error struct{ Code, Message string }
		}
		decodeErr := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		require.Equal(t, try.status, resp.StatusCode, try.desc)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), try.desc)
		require.NoError(t, decodeErr, try.desc)
		require.Equal(t, try.code, body.Error.Code, try.desc)
		require.NotEmpty(t, body.Error.Message, try.desc)
	}

	s := mcpSession(t, base, "")
	text, isErr := callText(t, s, "spawn_background", map[string]any{"origin_session": "chat-mcp-json", "kind": "work",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "through"}}, "wait_ms": 5000})
	require.False(t, isErr, text)
	require.Contains(t, text, "through")
}

// An MCP session stays its agent's: another agent's key sending its
// Mcp-Session-Id is refused (403, in the API's JSON shape) and acts on
// nothing, while the owner's calls go on.
func TestMCPSessionBelongsToItsAgent(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_AUTO_RESUME": "false"})
	s := mcpSession(t, base, "ka")
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"background_status","arguments":{"session":"chat-1"}}}`
	req, err := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer kb")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", s.ID())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var e struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Equal(t, "forbidden", e.Error.Code)

	text, isErr := callText(t, s, "background_status", map[string]any{"session": "chat-1"})
	require.False(t, isErr, text)
}
