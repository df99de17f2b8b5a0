package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
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
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/work"
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
	return startProcess(t, out, "worker", "REDIS_URL="+url, "BGJOBS_WORK_CONCURRENCY=60", "BGJOBS_POLL_INTERVAL=20ms",
		"BGJOBS_RECONCILE_INTERVAL=5s")
}

// startProcess runs the bgjobs binary with a subcommand and extra
// environment; it is killed when the test ends.
func startProcess(t *testing.T, out *lockedBuffer, sub string, env ...string) *exec.Cmd {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, sub)
	// The tests' agents and webhook receivers live on loopback.
	cmd.Env = append(append(os.Environ(), "BGJOBS_AGENT_ALLOW=127.0.0.1"), env...)
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// spawnEchoes spawns n echo jobs of agent alpha in session, each taking
// delayMS, and returns their ids.
func spawnEchoes(t *testing.T, m *tasks.Manager, session string, n, delayMS int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		args, _ := json.Marshal(work.EchoArgs{Text: fmt.Sprint("job ", i), DelayMS: delayMS})
		j, _, err := m.Spawn(context.Background(), tasks.SpawnRequest{Agent: "alpha", OriginSession: session, Kind: bgjobs.KindWork,
			Description: "slow echo", Work: &bgjobs.WorkSpec{Type: "echo", Args: args}})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	return ids
}

// statusesOf counts alpha's jobs ids by status ("error" for a failed read).
func statusesOf(m *tasks.Manager, ids []string) map[bgjobs.Status]int {
	c := map[bgjobs.Status]int{}
	for _, id := range ids {
		j, err := m.Get(context.Background(), "alpha", id)
		if err != nil {
			c["error"]++
			continue
		}
		c[j.Status]++
	}
	return c
}

// kill -9 of a real worker while 50 delayed echo jobs are active, and of
// Redis itself (AOF, fsync always): after both restart, every job reaches a
// terminal state and is drained exactly once. Nothing is lost.
func TestKillNineWorkerLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker and Redis")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()

	out := &lockedBuffer{}
	first := startWorker(t, srv.URL(), out)
	const n = 50
	ids := spawnEchoes(t, m, "chat-k", n, 4000)
	statuses := func() map[bgjobs.Status]int { return statusesOf(m, ids) }
	testenv.Eventually(t, 30*time.Second, "all 50 running", func() bool { return statuses()[bgjobs.StatusRunning] == n })

	require.NoError(t, first.Process.Kill())
	_ = first.Wait()
	srv.Kill()
	srv = testenv.RestartRedisServer(t, srv)
	require.Equal(t, map[bgjobs.Status]int{bgjobs.StatusRunning: n}, statuses(), "state survived the Redis restart")

	startWorker(t, srv.URL(), out)
	testenv.Eventually(t, 170*time.Second, "every job terminal", func() bool {
		c := statuses()
		return c[bgjobs.StatusCompleted]+c[bgjobs.StatusFailed]+c[bgjobs.StatusCancelled] == n
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
	for i, id := range ids {
		j, err := m.Get(ctx, "alpha", id)
		require.NoError(t, err)
		require.Equal(t, bgjobs.StatusCompleted, j.Status, "%s: %v", id, j.Error)
		require.Equal(t, fmt.Sprint("job ", i), *j.Result, "its own result survived")
		require.GreaterOrEqual(t, j.Attempts, 2, "it ran again after the crash")
	}
}

// privateManager is a Manager on a private redis-server.
func privateManager(t *testing.T, srv *testenv.RedisServer) *tasks.Manager {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(srv.Port)})
	t.Cleanup(func() { _ = rdb.Close() })
	m := tasks.NewManager(rdb, bgjobs.Config{AgentAllow: []string{"127.0.0.1"}}.WithDefaults(), tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// 100 batches of 10 across three worker processes, one of them killed -9
// in the middle: exactly 100 joins, none early, none twice.
func TestBatchJoinsSurviveAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for asynq's lease recovery (about a minute)")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	hook, url := startWebhook(t, "k")
	var early []string
	hook.check = func(body map[string]any) {
		bid, _ := body["batch_id"].(string)
		b, err := m.GetBatch(ctx, "alpha", bid)
		if err != nil || !b.Joined || b.Settled != b.Size {
			early = append(early, bid)
		}
	}
	require.NoError(t, m.PutAgent(ctx, &bgjobs.Agent{Name: "alpha", Resume: bgjobs.ResumeWebhook, WebhookURL: url, WebhookSecret: "k"}))

	out := &lockedBuffer{}
	workers := []*exec.Cmd{startWorker(t, srv.URL(), out), startWorker(t, srv.URL(), out), startWorker(t, srv.URL(), out)}
	var batches []string
	for b := range 100 {
		specs := make([]tasks.SpawnRequest, 10)
		for i := range specs {
			args, _ := json.Marshal(work.EchoArgs{Text: "m", DelayMS: 500 + (b*10+i)%7*400})
			specs[i] = tasks.SpawnRequest{Kind: bgjobs.KindWork, Description: "member", Work: &bgjobs.WorkSpec{Type: "echo", Args: args}}
		}
		res, err := m.SpawnBatch(ctx, "alpha", "chat-fan", specs)
		require.NoError(t, err)
		require.Len(t, res.Jobs, 10)
		batches = append(batches, res.BatchID)
	}
	time.Sleep(1500 * time.Millisecond) // members are running on all three
	require.NoError(t, workers[0].Process.Kill())
	_ = workers[0].Wait()

	joined := func() map[string]int {
		c := map[string]int{}
		for _, body := range hook.all() {
			if bid, _ := body["batch_id"].(string); bid != "" && body["trigger"] == bid {
				c[bid]++
			}
		}
		return c
	}
	testenv.Eventually(t, 170*time.Second, "100 joins", func() bool { return len(joined()) == 100 })
	time.Sleep(2 * time.Second)
	got := joined()
	require.Len(t, got, 100)
	for _, bid := range batches {
		require.Equal(t, 1, got[bid], "batch %s joined once", bid)
		b, err := m.GetBatch(ctx, "alpha", bid)
		require.NoError(t, err)
		require.False(t, b.Partial)
		require.Equal(t, 10, b.Settled)
	}
	hook.mu.Lock()
	t.Logf("repeat deliveries the receiver dropped: %d", hook.repeats)
	hook.mu.Unlock()
	require.Empty(t, early, "no join before every member settled")
	require.Len(t, hook.all(), 100, "no per-member resumes")
	ns, err := m.Drain(ctx, "alpha", "chat-fan", "")
	require.NoError(t, err)
	require.Len(t, ns, 1000)
}

// kill -9 between a settle and its resume's delivery: the agent's endpoint
// is down, the resume waits in its retry queue, the worker dies; after a
// restart the resume still arrives, once.
func TestResumeSurvivesAKilledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	hook, url := startWebhook(t, "k")
	hook.setStatus(http.StatusServiceUnavailable)
	require.NoError(t, m.PutAgent(ctx, &bgjobs.Agent{Name: "alpha", Resume: bgjobs.ResumeWebhook, WebhookURL: url, WebhookSecret: "k"}))
	out := &lockedBuffer{}
	w := startWorker(t, srv.URL(), out)
	var ids []string
	for range 5 {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "alpha", OriginSession: "chat-r", Kind: bgjobs.KindWork,
			Description: "x", Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"x"}`)}})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	testenv.Eventually(t, 10*time.Second, "all settled", func() bool {
		for _, id := range ids {
			j, err := m.Get(ctx, "alpha", id)
			if err != nil || j.Status != bgjobs.StatusCompleted {
				return false
			}
		}
		return true
	})
	time.Sleep(500 * time.Millisecond) // first delivery attempts fail
	require.NoError(t, w.Process.Kill())
	_ = w.Wait()
	hook.setStatus(0)
	startWorker(t, srv.URL(), out)
	// The storm guard may merge them: every job is announced, once.
	announced := func() map[string]int {
		seen := map[string]int{}
		for _, b := range hook.all() {
			for _, id := range b["jobs"].([]any) {
				seen[id.(string)]++
			}
		}
		return seen
	}
	testenv.Eventually(t, 90*time.Second, "all five announced", func() bool { return len(announced()) == 5 })
	time.Sleep(2 * time.Second)
	seen := announced()
	for _, id := range ids {
		require.Equal(t, 1, seen[id], "resume for %s", id)
	}
}

// startServeProcess runs `bgjobs serve` as a subprocess and returns its
// base URL once it answers.
func startServeProcess(t *testing.T, url, dataDir string, out *lockedBuffer) (*exec.Cmd, string) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	cmd := startProcess(t, out, "serve", "REDIS_URL="+url, "BGJOBS_ADDR="+addr, "BGJOBS_DATA_DIR="+dataDir)
	base := "http://" + addr
	testenv.Eventually(t, 20*time.Second, "serve to answer", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	})
	return cmd, base
}

// kill -9 while indexing, then restart: every document is searchable
// exactly once. Deleting the index directory and restarting rebuilds it.
func TestIndexSurvivesKillNineAndRebuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts serve processes")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	const n = 3000
	docs := make([]search.Doc, n)
	for i := range docs {
		docs[i] = search.Doc{DocID: fmt.Sprintf("kn-%06d", i), Agent: "default", Session: "chat-i", SourceType: search.SourceIngest,
			Heading: "note", Body: fmt.Sprintf("tardigrade observation number %d, specimen marker%d", i, i), TrustTier: search.TrustExternal,
			CreatedAt: time.Now().UTC()}
	}
	for i := 0; i < n; i += 500 {
		_, err := m.AppendDocs(ctx, docs[i:i+500])
		require.NoError(t, err)
	}
	dataDir := t.TempDir()
	out := &lockedBuffer{}
	first, base := startServeProcess(t, srv.URL(), dataDir, out)
	time.Sleep(300 * time.Millisecond) // mid-way through indexing
	require.NoError(t, first.Process.Kill())
	_ = first.Wait()

	total := func(base string) float64 {
		resp, err := http.Get(base + "/v1/recall?q=tardigrade&limit=1")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		var r struct {
			Total float64 `json:"total"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&r)
		return r.Total
	}
	second, base := startServeProcess(t, srv.URL(), dataDir, out)
	testenv.Eventually(t, 60*time.Second, "every document indexed", func() bool { return total(base) == n })
	time.Sleep(time.Second)
	require.Equal(t, float64(n), total(base), "exactly once: no document twice\n%s", out.String())
	resp, err := http.Get(base + "/v1/recall?q=marker1234")
	require.NoError(t, err)
	var one struct {
		Hits []struct {
			DocID string `json:"doc_id"`
		} `json:"hits"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&one))
	resp.Body.Close()
	require.Len(t, one.Hits, 1)
	require.Equal(t, "kn-001234", one.Hits[0].DocID)

	require.NoError(t, second.Process.Signal(os.Interrupt))
	_ = second.Wait()
	require.NoError(t, os.RemoveAll(filepath.Join(dataDir, bgjobs.NamespaceDefault, "index.bleve")))
	third, base := startServeProcess(t, srv.URL(), dataDir, out)
	testenv.Eventually(t, 60*time.Second, "the rebuilt index", func() bool { return total(base) == n })

	// bgjobs reindex rebuilds it offline too.
	require.NoError(t, third.Process.Signal(os.Interrupt))
	_ = third.Wait()
	var rout lockedBuffer
	env := map[string]string{"REDIS_URL": srv.URL(), "BGJOBS_DATA_DIR": dataDir}
	require.NoError(t, run(ctx, []string{"reindex"}, func(k string) string { return env[k] }, &rout, &rout))
	require.Contains(t, rout.String(), fmt.Sprintf("%d documents", n))
	_, base = startServeProcess(t, srv.URL(), dataDir, out)
	testenv.Eventually(t, 20*time.Second, "the reindexed index", func() bool { return total(base) == n })
}

// kill -9 of a worker with 50 running jobs: another worker runs each of
// them again within 45 s of the kill (not asynq's minute or two), and
// every job settles once and drains once.
func TestDeadWorkersJobsRunAgainSoon(t *testing.T) {
	if testing.Short() {
		t.Skip("kills a worker process")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	out := &lockedBuffer{}
	doomed := startWorker(t, srv.URL(), out)
	ids := spawnEchoes(t, m, "chat-dead", 50, 8000)
	testenv.Eventually(t, 30*time.Second, "all 50 running on the doomed worker", func() bool {
		return statusesOf(m, ids)[bgjobs.StatusRunning] == 50
	})
	startWorker(t, srv.URL(), out)
	time.Sleep(time.Second) // the survivor is up
	require.NoError(t, doomed.Process.Kill())
	_ = doomed.Wait()
	killed := time.Now()

	testenv.Eventually(t, 120*time.Second, "every job completed", func() bool {
		return statusesOf(m, ids)[bgjobs.StatusCompleted] == 50
	})
	var last time.Duration
	for _, id := range ids {
		j, err := m.Get(ctx, "alpha", id)
		require.NoError(t, err)
		require.Equal(t, 2, j.Attempts, "%s ran twice: once on the dead worker, once after", id)
		last = max(last, j.StartedAt.Sub(killed))
	}
	t.Logf("from the kill to the last re-run starting: %s", last.Round(100*time.Millisecond))
	require.LessOrEqual(t, last, 45*time.Second)
	ns, err := m.Drain(ctx, "alpha", "chat-dead", "")
	require.NoError(t, err)
	require.Len(t, ns, 50, "each settled and drained once")
	ns, err = m.Drain(ctx, "alpha", "chat-dead", "")
	require.NoError(t, err)
	require.Empty(t, ns)
}
