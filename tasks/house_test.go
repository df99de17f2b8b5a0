package tasks

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/eventhub"
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
		if strings.Contains(g, "TestStoppedManagerLeavesNoGoroutine") || strings.Contains(g, "testing.(*T).Parallel") {
			continue // this test, and parallel tests waiting for it to end
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
		return err == nil && strings.Contains(info.LastErr, "not written yet")
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
	// Merged and pumped: nothing waits behind a window, nothing in the
	// outbox (the outbox alone empties before the window's flush).
	outboxEmpty := func() bool {
		tag := bgjobs.Tag("alpha", "chat-retry-merge")
		n, err := b.env.RDB.ZCard(ctx, b.m.store.Keys().Outbox(tag)).Result()
		require.NoError(t, err)
		q, err := b.env.RDB.ZCard(ctx, b.m.store.Keys().StormQueue(tag)).Result()
		require.NoError(t, err)
		return n == 0 && q == 0
	}
	testenv.Eventually(t, 10*time.Second, "the first merge to be pumped", outboxEmpty)
	time.Sleep(2 * window) // the window the merge opened closes

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

// Purge never takes a row a drain's repeat will read again: a drain with an
// Idempotency-Key keeps its rows for the replay window, whatever
// --older-than says; a row drained without one goes.
func TestPurgeKeepsADrainsReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	keyed := b.spawn(t, echoSpawn("chat-keyed", "keep me", 0, false))
	plain := b.spawn(t, echoSpawn("chat-plain", "take me", 0, false))
	b.waitStatus(t, keyed.ID, bgjobs.StatusCompleted, 20*time.Second)
	b.waitStatus(t, plain.ID, bgjobs.StatusCompleted, 20*time.Second)
	first, err := b.m.Drain(ctx, "alpha", "chat-keyed", "idem-1")
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Len(t, b.drain(t, "chat-plain"), 1)

	purged, err := b.m.Purge(ctx, PurgeRequest{})
	require.NoError(t, err)
	require.Len(t, purged, 1)
	require.Equal(t, plain.ID, purged[0].ID)
	again, err := b.m.Drain(ctx, "alpha", "chat-keyed", "idem-1")
	require.NoError(t, err)
	require.Equal(t, first, again, "the repeat still finds its row")
}

// Purge reads an agent's rows a page at a time (500), and removes every
// purgeable one across pages, handing back rows without their results.
func TestPurgeAcrossPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	for range 2 {
		var specs []SpawnRequest
		for range 550 {
			specs = append(specs, SpawnRequest{Kind: bgjobs.KindWork, Description: "m", Work: &bgjobs.WorkSpec{Type: "echo", Args: []byte(`{"text":"a result"}`)}})
		}
		res, err := b.m.SpawnBatch(ctx, "alpha", "chat-p", specs)
		require.NoError(t, err)
		testenv.Eventually(t, 60*time.Second, "the batch ended", func() bool {
			bt, err := b.m.GetBatch(ctx, "alpha", res.BatchID)
			require.NoError(t, err)
			return bt.Settled == 550
		})
	}
	unread := b.spawn(t, echoSpawn("chat-unread", "unread", 0, false))
	b.waitStatus(t, unread.ID, bgjobs.StatusCompleted, 20*time.Second)
	drained := 0
	for {
		ns, err := b.m.Drain(ctx, "alpha", "chat-p", "")
		require.NoError(t, err)
		if len(ns) == 0 {
			break
		}
		drained += len(ns)
	}
	require.Equal(t, 1100, drained)

	purged, err := b.m.Purge(ctx, PurgeRequest{})
	require.NoError(t, err)
	require.Equal(t, 1100, len(purged), "every drained job, across pages; never the undrained one")
	for _, j := range purged {
		require.Nil(t, j.Result, "rows handed back without their results")
	}
	left, _, err := b.m.List(ctx, ListRequest{Agent: "alpha"})
	require.NoError(t, err)
	require.Len(t, left, 1)
	require.Equal(t, unread.ID, left[0].ID)
}

// A list page stays small however large the jobs' arguments: rows carry an
// excerpt of large work_args; the job itself still has them whole.
func TestListCarriesAnExcerptOfLargeArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	req := echoSpawn("chat-big", strings.Repeat("x", 1<<20), 0, false)
	req.Description = "big"
	big := b.spawn(t, req)
	small := b.spawn(t, echoSpawn("chat-big", "small", 0, false))
	rows, _, err := b.m.List(ctx, ListRequest{Agent: "alpha"})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	byID := map[string]*bgjobs.Job{rows[0].ID: rows[0], rows[1].ID: rows[1]}
	require.Nil(t, byID[big.ID].WorkArgs)
	require.LessOrEqual(t, len([]rune(byID[big.ID].WorkArgsExcerpt)), ListArgsMax/2+1)
	require.True(t, strings.HasPrefix(byID[big.ID].WorkArgsExcerpt, `{"text":"xxx`))
	require.JSONEq(t, `{"text":"small","delay_ms":0,"fail":false}`, string(byID[small.ID].WorkArgs))
	require.Empty(t, byID[small.ID].WorkArgsExcerpt)
	whole, err := b.m.Get(ctx, "alpha", big.ID)
	require.NoError(t, err)
	require.Len(t, whole.WorkArgs, len(big.WorkArgs))
}

// The event hub: a subscriber joining late with an earlier Last-Event-ID
// gets what it missed and then the live events, in order, once; those
// already reading get nothing twice. Past the per-agent share: rate_limited.
func TestEventHubOrdersLateJoiners(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *bgjobs.Config, _ *Deps) { c.EventStreamsPerAgent = 2 })
	next := func(s *eventhub.Subscription) bgjobs.StreamEvent {
		t.Helper()
		select {
		case e, ok := <-s.C:
			require.True(t, ok, "subscription ended: %v", s.Err())
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return bgjobs.StreamEvent{}
	}
	first, err := b.m.SubscribeEvents("alpha", map[string]string{"alpha": "0"})
	require.NoError(t, err)
	defer first.Close()
	var ids []string
	for i := range 3 {
		b.spawn(t, echoSpawn("chat-hub", fmt.Sprint(i), 0, false))
		ids = append(ids, next(first).ID)
	}
	late, err := b.m.SubscribeEvents("alpha", map[string]string{"alpha": ids[0]})
	require.NoError(t, err)
	defer late.Close()
	_, err = b.m.SubscribeEvents("alpha", map[string]string{"alpha": "0"})
	require.Equal(t, bgjobs.ERateLimited, bgjobs.ErrorCode(err), "a third stream is past alpha's share")

	for _, bad := range []string{"garbage", "1-", "-1", "1-2-3", "18446744073709551616-0", "+5", ""} {
		_, err = b.m.SubscribeEvents("beta", map[string]string{"beta": bad})
		require.Equal(t, bgjobs.EInvalid, bgjobs.ErrorCode(err), "%q would fail the read shared by every stream", bad)
	}

	require.Equal(t, ids[1], next(late).ID)
	require.Equal(t, ids[2], next(late).ID)
	b.spawn(t, echoSpawn("chat-hub", "live", 0, false))
	live := next(late)
	require.Equal(t, live.ID, next(first).ID, "the reader already there gets the live event, and nothing twice")
	require.Empty(t, first.C)
	require.Empty(t, late.C)
}

// A batch of incognito jobs wakes nobody, like each of them alone; one
// open member among them is news, and the join resumes as usual.
func TestIncognitoBatchWakesNobody(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	ctx := context.Background()
	specs := func(openAt int) []SpawnRequest {
		var out []SpawnRequest
		for i := range 3 {
			s := echoSpawn("", fmt.Sprint(i), 0, false)
			s.Incognito = i != openAt
			out = append(out, s)
		}
		return out
	}
	hidden, err := b.m.SpawnBatch(ctx, "alpha", "chat-incognito", specs(-1))
	require.NoError(t, err)
	mixed, err := b.m.SpawnBatch(ctx, "alpha", "chat-mixed", specs(1))
	require.NoError(t, err)
	for _, id := range []string{hidden.BatchID, mixed.BatchID} {
		testenv.Eventually(t, 20*time.Second, id+" to join", func() bool {
			bt, err := b.m.GetBatch(ctx, "alpha", id)
			require.NoError(t, err)
			return bt.Joined
		})
	}
	testenv.Eventually(t, 10*time.Second, "the mixed batch's resume", func() bool { return len(rr.all()) >= 1 })
	time.Sleep(500 * time.Millisecond)
	got := rr.all()
	require.Len(t, got, 1, "the incognito batch sent nothing")
	require.Equal(t, "resume-"+mixed.BatchID, got[0].MessageID)
	require.Len(t, b.drain(t, "chat-incognito"), 3, "its results still drain")
}

// Common mistakes get answers that say what to do.
func TestSpawnAnswersCommonMistakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.m.PutAgent(ctx, &bgjobs.Agent{Name: "alpha", A2AURL: "http://127.0.0.1:1/a2a",
		SubagentTypes: map[string]string{"researcher": "r", "coder": "c"}}))
	turn := func(subagent, session, desc string) SpawnRequest {
		return SpawnRequest{Agent: "alpha", OriginSession: session, SubagentType: subagent, Description: desc,
			Prompt: "Find the fuel figures\nfor every ship in the fleet"}
	}
	for _, tc := range []struct {
		desc      string
		req       SpawnRequest
		wantField string
		wantMsg   string
	}{
		{desc: "omitted subagent_type", req: turn("", "s", "d"), wantField: "subagent_type", wantMsg: `is required: agent "alpha"'s roster is coder, researcher`},
		{desc: "unknown subagent_type", req: turn("poet", "s", "d"), wantField: "subagent_type", wantMsg: `"poet" is not in agent "alpha"'s roster (coder, researcher)`},
		{desc: "missing origin_session", req: turn("coder", "", "d"), wantField: "origin_session", wantMsg: "is required"},
	} {
		_, _, err := b.m.Spawn(ctx, tc.req)
		var be *bgjobs.Error
		require.ErrorAs(t, err, &be, tc.desc)
		require.Equal(t, tc.wantField, be.Field, tc.desc)
		require.Contains(t, be.Message, tc.wantMsg, tc.desc)
	}
	j, _, err := b.m.Spawn(ctx, turn("coder", "s", ""))
	require.NoError(t, err)
	require.Equal(t, "Find the fuel figures", j.Description, "a missing description comes from the prompt's first line")
	w := echoSpawn("s", "x", 0, false)
	w.Description = ""
	j, _, err = b.m.Spawn(ctx, w)
	require.NoError(t, err)
	require.Equal(t, "echo job", j.Description)
}

// Cancelling from asynq's own tools (asynq task cancel, asynqmon) means
// cancel: the job ends cancelled, is not run again, and drains once.
func TestAsynqCancelEndsTheJobCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.startWorker(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-asynq-cancel", "slow", 60000, false))
	b.waitStatus(t, j.ID, bgjobs.StatusRunning, 20*time.Second)
	// asynq publishes a cancel once, to the servers subscribed at that
	// moment: a worker whose subscription is still being set up (a loaded
	// machine) misses it, so the test sends it until the job ends.
	var got *bgjobs.Job
	testenv.Eventually(t, 60*time.Second, j.ID+" to be cancelled", func() bool {
		require.NoError(t, b.m.Inspector().CancelProcessing(j.ID))
		for range 25 {
			var err error
			got, err = b.m.Get(ctx, "alpha", j.ID)
			require.NoError(t, err)
			if got.Status == bgjobs.StatusCancelled {
				return true
			}
			time.Sleep(40 * time.Millisecond)
		}
		return false
	})
	require.Contains(t, *got.Error, "cancelled")

	// asynq retries a cancelled task; the retry finds the job ended.
	time.Sleep(3 * time.Second)
	got, err := b.m.Get(ctx, "alpha", j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, got.Status)
	require.Equal(t, 1, got.Attempts, "not run again")
	ns := b.drain(t, "chat-asynq-cancel")
	require.Len(t, ns, 1)
	require.Contains(t, ns[0].Text, "<status>cancelled</status>")
	require.Empty(t, b.drain(t, "chat-asynq-cancel"))
}
