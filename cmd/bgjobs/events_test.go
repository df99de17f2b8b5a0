package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type sseEvent struct {
	ID, Type string
	Data     map[string]any
}

// sseRead connects to /v1/events and sends what arrives until ctx ends.
func sseRead(t *testing.T, ctx context.Context, base, lastID string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/events", nil)
	require.NoError(t, err)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan sseEvent, 100)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var e sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				e.ID = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				e.Type = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e.Data)
			case line == "" && e.ID != "":
				out <- e
				e = sseEvent{}
			}
		}
	}()
	return out
}

func collect(t *testing.T, ch <-chan sseEvent, n int) []sseEvent {
	t.Helper()
	var got []sseEvent
	timeout := time.After(15 * time.Second)
	for len(got) < n {
		select {
		case e, ok := <-ch:
			require.True(t, ok, "stream ended after %d events", len(got))
			got = append(got, e)
		case <-timeout:
			t.Fatalf("got %d of %d events", len(got), n)
		}
	}
	return got
}

// SSE: a job finished by one server process reaches a client connected to
// another; a reconnect with Last-Event-ID replays what was missed, in order.
func TestEventsAcrossProcessesAndReconnects(t *testing.T) {
	t.Parallel()
	srv := testenvRedis(t)
	one, _ := serveOn(t, srv, map[string]string{"BGJOBS_AUTO_RESUME": "false"})
	two, _ := serveOn(t, srv, map[string]string{"BGJOBS_AUTO_RESUME": "false"})

	ctx, cancel := context.WithCancel(context.Background())
	live := sseRead(t, ctx, two, "")
	c1 := client{t: t, base: one}
	_, j := c1.do("POST", "/v1/jobs", echoJob("chat-e", "seen", false))
	id := j["id"].(string)
	got := collect(t, live, 3)
	require.Equal(t, []string{"background.started", "background.running", "background.completed"}, []string{got[0].Type, got[1].Type, got[2].Type})
	for _, e := range got {
		require.Equal(t, id, e.Data["job_id"])
		require.Equal(t, "default", e.Data["agent"])
		require.Equal(t, "chat-e", e.Data["origin_session"])
	}
	require.Equal(t, "completed", got[2].Data["status"])
	require.Equal(t, "seen", got[2].Data["result"])
	cancel()

	// Missed while disconnected: two more jobs.
	lastSeen := got[2].ID
	var missed []string
	for _, text := range []string{"m1", "m2"} {
		_, j := c1.do("POST", "/v1/jobs", echoJob("chat-e", text, false))
		missed = append(missed, j["id"].(string))
		c1.waitStatus(j["id"].(string), "completed")
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	replay := collect(t, sseRead(t, ctx2, two, lastSeen), 6)
	// Each job's events in the order they happened. Across jobs the stream
	// order is the order of writing: m1's completion is written just after
	// its row, so m2's first event may come before it.
	order := map[string][]string{}
	for i, e := range replay {
		id, _ := e.Data["job_id"].(string)
		order[id] = append(order[id], e.Type)
		if i > 0 {
			require.Greater(t, e.ID, replay[i-1].ID)
		}
	}
	require.Equal(t, missed[0], replay[0].Data["job_id"], "the first missed event is m1's")
	for _, id := range missed {
		require.Equal(t, []string{"background.started", "background.running", "background.completed"}, order[id], id)
	}
}

// A streaming agent's updates become background.progress events, in order,
// before background.completed; the final text is still the report.
func TestProgressFromAStreamingAgent(t *testing.T) {
	t.Parallel()
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})
	c := client{t: t, base: base}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := sseRead(t, ctx, base, "")
	_, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-p", "description": "Stepwise", "prompt": "[progress 3]\nwalk the ledger"})
	id := j["id"].(string)
	var progress []sseEvent
	timeout := time.After(15 * time.Second)
	for done := false; !done; {
		select {
		case e := <-events:
			switch e.Type {
			case "background.progress":
				progress = append(progress, e)
			case "background.completed":
				require.Equal(t, id, e.Data["job_id"])
				done = true
			}
		case <-timeout:
			t.Fatalf("no completion; %d progress events", len(progress))
		}
	}
	// Every update is an event, in order (seq 1, 2, …): the task's
	// submitted state, its three working steps, then the artifact.
	var working []sseEvent
	for i, e := range progress {
		require.Equal(t, float64(i+1), e.Data["seq"])
		if e.Data["state"] == "working" {
			working = append(working, e)
		}
	}
	require.Len(t, working, 3, "the three status updates")
	for i, e := range working {
		require.Equal(t, "step "+string(rune('1'+i))+" of 3", e.Data["text"])
	}
	require.Equal(t, "artifact", progress[len(progress)-1].Data["state"])
	done := c.waitStatus(id, "completed")
	require.Contains(t, done["result"], "Report on: walk the ledger")
}

// A Last-Event-ID that is no stream id is a 400 naming it. It used to be
// accepted, and since every stream of a process shares one Redis read, the
// read then failed for all of them: a client that sent "garbage" froze
// every other client's events until it hung up.
func TestABadLastEventIDStopsNoOtherStream(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_AUTO_RESUME": "false"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live := sseRead(t, ctx, base, "")

	for _, try := range []struct{ header, query, field string }{
		{header: "garbage", field: "Last-Event-ID"},
		{header: "1-x", field: "Last-Event-ID"},
		{query: "nope", field: "last_event_id"},
	} {
		req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/events?last_event_id="+try.query, nil)
		require.NoError(t, err)
		if try.header != "" {
			req.Header.Set("Last-Event-ID", try.header)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var body struct{ Error struct{ Code, Field string } }
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode)
		require.Equal(t, "invalid_argument", body.Error.Code)
		require.Equal(t, try.field, body.Error.Field)
	}

	c := client{t: t, base: base}
	_, j := c.do("POST", "/v1/jobs", echoJob("chat-bad-id", "still flowing", false))
	got := collect(t, live, 3)
	require.Equal(t, j["id"], got[2].Data["job_id"])
	require.Equal(t, "background.completed", got[2].Type)
}
