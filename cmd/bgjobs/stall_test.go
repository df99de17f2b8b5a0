package main

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// A drain (or ack) whose caller gives up while Redis stalls uses nothing
// up: Redis is paused (CLIENT PAUSE) while the call is in flight, the
// caller's 1.5 s timeout fires, the call lands after the pause; the next
// drain still hands every result over, once.
func TestStalledHandoverLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a private redis-server")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	base := startServe(t, map[string]string{"REDIS_URL": srv.URL(), "BGJOBS_AUTO_RESUME": "false"})
	c := client{t: t, base: base}
	rdb := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(strings.TrimSuffix(srv.URL(), "/0"), "redis://")})
	t.Cleanup(func() { _ = rdb.Close() })

	finish := func(session string, n int) []string {
		var ids []string
		for range n {
			code, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": session, "kind": "work", "description": "stalled",
				"work": map[string]any{"type": "echo", "args": map[string]any{"text": "result of " + session}}})
			require.Equal(t, http.StatusAccepted, code, "%v", j)
			ids = append(ids, j["id"].(string))
		}
		for _, id := range ids {
			c.waitStatus(id, "completed")
		}
		return ids
	}
	// stalled sends one request while Redis is paused, giving up after 1.5 s.
	stalled := func(method, path string) {
		require.NoError(t, rdb.Do(context.Background(), "CLIENT", "PAUSE", "4000", "ALL").Err())
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 1500 * time.Millisecond}).Do(req)
		if err == nil {
			resp.Body.Close()
			require.NotEqual(t, http.StatusOK, resp.StatusCode, "a call answered during the pause")
		}
	}
	drained := func(session string) map[string]int {
		seen := map[string]int{}
		for range 3 {
			code, body := c.do("POST", "/v1/sessions/"+session+"/drain", nil)
			require.Equal(t, http.StatusOK, code, "%v", body)
			ns, _ := body["notifications"].([]any)
			for _, n := range ns {
				seen[n.(map[string]any)["job_id"].(string)]++
			}
		}
		return seen
	}

	for trial := range 2 {
		session := "chat-stall-" + string(rune('a'+trial))
		ids := finish(session, 2)
		stalled("POST", "/v1/sessions/"+session+"/drain")
		time.Sleep(3 * time.Second) // the pause ends; the abandoned drain lands
		seen := drained(session)
		for _, id := range ids {
			require.Equal(t, 1, seen[id], "trial %d: %s handed over once after the stalled drain", trial, id)
		}
	}

	ids := finish("chat-stall-ack", 1)
	stalled("POST", "/v1/jobs/"+ids[0]+"/ack")
	time.Sleep(3 * time.Second)
	require.Equal(t, 1, drained("chat-stall-ack")[ids[0]], "an ack whose caller gave up leaves the result to the drain")
}

// With BGJOBS_MIN_REPLICAS=1 a spawn, a settle and a drain count only once
// a replica has them: with the replica down, a spawn answers 503 in about
// the timeout (and a repeat with its key works once the replica is back).
func TestMinReplicasConfirmsWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a master and a replica")
	}
	t.Parallel()
	master := testenv.StartRedisServer(t)
	replica := testenv.StartRedisServer(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	mrdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(master.Port)})
	t.Cleanup(func() { _ = mrdb.Close() })
	linked := func() bool {
		info, _ := mrdb.Info(context.Background(), "replication").Result()
		return strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}
	testenv.Eventually(t, 20*time.Second, "the replica in sync", linked)
	base := startServe(t, map[string]string{"REDIS_URL": master.URL(), "BGJOBS_AUTO_RESUME": "false",
		"BGJOBS_MIN_REPLICAS": "1", "BGJOBS_MIN_REPLICAS_TIMEOUT": "500ms"})
	c := client{t: t, base: base}
	job := map[string]any{"origin_session": "chat-rep", "kind": "work", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "safe"}}}
	code, j := c.do("POST", "/v1/jobs", job)
	require.Equal(t, http.StatusAccepted, code, "%v", j)
	c.waitStatus(j["id"].(string), "completed")
	code, d := c.do("POST", "/v1/sessions/chat-rep/drain", nil)
	require.Equal(t, http.StatusOK, code, "%v", d)
	require.Len(t, d["notifications"], 1)

	replica.Kill()
	start := time.Now()
	code, e := c.do("POST", "/v1/jobs", job, "Idempotency-Key", "rep-1")
	took := time.Since(start)
	require.Equal(t, http.StatusServiceUnavailable, code, "%v", e)
	t.Logf("spawn with the replica down: 503 after %s", took.Round(time.Millisecond))

	testenv.RestartRedisServer(t, replica)
	testenv.Eventually(t, 20*time.Second, "the replica back in sync", linked)
	code, j = c.do("POST", "/v1/jobs", job, "Idempotency-Key", "rep-1")
	require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, code, "the repeat with its key: %v", j)
	c.waitStatus(j["id"].(string), "completed")
}
