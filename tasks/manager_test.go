package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/maintenance"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/work"
)

type testBundle struct {
	env *testenv.Env
	m   *Manager
	cfg bgjobs.Config
	now atomic.Pointer[time.Time] // nil: real time
}

type setupOpt func(*bgjobs.Config, *Deps)

func setup(t *testing.T, opts ...setupOpt) *testBundle {
	t.Helper()
	return setupOn(t, testenv.New(t), opts...)
}

// setupOn is setup on a given Redis space.
func setupOn(t *testing.T, env *testenv.Env, opts ...setupOpt) *testBundle {
	t.Helper()
	b := &testBundle{env: env}
	cfg := bgjobs.Config{Namespace: env.Namespace, AgentAllow: []string{"127.0.0.1"}, PollInterval: 10 * time.Millisecond, WorkConcurrency: 20, ShutdownTimeout: 2 * time.Second}
	d := Deps{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time {
		if p := b.now.Load(); p != nil {
			return *p
		}
		return time.Now()
	}}
	for _, o := range opts {
		o(&cfg, &d)
	}
	b.cfg = cfg.WithDefaults()
	b.m = NewManager(env.RDB, b.cfg, d)
	t.Cleanup(func() { _ = b.m.Close() })
	return b
}

// startWorker runs the asynq servers until the test ends.
func (b *testBundle) startWorker(t *testing.T) {
	t.Helper()
	w := b.m.NewWorker()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Shutdown)
}

func echoSpawn(session, text string, delayMS int, fail bool) SpawnRequest {
	args, _ := json.Marshal(work.EchoArgs{Text: text, DelayMS: delayMS, Fail: fail})
	return SpawnRequest{Agent: "alpha", OriginSession: session, Kind: bgjobs.KindWork, Description: "echo " + text,
		Work: &bgjobs.WorkSpec{Type: "echo", Args: args}}
}

func (b *testBundle) spawn(t *testing.T, req SpawnRequest) *bgjobs.Job {
	t.Helper()
	j, _, err := b.m.Spawn(context.Background(), req)
	require.NoError(t, err)
	return j
}

// drain drains agent alpha's session.
func (b *testBundle) drain(t *testing.T, session string) []bgjobs.Notification {
	t.Helper()
	ns, err := b.m.Drain(context.Background(), "alpha", session, "")
	require.NoError(t, err)
	return ns
}

func (b *testBundle) waitStatus(t *testing.T, id string, want bgjobs.Status, timeout time.Duration) *bgjobs.Job {
	t.Helper()
	var j *bgjobs.Job
	testenv.Eventually(t, timeout, fmt.Sprintf("%s to be %s", id, want), func() bool {
		var err error
		j, err = b.m.Get(context.Background(), "alpha", id)
		require.NoError(t, err)
		return j.Status == want
	})
	return j
}

func TestSpawnRunDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()

	ok := b.spawn(t, echoSpawn("chat-1", "hello", 0, false))
	bad := b.spawn(t, echoSpawn("chat-1", "boom", 0, true))
	require.Equal(t, bgjobs.StatusQueued, ok.Status)
	j := b.waitStatus(t, ok.ID, bgjobs.StatusCompleted, 10*time.Second)
	require.Equal(t, "hello", *j.Result)
	require.Equal(t, 1, j.Attempts)
	require.NotNil(t, j.StartedAt)
	require.NotNil(t, j.CompletedAt)
	f := b.waitStatus(t, bad.ID, bgjobs.StatusFailed, 10*time.Second)
	require.Equal(t, "boom", *f.Error)
	require.Equal(t, 1, f.Attempts, "a failure the kind did not mark retryable is final")

	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 2)
	got := map[string]bgjobs.Notification{ns[0].JobID: ns[0], ns[1].JobID: ns[1]}
	require.Contains(t, got[ok.ID].Text, "<result>hello</result>")
	require.Contains(t, got[bad.ID].Text, "<error>boom</error>")
	require.Contains(t, got[bad.ID].Text, "<status>failed</status>")

	again := b.drain(t, "chat-1")
	require.Empty(t, again)

	j, err := b.m.Get(ctx, "alpha", ok.ID)
	require.NoError(t, err)
	require.True(t, j.Notified)
}

func TestDrainOldestCompletionFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ids []string
	for i := range 5 {
		j := b.spawn(t, echoSpawn("chat-1", fmt.Sprint(i), 0, false))
		ids = append(ids, j.ID)
	}
	// Settle in reverse spawn order, at distinct instants.
	base := time.Now()
	for i, id := range slices.Backward(ids) {
		at := base.Add(time.Duration(5-i) * time.Second)
		b.now.Store(&at)
		j, err := b.m.store.Lookup(ctx, id)
		require.NoError(t, err)
		r := "r"
		_, err = b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
		require.NoError(t, err)
	}
	ns := b.drain(t, "chat-1")
	var got []string
	for _, n := range ns {
		got = append(got, n.JobID)
	}
	want := slices.Clone(ids)
	slices.Reverse(want)
	require.Equal(t, want, got)
}

// Eight goroutines drain one session while 500 jobs complete: every job is
// handed over exactly once.
func TestDrainExactlyOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *bgjobs.Config, _ *Deps) { c.WorkConcurrency = 50 })
	b.startWorker(t)
	ctx := context.Background()
	const n = 500
	want := map[string]bool{}
	var spawnWG sync.WaitGroup
	var mu sync.Mutex
	for w := range 10 {
		spawnWG.Go(func() {
			for i := range n / 10 {
				j := b.spawn(t, echoSpawn("chat-x", fmt.Sprintf("%d-%d", w, i), i%3, false))
				mu.Lock()
				want[j.ID] = true
				mu.Unlock()
			}
		})
	}
	drained := make([][]string, 8)
	var total atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for d := range 8 {
		wg.Go(func() {
			for total.Load() < n && time.Now().Before(deadline) {
				ns, err := b.m.Drain(ctx, "alpha", "chat-x", "")
				if err != nil {
					t.Error(err)
					return
				}
				for _, x := range ns {
					drained[d] = append(drained[d], x.JobID)
				}
				total.Add(int64(len(ns)))
				time.Sleep(time.Millisecond)
			}
		})
	}
	spawnWG.Wait()
	wg.Wait()
	seen := map[string]int{}
	for _, ids := range drained {
		for _, id := range ids {
			seen[id]++
		}
	}
	require.Len(t, seen, n, "the union of the drained sets is every job")
	for id, c := range seen {
		require.Equal(t, 1, c, "job %s drained %d times", id, c)
		require.True(t, want[id])
	}
}

// A settle that runs twice (a re-run after a lost lease) leaves one terminal
// state and one notification.
func TestSettleTwiceIsOneOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-1", "x", 0, false))
	tag := bgjobs.Tag(j.Agent, j.OriginSession)

	st, err := b.m.store.Start(ctx, tag, j.ID, time.Now())
	require.NoError(t, err)
	require.Equal(t, registry.Started{Job: st.Job, Attempt: 1, Rerun: false}, st)
	// The lease was lost: asynq runs the task again while the row is running.
	st, err = b.m.store.Start(ctx, tag, j.ID, time.Now())
	require.NoError(t, err)
	require.Equal(t, registry.Started{Job: st.Job, Attempt: 2, Rerun: true}, st)

	first, second := "first", "second"
	ok, err := b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &first})
	require.NoError(t, err)
	require.True(t, ok)
	msg := "late failure"
	ok, err = b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusFailed, Error: &msg})
	require.NoError(t, err)
	require.False(t, ok, "a terminal job never changes")
	ok, err = b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &second})
	require.NoError(t, err)
	require.False(t, ok)
	_, err = b.m.store.Start(ctx, tag, j.ID, time.Now())
	require.ErrorIs(t, err, registry.ErrEnded, "a terminal job does not start again")

	got, err := b.m.Get(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCompleted, got.Status)
	require.Equal(t, "first", *got.Result)
	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 1)
}

func TestDrainIdempotencyKeyReplays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-1", "x", 0, false))
	r := "done"
	_, err := b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
	require.NoError(t, err)

	first, err := b.m.Drain(ctx, "alpha", "chat-1", "turn-7")
	require.NoError(t, err)
	require.Len(t, first, 1)
	// The response was lost; the client retries with the same key.
	again, err := b.m.Drain(ctx, "alpha", "chat-1", "turn-7")
	require.NoError(t, err)
	require.Equal(t, first, again)
	// Another key sees nothing new.
	other, err := b.m.Drain(ctx, "alpha", "chat-1", "turn-8")
	require.NoError(t, err)
	require.Empty(t, other)
}

func TestAckSharesTheDrainFlip(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-1", "x", 0, false))
	_, err := b.m.Ack(ctx, "alpha", j.ID)
	require.Equal(t, bgjobs.EConflict, bgjobs.ErrorCode(err), "a job that has not ended cannot be acked")

	r := "done"
	_, err = b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
	require.NoError(t, err)
	flipped, err := b.m.Ack(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.True(t, flipped)
	flipped, err = b.m.Ack(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.False(t, flipped)
	ns := b.drain(t, "chat-1")
	require.Empty(t, ns, "an acked job is not drained")
}

// The seed bug: an unread completion must never age out, however long the
// parent takes; retention starts only once it was notified.
func TestUnreadResultNeverExpires(t *testing.T) {
	t.Parallel()
	// Ageing keys by months needs miniredis' clock, so this test always
	// runs on its own miniredis, in CI too.
	b := setupOn(t, testenv.NewMini(t))
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-1", "x", 0, false))
	r := "done"
	_, err := b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
	require.NoError(t, err)

	b.env.Mini.FastForward(90 * 24 * time.Hour)
	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 1, "still delivered after 90 days unread")

	ttl := b.env.Mini.TTL(b.m.store.Keys().Job(bgjobs.Tag("alpha", "chat-1"), j.ID))
	require.Equal(t, b.cfg.Retention, ttl, "retention applies once notified")
	b.env.Mini.FastForward(b.cfg.Retention + time.Second)
	_, err = b.m.Get(ctx, "alpha", j.ID)
	require.Equal(t, bgjobs.ENotFound, bgjobs.ErrorCode(err))
}

func TestCancelQueuedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-1", "never", 0, false))
	got, err := b.m.Cancel(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, got.Status)
	_, err = b.m.Cancel(ctx, "alpha", j.ID)
	require.Equal(t, bgjobs.EConflict, bgjobs.ErrorCode(err))

	// A worker that starts now finds nothing to run.
	b.startWorker(t)
	time.Sleep(300 * time.Millisecond)
	got, err = b.m.Get(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, got.Status)
	require.Equal(t, 0, got.Attempts, "a cancelled queued job never runs")
	require.Nil(t, got.Result)

	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 1)
	require.Contains(t, ns[0].Text, "<status>cancelled</status>")
	ns = b.drain(t, "chat-1")
	require.Empty(t, ns)
}

func TestCancelRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-1", "slow", 20000, false))
	b.waitStatus(t, j.ID, bgjobs.StatusRunning, 10*time.Second)

	got, err := b.m.Cancel(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, got.Status)

	// The handler stops and asynq lets the task go: it is not retried.
	queue := b.m.Queue(QueueWork)
	testenv.Eventually(t, 30*time.Second, "the task to leave the queue", func() bool {
		info, err := b.m.Inspector().GetTaskInfo(queue, j.ID)
		return err != nil || (info.State != asynq.TaskStateActive && info.State != asynq.TaskStatePending)
	})
	time.Sleep(1500 * time.Millisecond)
	got, err = b.m.Get(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, got.Status)
	require.Equal(t, 1, got.Attempts, "not retried")

	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 1)
	ns = b.drain(t, "chat-1")
	require.Empty(t, ns)
}

func TestReconcileSettlesLostJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// The sweep reads 200 jobs at a time: the lost ones come on its second
	// and third pages.
	var backlog []*bgjobs.Job
	for i := range 250 {
		backlog = append(backlog, b.spawn(t, echoSpawn(fmt.Sprint("chat-", 2+i%5), "backlog", 0, false)))
	}
	gone := b.spawn(t, echoSpawn("chat-1", "gone", 0, false))
	for range 200 {
		backlog = append(backlog, b.spawn(t, echoSpawn("chat-7", "backlog", 0, false)))
	}
	archived := b.spawn(t, echoSpawn("chat-1", "archived", 0, false))
	fine := b.spawn(t, echoSpawn("chat-1", "fine", 0, false))
	queue := b.m.Queue(QueueWork)
	require.NoError(t, b.m.Inspector().DeleteTask(queue, gone.ID))
	require.NoError(t, b.m.Inspector().ArchiveTask(queue, archived.ID))

	n, err := b.m.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "young jobs are left alone: their task may be a moment away")

	later := time.Now().Add(2 * maintenance.ReconcileGrace)
	b.now.Store(&later)
	n, err = b.m.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	g, err := b.m.Get(ctx, "alpha", gone.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusFailed, g.Status)
	require.Contains(t, *g.Error, "task is gone")
	a, err := b.m.Get(ctx, "alpha", archived.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusFailed, a.Status)
	require.Contains(t, *a.Error, "gave up")
	f, err := b.m.Get(ctx, "alpha", fine.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusQueued, f.Status)

	for _, j := range backlog {
		require.Equal(t, bgjobs.StatusQueued, b.statusOf(t, j.ID), "a queued job whose task waits is left alone")
	}

	n, err = b.m.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a second sweep changes nothing")
	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 2)
}

// blockingTurns is a TurnRunner that holds every turn until released, and
// counts how many run at once.
type blockingTurns struct {
	running, peak atomic.Int64
	release       chan struct{}
}

func (bt *blockingTurns) RunTurn(ctx context.Context, t bgjobs.Turn) (string, error) {
	n := bt.running.Add(1)
	defer bt.running.Add(-1)
	for {
		p := bt.peak.Load()
		if n <= p || bt.peak.CompareAndSwap(p, n) {
			break
		}
	}
	select {
	case <-bt.release:
		return "report for " + t.JobID, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Two worker processes, a global cap of 2: never more than two turns run,
// and the rest stay queued until a slot frees.
func TestTurnCapIsGlobal(t *testing.T) {
	t.Parallel()
	bt := &blockingTurns{release: make(chan struct{})}
	withCap := func(c *bgjobs.Config, d *Deps) { c.TurnConcurrency = 2; d.Turns = bt }
	b := setup(t, withCap)
	second := NewManager(b.env.RDB, b.cfg, Deps{Turns: bt})
	t.Cleanup(func() { _ = second.Close() })
	b.startWorker(t)
	w2 := second.NewWorker()
	require.NoError(t, w2.Start(context.Background()))
	t.Cleanup(w2.Shutdown)

	ctx := context.Background()
	require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: "alpha", A2AURL: "http://127.0.0.1:1/a2a"}))
	var ids []string
	for i := range 5 {
		j := b.spawn(t, SpawnRequest{Agent: "alpha", OriginSession: "chat-1", Kind: bgjobs.KindTurn, Description: "t", Prompt: fmt.Sprint(i)})
		ids = append(ids, j.ID)
	}
	count := func() map[bgjobs.Status]int {
		c := map[bgjobs.Status]int{}
		for _, id := range ids {
			j, err := b.m.Get(ctx, "alpha", id)
			require.NoError(t, err)
			c[j.Status]++
		}
		return c
	}
	testenv.Eventually(t, 10*time.Second, "two turns running", func() bool { return count()[bgjobs.StatusRunning] == 2 })
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, map[bgjobs.Status]int{bgjobs.StatusRunning: 2, bgjobs.StatusQueued: 3}, count())
	close(bt.release)
	testenv.Eventually(t, 20*time.Second, "all turns completed", func() bool { return count()[bgjobs.StatusCompleted] == 5 })
	require.LessOrEqual(t, bt.peak.Load(), int64(2))
}

// silentTurns answers the good agent's turns at once and holds the
// silent agent's until the test ends: an agent that accepts a connection
// and never answers.
type silentTurns struct{ silentURL string }

func (st silentTurns) RunTurn(ctx context.Context, t bgjobs.Turn) (string, error) {
	if t.AgentURL == st.silentURL {
		<-ctx.Done()
		return "", ctx.Err()
	}
	return "report for " + t.JobID, nil
}

// statusOf is one of alpha's jobs' status.
func (b *testBundle) statusOf(t *testing.T, id string) bgjobs.Status {
	t.Helper()
	j, err := b.m.Get(context.Background(), "alpha", id)
	require.NoError(t, err)
	return j.Status
}

// statusCounts counts agent's jobs ids by status.
func (b *testBundle) statusCounts(t *testing.T, agent string, ids []string) map[bgjobs.Status]int {
	t.Helper()
	c := map[bgjobs.Status]int{}
	for _, id := range ids {
		j, err := b.m.Get(context.Background(), agent, id)
		require.NoError(t, err)
		c[j.Status]++
	}
	return c
}

// A tenant whose agent never answers holds its share of the global cap,
// not all of it: another agent's turn still runs at once. A lone agent
// uses the whole cap.
func TestTurnShareLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	const silentURL = "http://127.0.0.1:1/silent"
	ctx := context.Background()
	statuses := func(b *testBundle, agent string, ids []string) map[bgjobs.Status]int {
		return b.statusCounts(t, agent, ids)
	}
	spawnTurns := func(b *testBundle, agent string, n int) []string {
		var ids []string
		for i := range n {
			ids = append(ids, b.spawn(t, SpawnRequest{Agent: agent, OriginSession: "chat-1", Kind: bgjobs.KindTurn, Description: "t", Prompt: fmt.Sprint(i)}).ID)
		}
		return ids
	}
	withCap := func(c *bgjobs.Config, d *Deps) { c.TurnConcurrency = 3; d.Turns = silentTurns{silentURL} }

	t.Run("lone agent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withCap)
		b.startWorker(t)
		require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: "silent", A2AURL: silentURL}))
		ids := spawnTurns(b, "silent", 5)
		testenv.Eventually(t, 30*time.Second, "the whole cap in use", func() bool { return statuses(b, "silent", ids)[bgjobs.StatusRunning] == 3 })
	})

	t.Run("two tenants", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withCap)
		b.startWorker(t)
		require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: "silent", A2AURL: silentURL}))
		require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: "good", A2AURL: "http://127.0.0.1:1/good"}))
		silent := spawnTurns(b, "silent", 6)
		testenv.Eventually(t, 30*time.Second, "the silent agent holds its share", func() bool { return statuses(b, "silent", silent)[bgjobs.StatusRunning] == 2 })
		// The silent agent's other turns come back to the queue, again
		// and again, while its share is held: they stay queued.
		time.Sleep(2500 * time.Millisecond)
		require.Equal(t, map[bgjobs.Status]int{bgjobs.StatusRunning: 2, bgjobs.StatusQueued: 4}, statuses(b, "silent", silent))

		start := time.Now()
		good := spawnTurns(b, "good", 2)
		testenv.Eventually(t, 30*time.Second, "the good agent's turns completed", func() bool { return statuses(b, "good", good)[bgjobs.StatusCompleted] == 2 })
		t.Logf("another agent's two turns completed %s after their spawn, beside a silent agent holding its share", time.Since(start).Round(time.Millisecond))
		for _, id := range good {
			j, err := b.m.Get(ctx, "good", id)
			require.NoError(t, err)
			require.EqualValues(t, 1, j.Attempts, "a turn is not charged for its waits")
		}
		require.Equal(t, 2, statuses(b, "silent", silent)[bgjobs.StatusRunning], "the share still holds")
	})
}

// The same for a process's work slots: one tenant's long work jobs hold
// its share of them, and another agent's work runs at once beside them; a
// lone agent uses every slot.
func TestWorkShareLeavesRoomForOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	statuses := func(b *testBundle, agent string, ids []string) map[bgjobs.Status]int {
		return b.statusCounts(t, agent, ids)
	}
	spawnEchoes := func(b *testBundle, agent string, n, delayMS int) []string {
		var ids []string
		for i := range n {
			req := echoSpawn("chat-1", fmt.Sprint(i), delayMS, false)
			req.Agent = agent
			ids = append(ids, b.spawn(t, req).ID)
		}
		return ids
	}
	const long = 10 * 60 * 1000 // ms: the hog's jobs outlast the test
	withSlots := func(c *bgjobs.Config, _ *Deps) { c.WorkConcurrency = 4 }

	t.Run("lone agent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withSlots)
		b.startWorker(t)
		require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: "hog"}))
		ids := spawnEchoes(b, "hog", 5, long)
		testenv.Eventually(t, 30*time.Second, "every slot in use", func() bool { return statuses(b, "hog", ids)[bgjobs.StatusRunning] == 4 })
	})

	t.Run("two tenants", func(t *testing.T) {
		t.Parallel()
		b := setup(t, withSlots)
		b.startWorker(t)
		// Neither is registered: work needs no agent configuration, so
		// their spawns are what tell the namespace it has two tenants.
		good := spawnEchoes(b, "good", 1, 0)
		testenv.Eventually(t, 30*time.Second, "the good agent's first job", func() bool { return statuses(b, "good", good)[bgjobs.StatusCompleted] == 1 })
		hog := spawnEchoes(b, "hog", 6, long)
		testenv.Eventually(t, 30*time.Second, "the hog holds its share", func() bool { return statuses(b, "hog", hog)[bgjobs.StatusRunning] == 2 })

		good = spawnEchoes(b, "good", 3, 0)
		testenv.Eventually(t, 30*time.Second, "the good agent's work completed", func() bool { return statuses(b, "good", good)[bgjobs.StatusCompleted] == 3 })
		for _, id := range good {
			j, err := b.m.Get(ctx, "good", id)
			require.NoError(t, err)
			require.EqualValues(t, 1, j.Attempts)
		}
		// The hog's other jobs went back to the queue, not to a slot, and
		// were not charged an attempt for it.
		require.Equal(t, map[bgjobs.Status]int{bgjobs.StatusRunning: 2, bgjobs.StatusQueued: 4}, statuses(b, "hog", hog))
		for _, id := range hog {
			j, err := b.m.Get(ctx, "hog", id)
			require.NoError(t, err)
			require.LessOrEqual(t, j.Attempts, 1)
		}
	})
}

// A job sent back past its agent's share (of the work slots, of the turn
// cap) waits there without coming back every second: one of its agent's
// slots freeing on this process brings the next one back. Here the waits
// are a minute, so jobs that all end well within it were brought back by
// freed slots.
func TestPastItsShareAJobWaitsForAFreedSlot(t *testing.T) {
	t.Parallel()
	for _, kind := range []bgjobs.Kind{bgjobs.KindWork, bgjobs.KindTurn} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t, func(c *bgjobs.Config, d *Deps) {
				c.WorkConcurrency, c.TurnConcurrency, c.TurnShare = 4, 4, 2
				d.Turns = heldTurns{}
			})
			lot := b.m.workParked
			if kind == bgjobs.KindTurn {
				lot = b.m.turnsParked
			}
			lot.Waits(time.Minute, time.Minute)
			b.startWorker(t)
			spawn := func(agent string, n int, hold bool) []string {
				var ids []string
				for i := range n {
					req := echoSpawn("chat-1", fmt.Sprint(i), 0, false)
					if hold {
						req = echoSpawn("chat-1", fmt.Sprint(i), int(holdFor.Milliseconds()), false)
					}
					if kind == bgjobs.KindTurn {
						req = SpawnRequest{OriginSession: "chat-1", Kind: bgjobs.KindTurn, Description: "t", Prompt: fmt.Sprint(hold)}
					}
					req.Agent = agent
					ids = append(ids, b.spawn(t, req).ID)
				}
				return ids
			}
			for _, a := range []string{"other", "busy"} {
				require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: a, A2AURL: "http://127.0.0.1:1/" + a}))
			}
			busy := spawn("busy", 2, true)
			testenv.Eventually(t, 30*time.Second, "the busy agent holds its share", func() bool { return b.statusCounts(t, "busy", busy)[bgjobs.StatusRunning] == 2 })
			start := time.Now()
			more := spawn("busy", 5, false)
			testenv.Eventually(t, 30*time.Second, "its other jobs sent back", func() bool { return lot.Parked() == 5 })
			testenv.Eventually(t, 45*time.Second, "every job of the busy agent completed", func() bool {
				return b.statusCounts(t, "busy", append(busy, more...))[bgjobs.StatusCompleted] == 7
			})
			t.Logf("five jobs parked behind two of %s completed %s after their spawn", holdFor, time.Since(start).Round(time.Millisecond))
			require.Less(t, time.Since(start), time.Minute, "brought back by freed slots, not by their waits")
			require.Zero(t, lot.Parked())
			for _, id := range more {
				j, err := b.m.Get(ctx, "busy", id)
				require.NoError(t, err)
				require.EqualValues(t, 1, j.Attempts, "waiting is not an attempt")
			}
		})
	}
}

// The turn cap is the fleet's: a turn ending on one process brings back a
// turn of its agent parked on another. Process one runs the busy agent's
// two long turns (its two turn workers full, so it fetches nothing else);
// process two, sharing the namespace, finds the agent at its share and
// parks its other turns, with waits of a minute.
func TestATurnEndingElsewhereBringsBackAParkedTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	one := setupOn(t, env, func(c *bgjobs.Config, d *Deps) { c.TurnConcurrency, c.TurnShare = 2, 2; d.Turns = heldTurns{} })
	two := setupOn(t, env, func(c *bgjobs.Config, d *Deps) { c.TurnConcurrency, c.TurnShare = 4, 2; d.Turns = heldTurns{} })
	two.m.turnsParked.Waits(time.Minute, time.Minute)
	for _, a := range []string{"other", "busy"} {
		require.NoError(t, one.m.PutAgent(ctx, &bgjobs.Agent{Name: a, A2AURL: "http://127.0.0.1:1/" + a}))
	}
	spawn := func(n int, hold bool) []string {
		var ids []string
		for range n {
			ids = append(ids, one.spawn(t, SpawnRequest{Agent: "busy", OriginSession: "chat-1", Kind: bgjobs.KindTurn, Description: "t", Prompt: fmt.Sprint(hold)}).ID)
		}
		return ids
	}
	one.startWorker(t)
	held := spawn(2, true)
	testenv.Eventually(t, 30*time.Second, "process one runs both long turns", func() bool { return one.statusCounts(t, "busy", held)[bgjobs.StatusRunning] == 2 })
	two.startWorker(t)
	start := time.Now()
	more := spawn(3, false)
	testenv.Eventually(t, 30*time.Second, "process two parks the rest", func() bool { return two.m.turnsParked.Parked() == 3 })
	testenv.Eventually(t, 45*time.Second, "every turn completed", func() bool {
		return one.statusCounts(t, "busy", append(held, more...))[bgjobs.StatusCompleted] == 5
	})
	t.Logf("three turns parked on process two completed %s after their spawn, brought back by turns ending on process one", time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), time.Minute, "brought back by the other process's news, not by their waits")
}

// Work slots are each process's own: a work job parked on one process
// (its agent at its share there) comes back when a slot frees on another
// process that has room for its agent. Process two runs another agent's
// two jobs, its only slots; process one runs the busy agent's one job (its
// share) and another long job, parking the busy agent's other three
// (waits of a minute) while it is full; when process two's jobs end, its
// room brings the three back, one by one, and only it can fetch them.
func TestAWorkSlotFreedElsewhereBringsBackParkedWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.New(t)
	one := setupOn(t, env, func(c *bgjobs.Config, d *Deps) { c.WorkConcurrency, c.WorkShare = 2, 1 })
	two := setupOn(t, env, func(c *bgjobs.Config, d *Deps) { c.WorkConcurrency, c.WorkShare = 2, 2 })
	one.m.workParked.Waits(time.Minute, time.Minute)
	for _, a := range []string{"other", "busy"} {
		require.NoError(t, one.m.PutAgent(ctx, &bgjobs.Agent{Name: a}))
	}
	spawn := func(agent string, n int, d time.Duration) []string {
		var ids []string
		for i := range n {
			req := echoSpawn("chat-1", fmt.Sprint(i), int(d.Milliseconds()), false)
			req.Agent = agent
			ids = append(ids, one.spawn(t, req).ID)
		}
		return ids
	}
	running := func(agent string, ids []string) func() bool {
		return func() bool { return one.statusCounts(t, agent, ids)[bgjobs.StatusRunning] == len(ids) }
	}
	two.startWorker(t)
	// Long enough for a loaded machine to park the busy agent's jobs on
	// process one meanwhile, well short of their minute-long waits.
	short := spawn("other", 2, 15*time.Second)
	testenv.Eventually(t, 30*time.Second, "process two runs the other agent's jobs", running("other", short))
	one.startWorker(t)
	long := spawn("busy", 1, 2*time.Minute)
	testenv.Eventually(t, 30*time.Second, "process one runs the busy agent's share", running("busy", long))
	start := time.Now()
	parked := spawn("busy", 3, 0)
	testenv.Eventually(t, 30*time.Second, "process one parks the rest", func() bool { return one.m.workParked.Parked() == 3 })
	long = append(long, spawn("other", 1, 2*time.Minute)...)
	testenv.Eventually(t, 30*time.Second, "process one is full", running("other", long[1:]))
	testenv.Eventually(t, 45*time.Second, "the parked jobs completed", func() bool {
		return one.statusCounts(t, "busy", parked)[bgjobs.StatusCompleted] == 3
	})
	t.Logf("three work jobs parked on process one completed %s after their spawn, brought back by room on process two", time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), time.Minute, "brought back by the other process's room, not by their waits")
	for i, id := range long {
		_, err := one.m.Cancel(ctx, []string{"busy", "other"}[i], id)
		require.NoError(t, err)
	}
}

// holdFor is how long the share's holders run in the parking tests: long
// enough for a loaded machine to fetch and park the other jobs meanwhile,
// well short of the parked jobs' minute-long waits.
const holdFor = 8 * time.Second

// heldTurns holds a turn whose prompt is "true" for holdFor and answers
// any other at once.
type heldTurns struct{}

func (heldTurns) RunTurn(ctx context.Context, t bgjobs.Turn) (string, error) {
	if t.Prompt == "true" {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(holdFor):
		}
	}
	return "report for " + t.JobID, nil
}

func TestListNewestFirstWithCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ids []string
	base := time.Now()
	for i := range 7 {
		at := base.Add(time.Duration(i) * time.Millisecond)
		b.now.Store(&at)
		ids = append(ids, b.spawn(t, echoSpawn("chat-1", fmt.Sprint(i), 0, false)).ID)
	}
	b.spawn(t, echoSpawn("chat-2", "other", 0, false))
	var got []string
	cursor := ""
	for {
		page, next, err := b.m.List(ctx, ListRequest{Agent: "alpha", Session: "chat-1", Limit: 3, Cursor: cursor})
		require.NoError(t, err)
		for _, j := range page {
			require.Nil(t, j.Result)
			got = append(got, j.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Reverse(ids)
	require.Equal(t, ids, got)

	all, _, err := b.m.List(ctx, ListRequest{Agent: "alpha"})
	require.NoError(t, err)
	require.Len(t, all, 8)
	none, _, err := b.m.List(ctx, ListRequest{Agent: "beta"})
	require.NoError(t, err)
	require.Empty(t, none)
}

// A batch's members share their spawn's millisecond: paging through more
// of them than a list reads at once lists every one, once, in order
// (pages of 50 listed 250 of a batch of 300, the rest taken for the end).
func TestListPagesThroughJobsSharingAMillisecond(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	at := time.Now()
	b.now.Store(&at)
	var specs []SpawnRequest
	for i := range 330 {
		specs = append(specs, SpawnRequest{Kind: bgjobs.KindWork, Description: fmt.Sprint("member ", i), Work: &bgjobs.WorkSpec{Type: "echo", Args: []byte(`{"text":"x"}`)}})
	}
	_, err := b.m.SpawnBatch(ctx, "alpha", "chat-1", specs)
	require.NoError(t, err)
	later := at.Add(time.Millisecond)
	b.now.Store(&later)
	newest := b.spawn(t, echoSpawn("chat-1", "newest", 0, false))
	for _, limit := range []int{1, 50, 99, 100, 101, 200} {
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 400, "limit %d: the cursor goes on", limit)
			page, next, err := b.m.List(ctx, ListRequest{Agent: "alpha", Limit: limit, Cursor: cursor})
			require.NoError(t, err)
			for _, j := range page {
				got = append(got, j.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		require.Len(t, got, 331, "limit %d", limit)
		require.Equal(t, newest.ID, got[0])
		require.True(t, slices.IsSortedFunc(got[1:], func(a, b string) int { return strings.Compare(b, a) }), "limit %d: ids descending within the millisecond", limit)
		require.Len(t, slices.Compact(slices.Clone(got)), 331, "limit %d: each once", limit)
	}
}

func TestSpawnIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := echoSpawn("chat-1", "x", 0, false)
	req.IdempotencyKey = "k-1"
	first, existed, err := b.m.Spawn(ctx, req)
	require.NoError(t, err)
	require.False(t, existed)
	again, existed, err := b.m.Spawn(ctx, req)
	require.NoError(t, err)
	require.True(t, existed)
	require.Equal(t, first.ID, again.ID)
	req.Agent = "beta"
	other, existed, err := b.m.Spawn(ctx, req)
	require.NoError(t, err)
	require.False(t, existed, "keys are per agent")
	require.NotEqual(t, first.ID, other.ID)
}

func TestCutReportEndsAtABoundary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc, in, want string
		max            int
	}{
		{desc: "short stays whole", in: "One. Two.", max: 100, want: "One. Two."},
		{desc: "sentence boundary", in: "First sentence here. Second one is long and goes on.", max: 30, want: "First sentence here."},
		{desc: "line boundary", in: "line one is here\nline two goes on and on", max: 25, want: "line one is here"},
		{desc: "no boundary cuts hard", in: "abcdefghijklmnopqrstuvwxyz", max: 10, want: "abcdefghij"},
		{desc: "runes not bytes", in: "ééééééééééé", max: 4, want: "éééé"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			require.Equal(t, tc.want, CutReport(tc.in, tc.max))
		})
	}
}

// Every transition is published on the agent's event stream, in order.
func TestEventsArePublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.startWorker(t)
	j := b.spawn(t, echoSpawn("chat-1", "hello", 0, false))
	var got []bgjobs.Event
	after := map[string]string{"alpha": "0"}
	testenv.Eventually(t, 10*time.Second, "three events", func() bool {
		events, next, err := b.m.ReadEvents(ctx, after, 100*time.Millisecond)
		require.NoError(t, err)
		after = next
		for _, se := range events {
			var e bgjobs.Event
			require.NoError(t, json.Unmarshal([]byte(se.Data), &e))
			require.Equal(t, j.ID, e.JobID)
			require.Equal(t, e.Type, se.Type)
			got = append(got, e)
		}
		return len(got) >= 3
	})
	require.Equal(t, []string{bgjobs.EventStarted, bgjobs.EventRunning, bgjobs.EventCompleted}, []string{got[0].Type, got[1].Type, got[2].Type})
	require.Equal(t, bgjobs.StatusCompleted, got[2].Status)
	require.Equal(t, "hello", got[2].Result)
}

// A task asynq shows active with no live worker and no lease (asynq #1144:
// its recoverer never re-queues it) settles failed once it has run longer
// than maintenance.LostActiveAfter; a job a live worker reports stays running.
func TestReconcileSettlesActiveTaskWithNoWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	queue := b.m.Queue(QueueWork)
	lost := b.spawn(t, echoSpawn("chat-1", "lost", 0, false))
	// Move the task to active by hand, without a lease, as if the worker
	// that fetched it died and its lease entry went missing.
	rdb := b.env.RDB
	require.NoError(t, rdb.LRem(ctx, "asynq:{"+queue+"}:pending", 0, lost.ID).Err())
	require.NoError(t, rdb.LPush(ctx, "asynq:{"+queue+"}:active", lost.ID).Err())
	require.NoError(t, rdb.HSet(ctx, "asynq:{"+queue+"}:t:"+lost.ID, "state", "active").Err())
	st, err := b.m.store.Start(ctx, bgjobs.Tag("alpha", "chat-1"), lost.ID, time.Now())
	require.NoError(t, err)
	require.False(t, st.Rerun)

	working := b.spawn(t, echoSpawn("chat-1", "working", 60_000, false))
	b.startWorker(t)
	b.waitStatus(t, working.ID, bgjobs.StatusRunning, 10*time.Second)
	testenv.Eventually(t, 15*time.Second, "the worker's heartbeat to report the running task", func() bool {
		live, err := b.m.eng.LiveTaskIDs()
		return err == nil && live[working.ID] && !live[lost.ID]
	})

	n, err := b.m.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a task active for less than maintenance.LostActiveAfter may still be recovered by asynq")

	later := time.Now().Add(maintenance.LostActiveAfter + maintenance.ReconcileGrace)
	b.now.Store(&later)
	n, err = b.m.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	l, err := b.m.Get(ctx, "alpha", lost.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusFailed, l.Status)
	require.Contains(t, *l.Error, "no live worker")
	w, err := b.m.Get(ctx, "alpha", working.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusRunning, w.Status, "a job a live worker reports is left alone")

	_, err = b.m.Cancel(ctx, "alpha", working.ID)
	require.NoError(t, err)
	b.waitStatus(t, working.ID, bgjobs.StatusCancelled, 10*time.Second)
	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 2)
}

// Rows expire after retention; the sweep drops their ids from the job index
// and the session's and agent's lists, and leaves live rows alone.
func TestReconcileDropsIndexEntriesOfExpiredRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.startWorker(t)
	var read []*bgjobs.Job
	for i := range 3 {
		read = append(read, b.spawn(t, echoSpawn("chat-1", fmt.Sprint("read ", i), 0, false)))
	}
	for _, j := range read {
		b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 10*time.Second)
	}
	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 3)
	unread := b.spawn(t, echoSpawn("chat-1", "unread", 0, false))
	b.waitStatus(t, unread.ID, bgjobs.StatusCompleted, 10*time.Second)

	// Two notified rows reach the end of their retention.
	tag := bgjobs.Tag("alpha", "chat-1")
	for _, j := range read[:2] {
		require.NoError(t, b.env.RDB.Del(ctx, b.m.store.Keys().Job(tag, j.ID)).Err())
	}
	_, err := b.m.Reconcile(ctx)
	require.NoError(t, err)

	idx, err := b.env.RDB.HKeys(ctx, b.m.store.Keys().JobIndex()).Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{read[2].ID, unread.ID}, idx)
	for _, key := range []string{b.m.store.Keys().SessionJobs(tag), b.m.store.Keys().AgentJobs("alpha")} {
		ids, err := b.env.RDB.ZRange(ctx, key, 0, -1).Result()
		require.NoError(t, err)
		require.ElementsMatch(t, []string{read[2].ID, unread.ID}, ids, key)
	}
	ns = b.drain(t, "chat-1")
	require.Len(t, ns, 1, "the unread result is still there")
	require.Equal(t, unread.ID, ns[0].JobID)
}

// A Manager on a cluster client (an embedder's choice) spawns through the
// path that sends the row in its own round trip before the task (a cluster
// pipeline goes out per node in no set order); the job runs and drains.
func TestSpawnOnAClusterClient(t *testing.T) {
	t.Parallel()
	// miniredis answers the cluster commands as a single node, so this runs
	// on its own miniredis, in CI too.
	env := testenv.NewMini(t)
	env.RDB = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{env.Mini.Addr()}})
	t.Cleanup(func() { _ = env.RDB.Close() })
	b := setupOn(t, env)
	b.startWorker(t)
	j := b.spawn(t, echoSpawn("chat-1", "over a cluster", 0, false))
	b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 10*time.Second)
	ns := b.drain(t, "chat-1")
	require.Len(t, ns, 1)
	require.Contains(t, ns[0].Text, "<result>over a cluster</result>")
}

// A worker's own spawns (origin "background:<job id>") must name a job of
// the same agent, nest at most MaxDepth deep, and go with retention once
// they end (no one drains a worker's own session).
func TestDepthFence(t *testing.T) {
	t.Parallel()
	b := setupOn(t, testenv.NewMini(t), func(c *bgjobs.Config, _ *Deps) { c.MaxDepth = 2 })
	ctx := context.Background()
	root := b.spawn(t, echoSpawn("chat-1", "root", 0, false))
	require.Equal(t, 0, root.Depth)

	for _, tc := range []struct {
		desc, origin, agent string
	}{
		{"no such job", bgjobs.BackgroundPrefix + "bg-000000000000", "alpha"},
		{"another agent's job", bgjobs.BackgroundPrefix + root.ID, "beta"},
	} {
		req := echoSpawn(tc.origin, "x", 0, false)
		req.Agent = tc.agent
		_, _, err := b.m.Spawn(ctx, req)
		var e *bgjobs.Error
		require.ErrorAs(t, err, &e, tc.desc)
		require.Equal(t, bgjobs.EInvalid, e.Code, tc.desc)
		require.Equal(t, "origin_session", e.Field, tc.desc)
	}

	child := b.spawn(t, echoSpawn(bgjobs.BackgroundPrefix+root.ID, "child", 0, false))
	require.Equal(t, 1, child.Depth)
	grandchild := b.spawn(t, echoSpawn(bgjobs.BackgroundPrefix+child.ID, "grandchild", 0, false))
	require.Equal(t, 2, grandchild.Depth)
	_, _, err := b.m.Spawn(ctx, echoSpawn(bgjobs.BackgroundPrefix+grandchild.ID, "too deep", 0, false))
	require.Equal(t, bgjobs.EInvalid, bgjobs.ErrorCode(err))
	require.Contains(t, err.Error(), "at most 2 deep")
	got, err := b.m.Get(ctx, "alpha", grandchild.ID)
	require.NoError(t, err)
	require.Equal(t, 2, got.Depth, "depth is kept on the row")

	r := "done"
	_, err = b.m.follow.Settle(ctx, child, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
	require.NoError(t, err)
	ttl := b.env.Mini.TTL(b.m.store.Keys().Job(bgjobs.Tag("alpha", child.OriginSession), child.ID))
	require.Equal(t, b.cfg.Retention, ttl, "an ended worker's spawn goes with retention, unread")
}

// GetMany reads many rows at once, in order, leaving out other agents'
// jobs and ids that do not exist.
func TestGetMany(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	a1 := b.spawn(t, echoSpawn("chat-m", "1", 0, false))
	a2 := b.spawn(t, echoSpawn("chat-n", "2", 0, false))
	other := echoSpawn("chat-m", "3", 0, false)
	other.Agent = "beta"
	theirs := b.spawn(t, other)
	got, err := b.m.GetMany(ctx, "alpha", []string{a2.ID, theirs.ID, "bg-000000000000", a1.ID})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, []string{a2.ID, a1.ID}, []string{got[0].ID, got[1].ID})
	require.Equal(t, "echo 2", got[0].Description)
	none, err := b.m.GetMany(ctx, "alpha", nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// At the shutdown timeout asynq gives up on a running handler and returns
// without waiting for it. A handler slow to notice (a loaded machine) still
// hands its row back before Shutdown returns, through a writer that is
// still running: the row is queued again, and stays so, rather than left
// running or ended cancelled once Shutdown is through.
func TestShutdownWaitsForHandlersToHandBack(t *testing.T) {
	t.Parallel()
	kinds := work.NewKinds()
	kinds.Register(work.Kind{Name: "slow", Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
		<-ctx.Done()
		time.Sleep(300 * time.Millisecond) // notices late
		return "", ctx.Err()
	}})
	b := setup(t, func(c *bgjobs.Config, d *Deps) { c.ShutdownTimeout = 200 * time.Millisecond; d.Kinds = kinds })
	w := b.m.NewWorker()
	require.NoError(t, w.Start(context.Background()))
	j := b.spawn(t, SpawnRequest{Agent: "alpha", OriginSession: "chat-sd", Kind: bgjobs.KindWork, Description: "slow",
		Work: &bgjobs.WorkSpec{Type: "slow", Args: json.RawMessage(`{}`)}})
	b.waitStatus(t, j.ID, bgjobs.StatusRunning, 10*time.Second)
	w.Shutdown()
	got, err := b.m.Get(context.Background(), "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusQueued, got.Status, "handed back before Shutdown returned")
	b.m.running.Wait(10 * time.Second) // past the handler's late look
	got, err = b.m.Get(context.Background(), "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusQueued, got.Status, "still queued for the next process")
}

// Cancelling a job cancels what its own turn spawned (origin
// background:<id>) and theirs in turn, each with a reason naming it; what
// already ended, and other sessions' jobs, stay as they were.
func TestCancelReachesWhatTheJobSpawned(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	const long = 10 * 60 * 1000
	root := b.spawn(t, echoSpawn("chat-tree", "root", long, false))
	child := b.spawn(t, echoSpawn(bgjobs.BackgroundPrefix+root.ID, "child", long, false))
	grandchild := b.spawn(t, echoSpawn(bgjobs.BackgroundPrefix+child.ID, "grandchild", long, false))
	done := b.spawn(t, echoSpawn(bgjobs.BackgroundPrefix+root.ID, "quick", 0, false))
	other := b.spawn(t, echoSpawn("chat-other", "bystander", long, false))
	b.waitStatus(t, done.ID, bgjobs.StatusCompleted, 10*time.Second)
	b.waitStatus(t, grandchild.ID, bgjobs.StatusRunning, 10*time.Second)

	got, err := b.m.Cancel(ctx, "alpha", root.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, got.Status)
	for _, j := range []*bgjobs.Job{child, grandchild} {
		c := b.waitStatus(t, j.ID, bgjobs.StatusCancelled, 10*time.Second)
		require.NotNil(t, c.Error)
		require.Contains(t, *c.Error, "whose turn spawned it")
	}
	c, err := b.m.Get(ctx, "alpha", child.ID)
	require.NoError(t, err)
	require.Contains(t, *c.Error, root.ID)
	require.Equal(t, bgjobs.StatusCompleted, b.statusOf(t, done.ID))
	require.Equal(t, bgjobs.StatusRunning, b.statusOf(t, other.ID))
	_, err = b.m.Cancel(ctx, "alpha", other.ID)
	require.NoError(t, err)

	// A spawn arriving late for the cancelled turn is refused.
	_, _, err = b.m.Spawn(ctx, echoSpawn(bgjobs.BackgroundPrefix+root.ID, "late", 0, false))
	var be *bgjobs.Error
	require.ErrorAs(t, err, &be)
	require.Equal(t, bgjobs.EConflict, be.Code)
	require.Equal(t, "origin_session", be.Field)
}

// A job spawned with StartIn waits queued, its task in asynq's scheduled
// set, until its time and then runs as any other; a cancel meanwhile takes
// its task away. Past the cap, negative, or with a wait or a turn, it is
// refused on start_in_s.
func TestStartInHoldsAJobBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	req := echoSpawn("chat-1", "later", 0, false)
	req.StartIn = 2 * time.Second
	j := b.spawn(t, req)
	require.Equal(t, j.CreatedAt.Add(2*time.Second), j.RunAt)
	info, err := b.m.Inspector().GetTaskInfo(b.m.eng.QueueOf(j), j.ID)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateScheduled, info.State)
	got, err := b.m.Get(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusQueued, got.Status)
	require.True(t, got.RunAt.Equal(j.RunAt), "run_at is on the row")
	done := b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 30*time.Second)
	require.False(t, done.StartedAt.Before(j.RunAt.Add(-time.Second)), "started %s, due %s", done.StartedAt, j.RunAt)
	require.Len(t, b.drain(t, "chat-1"), 1, "then drained as any other")

	req.StartIn = time.Hour
	later := b.spawn(t, req)
	var due []string
	require.NoError(t, b.m.store.EachActiveBefore(ctx, time.Now().Add(time.Minute), 100, func(ids []string) error {
		due = append(due, ids...)
		return nil
	}))
	require.NotContains(t, due, later.ID, "the reconciler leaves it alone until its time")
	_, err = b.m.Cancel(ctx, "alpha", later.ID)
	require.NoError(t, err)
	st, err := b.m.eng.StateOf(later)
	require.NoError(t, err)
	require.True(t, st.Gone, "the cancel took its scheduled task away")

	b.requireRefused(t, "start_in_s", map[string]func(*SpawnRequest){
		"past the cap": func(r *SpawnRequest) { r.StartIn = StartInMax + time.Second },
		"negative":     func(r *SpawnRequest) { r.StartIn = -time.Second },
		"with a wait":  func(r *SpawnRequest) { r.StartIn, r.Wait = time.Minute, time.Second },
		"with a turn":  func(r *SpawnRequest) { r.StartIn, r.TurnID = time.Minute, "turn-1" },
	})
}

// requireRefused spawns an echo job changed by each of bad and requires a
// 400 naming field.
func (b *testBundle) requireRefused(t *testing.T, field string, bad map[string]func(*SpawnRequest)) {
	t.Helper()
	for name, change := range bad {
		r := echoSpawn("chat-1", "x", 0, false)
		change(&r)
		_, _, err := b.m.Spawn(context.Background(), r)
		var e *bgjobs.Error
		require.ErrorAs(t, err, &e, name)
		require.Equal(t, bgjobs.EInvalid, e.Code, name)
		require.Equal(t, field, e.Field, name)
	}
}

// A job's own timeout_s bounds its run below the process's RunTimeout:
// past it the job ends failed, saying after how long; a job within it
// completes; a bound outside 1..RunTimeout is refused naming the field.
func TestAJobsOwnTimeoutEndsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	req := echoSpawn("chat-1", "slow", 60_000, false)
	req.TimeoutS = 1
	slow := b.spawn(t, req)
	got, err := b.m.Get(ctx, "alpha", slow.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, got.TimeoutS, "timeout_s is on the row")
	quick := echoSpawn("chat-1", "quick", 0, false)
	quick.TimeoutS = 30
	fast := b.spawn(t, quick)

	ended := b.waitStatus(t, slow.ID, bgjobs.StatusFailed, 30*time.Second)
	require.Equal(t, "timed out after 1s", *ended.Error)
	require.Less(t, ended.CompletedAt.Sub(*ended.StartedAt), 30*time.Second, "ended by its own bound, not the delay")
	require.Equal(t, 1, ended.Attempts, "not retried")
	b.waitStatus(t, fast.ID, bgjobs.StatusCompleted, 30*time.Second)
	require.Len(t, b.drain(t, "chat-1"), 2)

	b.requireRefused(t, "timeout_s", map[string]func(*SpawnRequest){
		"negative":                 func(r *SpawnRequest) { r.TimeoutS = -1 },
		"past the process's limit": func(r *SpawnRequest) { r.TimeoutS = int64(b.m.cfg.RunTimeout/time.Second) + 1 },
	})

	// The same idempotency key with another timeout is another request.
	r := echoSpawn("chat-1", "keyed", 0, false)
	r.IdempotencyKey = "k-timeout"
	_, _, err = b.m.Spawn(ctx, r)
	require.NoError(t, err)
	r.TimeoutS = 5
	_, _, err = b.m.Spawn(ctx, r)
	require.Equal(t, bgjobs.EConflict, bgjobs.ErrorCode(err))
}

// A job cancelled while running and retried at once: asynq moves on as soon
// as the first run's context ends, so a handler slow to notice is still at
// work when the retry starts the job again. Its late word ("cancelled")
// must not end the new run, which goes on to complete.
func TestARetryOutlivesTheRunBeforeIt(t *testing.T) {
	t.Parallel()
	kinds := work.NewKinds()
	var runs atomic.Int32
	kinds.Register(work.Kind{Name: "stubborn", Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
		if runs.Add(1) > 1 {
			// Still at work when the first run's late word comes.
			select {
			case <-time.After(1500 * time.Millisecond):
				return "the second run's report", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		<-ctx.Done()
		time.Sleep(500 * time.Millisecond) // notices late
		return "", ctx.Err()
	}})
	b := setup(t, func(c *bgjobs.Config, d *Deps) { d.Kinds = kinds })
	b.startWorker(t)
	ctx := context.Background()
	j := b.spawn(t, SpawnRequest{Agent: "alpha", OriginSession: "chat-late", Kind: bgjobs.KindWork, Description: "stubborn",
		Work: &bgjobs.WorkSpec{Type: "stubborn", Args: json.RawMessage(`{}`)}})
	b.waitStatus(t, j.ID, bgjobs.StatusRunning, 30*time.Second)
	_, err := b.m.Cancel(ctx, "alpha", j.ID)
	require.NoError(t, err)
	_, err = b.m.RetryFor(ctx, "alpha", j.ID, false)
	require.NoError(t, err)
	done := b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 30*time.Second)
	require.Equal(t, "the second run's report", *done.Result)
	b.m.running.Wait(10 * time.Second) // past the first run's late word
	got, err := b.m.Get(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCompleted, got.Status, "the first run's late word changed nothing")
	ns := b.drain(t, "chat-late")
	require.Len(t, ns, 1)
	require.Equal(t, "completed", ns[0].Status)
}

// A work job that runs past the process's limit (BGJOBS_TURN_TIMEOUT, no
// timeout_s of its own) fails "timed out", once: asynq's own timeout on
// the task was the same length and, counted from the fetch, ended the run
// first, which then read as a shutdown and was retried, each retry running
// the whole limit again.
func TestAWorkJobPastTheProcessLimitFails(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *bgjobs.Config, d *Deps) { c.RunTimeout = 2 * time.Second })
	b.startWorker(t)
	j := b.spawn(t, echoSpawn("chat-limit", "slow", 60000, false))
	got := b.waitStatus(t, j.ID, bgjobs.StatusFailed, 60*time.Second)
	require.Equal(t, "timed out after 2s", *got.Error)
	require.Equal(t, 1, got.Attempts)
}

// A run whose lease lapses (Redis out of reach past asynq's 30 s lease:
// here paused 35 s) is run again, and the job completes: asynq cancels the
// run's context as it does for a cancel, and the run once took that for
// one, ending every running job "cancelled from the queue's tools".
func TestALapsedLeaseRunsTheJobAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses a private redis-server for 35 s")
	}
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	opt, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	// Commands sent during the pause wait for its end rather than time out:
	// the first run's late word reaches Redis, as it does after a stall
	// shorter than the client's timeouts.
	opt.ReadTimeout, opt.WriteTimeout = time.Minute, time.Minute
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	kinds := work.NewKinds()
	var runs atomic.Int32
	kinds.Register(work.Kind{Name: "outlasted", Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
		if runs.Add(1) > 1 {
			return "the second run's report", nil
		}
		<-ctx.Done()
		return "", ctx.Err()
	}})
	b := setupOn(t, &testenv.Env{RDB: rdb, URL: srv.URL(), Namespace: testenv.NewNamespace()}, func(c *bgjobs.Config, d *Deps) { d.Kinds = kinds })
	b.startWorker(t)
	j := b.spawn(t, SpawnRequest{Agent: "alpha", OriginSession: "chat-lease", Kind: bgjobs.KindWork, Description: "outlasted",
		Work: &bgjobs.WorkSpec{Type: "outlasted", Args: json.RawMessage(`{}`)}})
	b.waitStatus(t, j.ID, bgjobs.StatusRunning, 30*time.Second)
	require.NoError(t, rdb.Do(context.Background(), "CLIENT", "PAUSE", "35000", "ALL").Err())
	var done *bgjobs.Job
	testenv.Eventually(t, 3*time.Minute, "the job to end", func() bool {
		done, err = b.m.Get(context.Background(), "alpha", j.ID)
		require.NoError(t, err)
		return done.Status.Terminal()
	})
	require.Equal(t, bgjobs.StatusCompleted, done.Status, "%v", done.Error)
	require.Equal(t, "the second run's report", *done.Result)
	require.Equal(t, int32(2), runs.Load())
}
