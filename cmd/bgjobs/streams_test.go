package main

import (
	"bufio"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

// One agent opening 300 event streams gets its share (the rest 429) and
// cannot starve anyone: another agent's spawns are all answered at once,
// /readyz stays green, and an open stream still carries its events live.
func TestEventStreamsCannotStarveTheService(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_API_KEYS": "alpha:ka,beta:kb", "BGJOBS_AUTO_RESUME": "false"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tr := &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 400}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}

	type opened struct {
		status int
		lines  *bufio.Reader
	}
	results := make(chan opened, 300)
	var wg sync.WaitGroup
	for range 300 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events", nil)
			req.Header.Set("Authorization", "Bearer ka")
			resp, err := hc.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					t.Errorf("open stream: %v", err)
				}
				return
			}
			if resp.StatusCode != http.StatusOK {
				resp.Body.Close()
			}
			results <- opened{resp.StatusCode, bufio.NewReader(resp.Body)}
		})
	}
	wg.Wait()
	close(results)
	var statuses []int
	var streams []*bufio.Reader
	for r := range results {
		statuses = append(statuses, r.status)
		if r.status == http.StatusOK {
			streams = append(streams, r.lines)
		}
	}
	require.Len(t, streams, bgjobs.EventStreamsPerAgentDefault, "alpha holds its share of streams")
	require.Equal(t, 300-bgjobs.EventStreamsPerAgentDefault, len(slices.DeleteFunc(statuses, func(s int) bool { return s != http.StatusTooManyRequests })))

	beta := client{t: t, base: base, key: "kb"}
	var took []time.Duration
	for i := range 50 {
		start := time.Now()
		code, resp := beta.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "kind": "work", "description": "quick",
			"work": map[string]any{"type": "echo", "args": map[string]any{"text": "x"}}})
		took = append(took, time.Since(start))
		require.Equal(t, http.StatusAccepted, code, "%v", resp)
		if i%10 == 0 {
			code, _ := beta.do("GET", "/readyz", nil)
			require.Equal(t, http.StatusOK, code, "/readyz stays green")
		}
	}
	slices.Sort(took)
	t.Logf("beta's spawn with alpha's %d streams open: p50 %s, p99 %s", len(streams), took[len(took)/2], took[len(took)*99/100])
	// Starved, a spawn waits seconds for a Redis connection held by a
	// stream, or fails; served, it takes milliseconds (tens under load),
	// so the bound tells the two apart on a loaded machine too.
	require.Less(t, took[len(took)-1], 2*time.Second, "another agent's slowest spawn")

	// An open stream of alpha's still carries alpha's events live.
	alpha := client{t: t, base: base, key: "ka"}
	_, j := alpha.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "kind": "work", "description": "seen live",
		"work": map[string]any{"type": "echo", "args": map[string]any{"text": "x"}}})
	got := make(chan string, 1)
	go func() {
		for {
			line, err := streams[0].ReadString('\n')
			if err != nil {
				return
			}
			if strings.Contains(line, j["id"].(string)) && strings.Contains(line, "background.completed") {
				got <- line
				return
			}
		}
	}()
	select {
	case <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the open stream never carried the job's completion")
	}
}
