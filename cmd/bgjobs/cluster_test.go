package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	bgclient "github.com/bgjobs/bgjobs/client"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks"
)

// bgjobs on a 3-master Redis Cluster (redis-cluster://): turn and work
// jobs across sessions on every master, drained exactly once, a batch
// join, the event stream, recall, and the operator's list and purge
// finding jobs on every master. A single-node URL naming a cluster node
// is not ready, and says why.
func TestOnARedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	addrs := testenv.StartRedisCluster(t, 3)
	redisURL := "redis-cluster://" + strings.Join(addrs, ",")
	a2aURL, _ := startAgent(t)
	base := startServe(t, map[string]string{"REDIS_URL": redisURL, "BGJOBS_AUTO_RESUME": "false", "BGJOBS_NAMESPACE": "bgjobs"})
	c := client{t: t, base: base}
	code, _ := c.do("PUT", "/v1/agents/default", map[string]any{"a2a_url": a2aURL})
	require.Equal(t, http.StatusOK, code)

	gc := bgclient.New(base, "")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	events := make(chan bgclient.Event, 1000)
	go func() { _ = gc.Events(ctx, "", func(e bgclient.Event) error { events <- e; return nil }) }()
	time.Sleep(500 * time.Millisecond)

	var ids []string
	for i := range 20 {
		code, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": fmt.Sprint("chat-", i%10), "kind": "work",
			"work": map[string]any{"type": "echo", "args": map[string]any{"text": fmt.Sprint("result ", i)}}})
		require.Equal(t, http.StatusAccepted, code, "%v", j)
		ids = append(ids, j["id"].(string))
	}
	code, turn := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "chat-turn", "prompt": "survey the okapi habitat"})
	require.Equal(t, http.StatusAccepted, code, "%v", turn)
	ids = append(ids, turn["id"].(string))
	code, bt := c.do("POST", "/v1/batches", map[string]any{"origin_session": "chat-batch", "jobs": []any{
		map[string]any{"kind": "work", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "a"}}},
		map[string]any{"kind": "work", "work": map[string]any{"type": "echo", "args": map[string]any{"text": "b"}}},
	}})
	require.Equal(t, http.StatusAccepted, code, "%v", bt)
	for _, id := range ids {
		c.waitStatus(id, "completed")
	}
	testenv.Eventually(t, 20*time.Second, "the batch to join", func() bool {
		_, b := c.do("GET", "/v1/batches/"+bt["batch_id"].(string), nil)
		return b["joined"] == true
	})

	drained := 0
	for i := range 10 {
		_, d := c.do("POST", fmt.Sprintf("/v1/sessions/chat-%d/drain", i), nil)
		drained += len(d["notifications"].([]any))
		_, again := c.do("POST", fmt.Sprintf("/v1/sessions/chat-%d/drain", i), nil)
		require.Empty(t, again["notifications"], "once")
	}
	require.Equal(t, 20, drained)
	for _, s := range []string{"chat-turn", "chat-batch"} {
		_, d := c.do("POST", "/v1/sessions/"+s+"/drain", nil)
		require.NotEmpty(t, d["notifications"])
	}

	require.NotEmpty(t, events, "the event stream carries events")
	testenv.Eventually(t, 20*time.Second, "the turn's report in memory", func() bool {
		_, r := c.do("GET", "/v1/recall?q="+url.QueryEscape("okapi"), nil)
		hits, _ := r["hits"].([]any)
		return len(hits) > 0
	})

	out, err := cli(t, redisURL, "jobs", "ls", "--limit", "100")
	require.NoError(t, err, out)
	for _, id := range ids {
		require.Contains(t, out, id)
	}
	out, err = cli(t, redisURL, "purge", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, fmt.Sprintf("would purge %d job(s)", len(ids)+2), "ended jobs on every master")

	// retry from the CLI: the job runs again and drains again, once.
	out, err = cli(t, redisURL, "retry", "--force", ids[0])
	require.NoError(t, err, out)
	c.waitStatus(ids[0], "completed")
	testenv.Eventually(t, 10*time.Second, "the retried job's new outcome", func() bool {
		_, d := c.do("POST", "/v1/sessions/chat-0/drain", nil)
		return len(d["notifications"].([]any)) == 1
	})

	// reindex rebuilds an index (here a fresh directory) from the cluster's
	// reports stream.
	var rout lockedBuffer
	env := map[string]string{"REDIS_URL": redisURL, "BGJOBS_DATA_DIR": t.TempDir()}
	require.NoError(t, run(context.Background(), []string{"reindex"}, func(k string) string { return env[k] }, &rout, &rout))
	require.Contains(t, rout.String(), "1 documents", "the turn's report")

	// One node of the cluster, named as a single server: not ready, and why.
	node := redis.NewClient(&redis.Options{Addr: addrs[0]})
	t.Cleanup(func() { _ = node.Close() })
	m := tasks.NewManager(node, bgjobs.Config{Namespace: "probe"}.WithDefaults(), tasks.Deps{})
	t.Cleanup(func() { _ = m.Close() })
	require.ErrorIs(t, m.Ping(context.Background()), tasks.ErrClusterNode)
}
