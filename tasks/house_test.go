package tasks

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
)

// A Manager that was started, ran a job and was stopped leaves no
// goroutine behind: the batching writer, the storm timers, the maintenance
// loop and the asynq servers all end with Close and Shutdown.
func TestStoppedManagerLeavesNoGoroutine(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	env := testenv.New(t)
	ctx := context.Background()
	require.Empty(t, ours(), "no bgjobs goroutine before the manager starts")

	cfg := bgjobs.Config{Namespace: env.Namespace, PollInterval: 10 * time.Millisecond, ShutdownTimeout: time.Second}.WithDefaults()
	m := NewManager(env.RDB, cfg, Deps{Logger: slog.New(slog.DiscardHandler)})
	w := m.NewWorker()
	require.NoError(t, w.Start(ctx))
	j, _, err := m.Spawn(ctx, echoSpawn("chat-leak", "x", 0, false))
	require.NoError(t, err)
	testenv.Eventually(t, 20*time.Second, "the job to end", func() bool {
		got, err := m.Get(ctx, "alpha", j.ID)
		require.NoError(t, err)
		return got.Status.Terminal()
	})
	w.Shutdown()
	require.NoError(t, m.Close())

	deadline := time.Now().Add(20 * time.Second)
	for len(ours()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	require.Empty(t, ours(), "goroutines left after stop")
}

// ours lists the stacks of goroutines running bgjobs' or asynq's code
// (this test's own aside); the Redis client's and server's are the test's.
func ours() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "TestStoppedManagerLeavesNoGoroutine") {
			continue
		}
		if strings.Contains(g, "bgjobs/bgjobs/") || strings.Contains(g, "hibiken/asynq") {
			out = append(out, g)
		}
	}
	return out
}

// A task fetched before its row is written (the row travels in a separate
// round trip on some clients) is tried again shortly, not finished
// silently: once the row lands, the job runs.
func TestTaskBeforeItsRowIsRetried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j, err := b.m.checkSpawn(ctx, echoSpawn("chat-late", "late row", 0, false))
	require.NoError(t, err)
	require.NoError(t, b.m.eng.EnqueueJob(ctx, j)) // the task, alone
	b.startWorker(t)
	testenv.Eventually(t, 20*time.Second, "a first attempt that found no row", func() bool {
		info, err := b.m.Inspector().GetTaskInfo(b.m.Queue(QueueWork), j.ID)
		return err == nil && info.Retried >= 1
	})
	bid := "bt-000000000001"
	j.BatchID = &bid
	require.NoError(t, b.m.store.CreateBatch(ctx, bgjobs.Tag(j.Agent, j.OriginSession), bid, []*bgjobs.Job{j}, time.Now()))
	got := b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 30*time.Second)
	require.Equal(t, "late row", *got.Result)
}

// An operator retry's new outcome, merged by the storm guard behind another
// job's window, is announced: the merged nudge's ids carry the retried
// job's generation, so they never meet the first generation's sent mark.
func TestRetriedJobsMergedNudgeIsDelivered(t *testing.T) {
	t.Parallel()
	window := 300 * time.Millisecond
	b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.ResumeCoalesce = window })
	ctx := context.Background()
	var jobs []*bgjobs.Job
	for _, text := range []string{"a", "b", "c"} {
		jobs = append(jobs, b.spawn(t, echoSpawn("chat-retry-merge", text, 0, false)))
	}
	a, bj, c := jobs[0], jobs[1], jobs[2]
	settle := func(j *bgjobs.Job) {
		t.Helper()
		r := "done"
		ok, err := b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
		require.NoError(t, err)
		require.True(t, ok)
	}
	settle(a)  // alone, opens a window
	settle(bj) // merged behind it
	outboxEmpty := func() bool {
		n, err := b.env.RDB.ZCard(ctx, b.m.store.Keys().Outbox(bgjobs.Tag("alpha", "chat-retry-merge"))).Result()
		require.NoError(t, err)
		return n == 0
	}
	testenv.Eventually(t, 10*time.Second, "the first merge to be pumped", outboxEmpty)
	time.Sleep(2 * window) // the window closes

	_, err := b.m.Retry(ctx, bj.ID, true)
	require.NoError(t, err)
	retried, err := b.m.Lookup(ctx, bj.ID)
	require.NoError(t, err)
	require.Equal(t, 1, retried.Generation)
	settle(c)       // alone, opens a new window
	settle(retried) // the retried job merged behind it, first in its merge
	testenv.Eventually(t, 10*time.Second, "the second merge to be pumped", outboxEmpty)

	b.startWorker(t)
	testenv.Eventually(t, 20*time.Second, "four resumes", func() bool { return len(rr.all()) == 4 })
	require.Equal(t, map[string]int{a.ID: 1, bj.ID: 2, c.ID: 1}, rr.listed())
	var ids []string
	for _, s := range rr.all() {
		ids = append(ids, s.MessageID)
	}
	require.Contains(t, ids, "resume-"+bj.ID+"-r1")
}
