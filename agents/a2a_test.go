package agents

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/work"
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
	require.True(t, work.IsRetryable(err))
}

func TestSignVerifies(t *testing.T) {
	t.Parallel()
	// HMAC-SHA256 of "body" under "key", computed independently.
	require.Equal(t, "sha256=515aae133b435d4000956731f68ae5cf5eb85d4f0dc6a546d2bfcd3595ec1ae1", Sign("key", []byte("body")))
}

// A stream that breaks after the agent accepted the turn (its task came
// through) is not sent again: the task is followed with tasks/get.
func TestBrokenStreamAfterAcceptanceFollowsTheTask(t *testing.T) {
	t.Parallel()
	agent := &slowAgent{doneAfter: 0}
	mux := http.NewServeMux()
	var url string
	mux.HandleFunc("/.well-known/agent-card.json", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "broken", "url": url, "version": "1", "protocolVersion": "0.3.0",
			"capabilities": map[string]any{"streaming": true}, "defaultInputModes": []string{"text"}, "defaultOutputModes": []string{"text"}, "skills": []any{}})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &req)
		if req.Method != "message/stream" {
			r.Body = io.NopCloser(bytes.NewReader(raw))
			agent.ServeHTTP(w, r)
			return
		}
		agent.mu.Lock()
		agent.calls = append(agent.calls, req.Method)
		agent.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		task := map[string]any{"kind": "task", "id": "task-1", "contextId": "background:bg-0123456789ab", "status": map[string]any{"state": "submitted"}}
		first, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": req.ID, "result": task})
		fmt.Fprintf(w, "data: %s\n\ndata: {\"jsonrpc\":\"2.0\",\"res", first) // the connection drops mid-event
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	url = srv.URL
	r := NewA2A(netguard.NewAllow([]string{"127.0.0.1"}))
	r.PollMin, r.PollMax = 10*time.Millisecond, 20*time.Millisecond
	tr := turn(srv.URL)
	tr.Progress = func(string, string) {}
	report, err := r.RunTurn(context.Background(), tr)
	require.NoError(t, err)
	require.Equal(t, "the long report", report)
	require.Equal(t, []string{"message/stream", "tasks/get"}, agent.methods(), "the turn went out once")
}

// Lines of a stream are read whole up to the cap, and refused past it.
func TestStreamLinesUpToTheCap(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 200<<10)
	r := bufio.NewReaderSize(strings.NewReader(long+"\nnext\n"), 16)
	line, err := readLine(r, 1<<20)
	require.NoError(t, err)
	require.Len(t, line, len(long))
	_, err = readLine(bufio.NewReaderSize(strings.NewReader(long+"\n"), 16), 100<<10)
	require.ErrorIs(t, err, ErrReportTooLarge)
}
