package main

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// serveOn runs `serve` against url until stop is called; stop waits for run
// to return and hands back its error.
func serveOn(t *testing.T, url string, env map[string]string) (base string, stop func() error) {
	t.Helper()
	vars := map[string]string{"REDIS_URL": url, "BGJOBS_ADDR": "127.0.0.1:0", "BGJOBS_POLL_INTERVAL": "10ms", "BGJOBS_AGENT_ALLOW": "127.0.0.1", "BGJOBS_DATA_DIR": t.TempDir()}
	for k, v := range env {
		vars[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, func(k string) string { return vars[k] }, out, out) }()
	re := regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	testenv.Eventually(t, 10*time.Second, "serve to listen", func() bool {
		m := re.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not stop")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return base, stop
}

// SIGTERM (here: the context ending) lets a running job finish within the
// shutdown timeout; one that cannot finish in time goes back to the queue
// and another process completes it.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	base, stop := serveOn(t, srv.URL(), map[string]string{"BGJOBS_SHUTDOWN_TIMEOUT": "3s"})
	c := client{t: t, base: base}
	spawn := func(delay int) string {
		_, j := c.do("POST", "/v1/jobs", map[string]any{"origin_session": "s", "kind": "work", "description": "d",
			"work": map[string]any{"type": "echo", "args": map[string]any{"text": "done", "delay_ms": delay}}})
		return j["id"].(string)
	}
	short, long := spawn(1000), spawn(30000)
	c.waitStatus(short, "running")
	c.waitStatus(long, "running")

	start := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(start), 15*time.Second, "bounded by the 3 s shutdown timeout, not by the 30 s job")
	j, err := m.Get(ctx, "default", short)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCompleted, j.Status, "the short job finished before the process stopped")
	j, err = m.Get(ctx, "default", long)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusQueued, j.Status, "the long job was handed back, not lost or failed")

	// Another process picks it up again.
	serveOn(t, srv.URL(), nil)
	testenv.Eventually(t, 60*time.Second, "the long job to run again", func() bool {
		j, err := m.Get(ctx, "default", long)
		require.NoError(t, err)
		return j.Status == bgjobs.StatusRunning && j.Attempts == 2
	})
}

// testenvRedis is the Redis URL a test's server processes share: a private
// redis-server.
func testenvRedis(t *testing.T) string {
	t.Helper()
	return testenv.StartRedisServer(t).URL()
}
