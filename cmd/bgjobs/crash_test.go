package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks"
)

// buildBinary compiles bgjobs once per test binary.
var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "bgjobs-bin")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "bgjobs")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// startWorker runs `bgjobs worker` as a subprocess against url.
func startWorker(t *testing.T, url string, out *lockedBuffer) *exec.Cmd {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(os.Environ(), "REDIS_URL="+url, "BGJOBS_WORK_CONCURRENCY=60", "BGJOBS_POLL_INTERVAL=20ms",
		"BGJOBS_RECONCILE_INTERVAL=5s")
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// kill -9 of a real worker while 50 delayed echo jobs are active, and of
// Redis itself (AOF, fsync always): after both restart, every job reaches a
// terminal state and is drained exactly once. Nothing is lost.
func TestKillNineWorkerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for asynq's lease recovery (about a minute)")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + itoa(srv.Port)})
	t.Cleanup(func() { _ = rdb.Close() })
	cfg := bgjobs.Config{}.WithDefaults()
	m := tasks.NewManager(rdb, cfg, tasks.Deps{})
	t.Cleanup(func() { _ = m.Close() })
	ctx := context.Background()

	out := &lockedBuffer{}
	first := startWorker(t, srv.URL(), out)
	const n = 50
	var ids []string
	args, _ := json.Marshal(tasks.EchoArgs{Text: "survived", DelayMS: 4000})
	for range n {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "alpha", OriginSession: "chat-k", Kind: tasks.KindWork,
			Description: "slow echo", Work: &tasks.WorkSpec{Type: "echo", Args: args}})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	statuses := func() map[tasks.Status]int {
		c := map[tasks.Status]int{}
		for _, id := range ids {
			j, err := m.Get(ctx, "alpha", id)
			if err != nil {
				c["error"]++
				continue
			}
			c[j.Status]++
		}
		return c
	}
	testenv.Eventually(t, 30*time.Second, "all 50 running", func() bool { return statuses()[tasks.StatusRunning] == n })

	require.NoError(t, first.Process.Kill())
	_ = first.Wait()
	srv.Kill()
	srv = testenv.RestartRedisServer(t, srv)
	require.Equal(t, map[tasks.Status]int{tasks.StatusRunning: n}, statuses(), "state survived the Redis restart")

	startWorker(t, srv.URL(), out)
	testenv.Eventually(t, 170*time.Second, "every job terminal", func() bool {
		c := statuses()
		return c[tasks.StatusCompleted]+c[tasks.StatusFailed]+c[tasks.StatusCancelled] == n
	})

	// Several drainers at once: each job reaches exactly one of them.
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			ns, err := m.Drain(ctx, "alpha", "chat-k", "")
			require.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			for _, x := range ns {
				seen[x.JobID]++
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n, "0 lost\n%s", out.String())
	for id, c := range seen {
		require.Equal(t, 1, c, id)
	}
	ns, err := m.Drain(ctx, "alpha", "chat-k", "")
	require.NoError(t, err)
	require.Empty(t, ns)
	for _, id := range ids {
		j, err := m.Get(ctx, "alpha", id)
		require.NoError(t, err)
		require.Equal(t, tasks.StatusCompleted, j.Status, "%s: %v", id, j.Error)
		require.Equal(t, "survived", *j.Result)
		require.GreaterOrEqual(t, j.Attempts, 2, "it ran again after the crash")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
