package agents

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/tasks"
)

// slowAgent speaks just enough A2A JSON-RPC to answer message/send with a
// task that is still working, and to report it on tasks/get: the shape of
// an agent that runs long turns asynchronously. It records every method.
type slowAgent struct {
	mu        sync.Mutex
	calls     []string
	doneAfter int // tasks/get calls before the task completes; <0: never
	gets      int
}

func (s *slowAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ID     any    `json:"id"`
		Method string `json:"method"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	s.mu.Lock()
	s.calls = append(s.calls, req.Method)
	state := "working"
	if req.Method == "tasks/get" {
		s.gets++
		if s.doneAfter >= 0 && s.gets > s.doneAfter {
			state = "completed"
		}
	}
	if req.Method == "tasks/cancel" {
		state = "canceled"
	}
	s.mu.Unlock()
	task := map[string]any{"kind": "task", "id": "task-1", "contextId": "background:bg-0123456789ab",
		"status": map[string]any{"state": state}}
	if state == "completed" {
		task["artifacts"] = []any{map[string]any{"artifactId": "a1", "parts": []any{map[string]any{"kind": "text", "text": "the long report"}}}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": task})
}

func (s *slowAgent) methods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func turn(url string) bgjobs.Turn {
	return bgjobs.Turn{AgentURL: url, JobID: "bg-0123456789ab", OriginSession: "chat-1", Prompt: "go"}
}

func TestTurnFollowsATaskUntilItEnds(t *testing.T) {
	t.Parallel()
	agent := &slowAgent{doneAfter: 2}
	srv := httptest.NewServer(agent)
	defer srv.Close()
	r := NewA2A(netguard.NewAllow([]string{"127.0.0.1"}))
	r.PollMin, r.PollMax = 10*time.Millisecond, 20*time.Millisecond
	report, err := r.RunTurn(context.Background(), turn(srv.URL))
	require.NoError(t, err)
	require.Equal(t, "the long report", report)
	require.Equal(t, []string{"message/send", "tasks/get", "tasks/get", "tasks/get"}, agent.methods())
}

func TestTurnPastItsDeadlineIsCancelledAtTheAgent(t *testing.T) {
	t.Parallel()
	agent := &slowAgent{doneAfter: -1}
	srv := httptest.NewServer(agent)
	defer srv.Close()
	r := NewA2A(netguard.NewAllow([]string{"127.0.0.1"}))
	r.PollMin, r.PollMax = 10*time.Millisecond, 20*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := r.RunTurn(ctx, turn(srv.URL))
	require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	calls := agent.methods()
	require.Equal(t, "tasks/cancel", calls[len(calls)-1], "the agent is told to stop")
}

func TestTransportFailureIsRetryable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer srv.Close()
	_, err := NewA2A(netguard.NewAllow([]string{"127.0.0.1"})).RunTurn(context.Background(), turn(srv.URL))
	require.Error(t, err)
	require.True(t, tasks.IsRetryable(err))
}

func TestSignVerifies(t *testing.T) {
	t.Parallel()
	// HMAC-SHA256 of "body" under "key", computed independently.
	require.Equal(t, "sha256=515aae133b435d4000956731f68ae5cf5eb85d4f0dc6a546d2bfcd3595ec1ae1", Sign("key", []byte("body")))
}
