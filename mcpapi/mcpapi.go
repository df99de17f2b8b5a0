// Package mcpapi serves bgjobs to MCP clients (streamable HTTP): the tools
// an agent uses to fire background work, stop it, read its status, drain
// and acknowledge its results and recall its memory. It runs behind the
// HTTP API's auth: the same keys, the same tenancy.
package mcpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
)

// Recaller searches an agent's memory.
type Recaller interface {
	Recall(ctx context.Context, r search.RecallRequest) (*search.RecallResult, error)
}

// Handler returns the /mcp endpoint. Each MCP session gets a server built
// for its agent, so spawn_background's subagent_type lists that agent's
// roster; the session stays bound to the agent that opened it.
func Handler(m *tasks.Manager, mem Recaller, open bool) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		agent, ok := handlers.CallerAgent(r.Context())
		if !ok {
			return nil
		}
		return NewServer(r.Context(), m, mem, agent)
	}, nil)
	if open {
		return h
	}
	// The API's middleware has already checked the key; this hands the
	// agent to the SDK so a session cannot be taken over by another key.
	verify := func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		agent, ok := handlers.CallerAgent(r.Context())
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: agent, Expiration: time.Now().Add(24 * time.Hour)}, nil
	}
	return auth.RequireBearerToken(verify, nil)(h)
}

// paramNames maps the REST names an error may carry to the tool parameter
// the model sent, so "field q" reads "field query".
var paramNames = map[string]string{"q": "query", "id": "job_id"}

// toolError turns a bgjobs error into a tool result the model can read and
// correct, rather than a protocol failure.
func toolError(err error) *mcp.CallToolResult {
	var e *bgjobs.Error
	if errors.As(err, &e) {
		named := *e
		if p, ok := paramNames[e.Field]; ok {
			named.Field = p
		}
		err = &named
	}
	r := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
	r.IsError = true
	return r
}

// answer is what a tool returns: structured output, and the text a model
// reads (the output as JSON when empty).
type answer[Out any] struct {
	out  Out
	text string
}

// addTool registers a tool whose output schema is derived from Out. A
// handler's error becomes an error result with no structured content (the
// SDK would otherwise send a zero Out, which reads like a real answer).
func addTool[In, Out any](s *mcp.Server, t *mcp.Tool, h func(context.Context, *mcp.CallToolRequest, In) (answer[Out], error)) {
	schema, err := jsonschema.For[Out](nil)
	if err != nil {
		panic(err) // a programming error in an output type, caught by every test
	}
	t.OutputSchema = schema
	mcp.AddTool(s, t, func(ctx context.Context, req *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		a, err := h(ctx, req, in)
		if err != nil {
			return toolError(err), nil, nil
		}
		text := a.text
		if text == "" {
			b, _ := json.MarshalIndent(a.out, "", "  ")
			text = string(b)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, a.out, nil
	})
}

func yes() *bool { t := true; return &t }
func no() *bool  { f := false; return &f }
