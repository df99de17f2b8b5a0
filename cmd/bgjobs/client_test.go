package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	bgclient "github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// The Go client end to end, as a Go agent uses it: the example agent, told
// to drain on every resume, gets its result through the client the moment
// the resume arrives.
func TestGoClientAndADrainingAgent(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka"})
	c := bgclient.New(base, "ka")
	a2aURL, log := startDrainingAgent(t, c)
	ctx := context.Background()
	require.NoError(t, c.PutAgent(ctx, "alpha", bgclient.AgentConfig{A2AURL: a2aURL}))

	sp, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-c", Kind: "work", Description: "hello",
		Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": "from the client"}}})
	require.NoError(t, err)
	require.Contains(t, sp.Message, "do NOT poll")

	testenv.Eventually(t, 10*time.Second, "the agent to drain on its resume", func() bool {
		return strings.Contains(log.String(), "from the client")
	})
	var line struct {
		Session       string                  `json:"drained_session"`
		Notifications []bgclient.Notification `json:"notifications"`
	}
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.Contains(l, "drained_session") {
			require.NoError(t, json.Unmarshal([]byte(l), &line))
		}
	}
	require.Equal(t, "chat-c", line.Session)
	require.Len(t, line.Notifications, 1)
	require.Equal(t, sp.ID, line.Notifications[0].JobID)

	ns, err := c.Drain(ctx, "chat-c", "")
	require.NoError(t, err)
	require.Empty(t, ns, "already handed over, once")
	j, err := c.Get(ctx, sp.ID)
	require.NoError(t, err)
	require.True(t, j.Notified)

	require.NoError(t, c.Busy(ctx, "chat-c", time.Minute))
	require.NoError(t, c.Idle(ctx, "chat-c"))
	_, err = c.Get(ctx, "bg-000000000000")
	var apiErr *bgclient.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, 404, apiErr.Status)
	require.Equal(t, "not_found", apiErr.Code)
	jobs, _, err := c.List(ctx, "chat-c", "", 10, "")
	require.NoError(t, err)
	require.Len(t, jobs, 1)

	// A batch through the client completes and joins.
	echo := func(text string) bgclient.SpawnRequest {
		return bgclient.SpawnRequest{Kind: "work", Description: text, Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": text}}}
	}
	res, err := c.Batch(ctx, "chat-batch", []bgclient.SpawnRequest{echo("one"), echo("two")})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.Empty(t, res.Skipped)
	testenv.Eventually(t, 15*time.Second, "the batch to join", func() bool {
		b, err := c.GetBatch(ctx, res.BatchID)
		require.NoError(t, err)
		return b.Joined
	})
	b, err := c.GetBatch(ctx, res.BatchID)
	require.NoError(t, err)
	require.Equal(t, 2, b.Counts["completed"])
	agent, err := c.GetAgent(ctx, "alpha")
	require.NoError(t, err)
	require.Equal(t, a2aURL, agent.A2AURL)
	waited, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-w", Kind: "work", Description: "waited", WaitMS: 10000,
		Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": "right away"}}})
	require.NoError(t, err)
	require.Equal(t, "completed", waited.Status)
	require.Equal(t, "right away", *waited.Result)
}

// Every method of the Go client against a running server, checked by what
// an agent would check.
func TestGoClientCoversTheAPI(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka", "BGJOBS_AUTO_RESUME": "false", "BGJOBS_TURN_WINDOW": "1m",
		"BGJOBS_FETCH_ALLOW": "127.0.0.1"})
	c := bgclient.New(base, "ka")
	ctx := context.Background()
	a2aURL, _ := startAgent(t)
	require.NoError(t, c.PutAgent(ctx, "alpha", bgclient.AgentConfig{A2AURL: a2aURL, SubagentTypes: map[string]string{"researcher": "You research."}}))
	echo := func(session, text string, delayMS int) bgclient.SpawnRequest {
		return bgclient.SpawnRequest{OriginSession: session, Kind: "work", Work: &bgclient.Work{Type: "echo", Args: map[string]any{"text": text, "delay_ms": delayMS}}}
	}
	waitEnded := func(id string) *bgclient.Job {
		var j *bgclient.Job
		testenv.Eventually(t, 15*time.Second, id+" to end", func() bool {
			var err error
			j, err = c.Get(ctx, id)
			require.NoError(t, err)
			return j.Status == "completed" || j.Status == "failed" || j.Status == "cancelled"
		})
		return j
	}

	// Events, from the next one on.
	events := make(chan bgclient.Event, 100)
	evCtx, stopEvents := context.WithCancel(ctx)
	go func() { _ = c.Events(evCtx, "", func(e bgclient.Event) error { events <- e; return nil }) }()
	time.Sleep(300 * time.Millisecond) // the stream is open

	// A typed error names the field.
	_, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-all", Prompt: "p", SubagentType: "painter"})
	require.ErrorIs(t, err, bgclient.ErrInvalid)
	var apiErr *bgclient.Error
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "subagent_type", apiErr.Field)

	// turn_id: two spawns of one turn share its batch.
	a, err := c.Spawn(ctx, bgclient.SpawnRequest{OriginSession: "chat-all", Prompt: "first", SubagentType: "researcher", TurnID: "turn-1"})
	require.NoError(t, err)
	b, err := c.Spawn(ctx, func() bgclient.SpawnRequest { r := echo("chat-all", "second", 0); r.TurnID = "turn-1"; return r }())
	require.NoError(t, err)
	require.NotNil(t, a.BatchID)
	require.Equal(t, *a.BatchID, *b.BatchID)
	batch, err := c.GetBatch(ctx, *a.BatchID)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{a.ID, b.ID}, batch.Jobs)
	waitEnded(a.ID)
	waitEnded(b.ID)

	var first bgclient.Event
	select {
	case first = <-events:
	case <-time.After(10 * time.Second):
		t.Fatal("no event on the stream")
	}
	require.Equal(t, "background.started", first.Type)
	var body struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, first.Decode(&body))
	require.Equal(t, a.ID, body.JobID)
	stopEvents()
	// Reconnecting after the first event misses nothing and repeats nothing.
	var replay []bgclient.Event
	rctx, stop := context.WithTimeout(ctx, 2*time.Second)
	_ = c.Events(rctx, first.ID, func(e bgclient.Event) error { replay = append(replay, e); return nil })
	stop()
	require.NotEmpty(t, replay)
	for _, e := range replay {
		require.NotEqual(t, first.ID, e.ID)
	}

	// Cancel, ack, drain (with a key), delete.
	slow, err := c.Spawn(ctx, echo("chat-all", "slow", 30000))
	require.NoError(t, err)
	cancelled, err := c.Cancel(ctx, slow.ID)
	require.NoError(t, err)
	require.Equal(t, "cancelled", waitEnded(cancelled.ID).Status)
	acked, err := c.Ack(ctx, b.ID)
	require.NoError(t, err)
	require.True(t, acked)
	ns, err := c.Drain(ctx, "chat-all", "drain-1")
	require.NoError(t, err)
	again, err := c.Drain(ctx, "chat-all", "drain-1")
	require.NoError(t, err)
	require.Equal(t, ns, again, "a repeat with the key answers the same")
	got := map[string]bool{}
	for _, n := range ns {
		got[n.JobID] = true
	}
	require.Equal(t, map[string]bool{a.ID: true, slow.ID: true}, got, "the acked job is not drained")
	require.NoError(t, c.Delete(ctx, slow.ID))
	_, err = c.Get(ctx, slow.ID)
	require.ErrorIs(t, err, bgclient.ErrNotFound)

	// wait_ms, list.
	waited, err := c.Spawn(ctx, func() bgclient.SpawnRequest { r := echo("chat-w", "at once", 0); r.WaitMS = 10000; return r }())
	require.NoError(t, err)
	require.Equal(t, "at once", *waited.Result)
	jobs, _, err := c.List(ctx, "chat-all", "completed", 10, "")
	require.NoError(t, err)
	require.Len(t, jobs, 2)

	// Memory: remember, ingest, recall.
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><head><title>Okapi</title></head><body><p>Okapis live in the Ituri forest.</p></body></html>"))
	}))
	t.Cleanup(page.Close)
	doc, err := c.Remember(ctx, "chat-all", "Field notes", "numbats are striped")
	require.NoError(t, err)
	require.NotEmpty(t, doc)
	hits, _, err := c.Recall(ctx, "numbats", "", 5)
	require.NoError(t, err)
	require.NotEmpty(t, hits)
	docs, err := c.RememberAll(ctx, "chat-all", []bgclient.Text{{Title: "Dune notes", Text: "thorny devils drink through their skin"}, {Text: "echidnas lay eggs"}})
	require.NoError(t, err)
	require.Len(t, docs, 2)
	for i, q := range []string{"thorny", "echidnas"} {
		hits, _, err := c.Recall(ctx, q, "chat-all", 5)
		require.NoError(t, err)
		require.Len(t, hits, 1, "%s searchable when RememberAll returns", q)
		require.Equal(t, docs[i], hits[0].DocID)
	}
	ing, err := c.Ingest(ctx, "chat-all", page.URL)
	require.NoError(t, err)
	require.Equal(t, "completed", waitEnded(ing.ID).Status)
	testenv.Eventually(t, 10*time.Second, "the ingested page to be searchable", func() bool {
		hits, _, err := c.Recall(ctx, "okapis", "chat-all", 5)
		return err == nil && len(hits) > 0
	})
	agent, err := c.GetAgent(ctx, "alpha")
	require.NoError(t, err)
	require.Equal(t, a2aURL, agent.A2AURL)

	// Drains come in pages: the API says when more wait; the client's
	// Drain reads them all.
	var paged []string
	for i := range 3 {
		sp, err := c.Spawn(ctx, echo("chat-pages", fmt.Sprint("page ", i), 0))
		require.NoError(t, err)
		paged = append(paged, sp.ID)
	}
	for _, id := range paged {
		waitEnded(id)
	}
	raw := client{t: t, base: base, key: "ka"}
	code, drained := raw.do("POST", "/v1/sessions/chat-pages/drain?limit=2", nil)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, drained["notifications"], 2)
	require.Equal(t, true, drained["more"])
	rest, err := c.Drain(ctx, "chat-pages", "")
	require.NoError(t, err)
	require.Len(t, rest, 1, "the rest, once")
}
