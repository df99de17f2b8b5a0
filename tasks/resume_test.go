package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/stragglers"
)

// sentResume is one resume a recordingResumer delivered.
type sentResume struct {
	Session, MessageID string
	Meta               bgjobs.ResumeMeta
	At                 time.Time
}

// recordingResumer stands in for the agent's endpoint in these tests (the
// real A2A and webhook senders are tested end to end in cmd/bgjobs).
type recordingResumer struct {
	mu   sync.Mutex
	sent []sentResume
}

func (r *recordingResumer) SendResume(_ context.Context, _ *bgjobs.Agent, session, messageID string, meta bgjobs.ResumeMeta) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, sentResume{Session: session, MessageID: messageID, Meta: meta, At: time.Now()})
	return nil
}

func (r *recordingResumer) all() []sentResume {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sentResume(nil), r.sent...)
}

func withResumer(r bgjobs.Resumer) setupOpt {
	return func(_ *bgjobs.Config, d *Deps) { d.Resumer = r }
}

// setupResuming is setup with a recording resumer and agent alpha
// registered to take resumes.
func setupResuming(t *testing.T, opts ...setupOpt) (*testBundle, *recordingResumer) {
	t.Helper()
	rr := &recordingResumer{}
	b := setup(t, append([]setupOpt{withResumer(rr)}, opts...)...)
	b.registerAgent(t, nil)
	return b, rr
}

// listed counts, per job, the resumes that named it.
func (r *recordingResumer) listed() map[string]int {
	c := map[string]int{}
	for _, s := range r.all() {
		for _, id := range s.Meta.Jobs {
			c[id]++
		}
	}
	return c
}

func (b *testBundle) registerAgent(t *testing.T, auto *bool) {
	t.Helper()
	require.NoError(t, b.m.PutAgent(context.Background(), &bgjobs.Agent{Name: "alpha", A2AURL: "http://127.0.0.1:1/a2a", AutoResume: auto}))
}

// heldWhileBusy marks session busy for ttl and finishes a job there: its
// resume is held, not sent.
func (b *testBundle) heldWhileBusy(t *testing.T, rr *recordingResumer, session, text string, ttl time.Duration) *bgjobs.Job {
	t.Helper()
	require.NoError(t, b.m.Busy(context.Background(), "alpha", session, ttl))
	j := b.spawn(t, echoSpawn(session, text, 0, false))
	b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, rr.all(), "held while busy")
	return j
}

func TestResumeOnCompletion(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	j := b.spawn(t, echoSpawn("chat-42", "hi", 0, false))
	testenv.Eventually(t, 10*time.Second, "one resume", func() bool { return len(rr.all()) == 1 })
	time.Sleep(300 * time.Millisecond)
	got := rr.all()
	require.Len(t, got, 1)
	require.Equal(t, "chat-42", got[0].Session)
	require.Equal(t, "resume-"+j.ID, got[0].MessageID)
	require.Equal(t, bgjobs.ResumeMeta{Origin: "background", Kind: "background.resume", Trigger: j.ID, Jobs: []string{j.ID},
		Counts: bgjobs.Counts{Completed: 1}}, got[0].Meta)
}

func TestNoResumeWhereNoneIsDue(t *testing.T) {
	t.Parallel()
	off := false
	for _, tc := range []struct {
		desc       string
		session    string
		incognito  bool
		agentAuto  *bool
		globalAuto bool
	}{
		{desc: "background origin", session: bgjobs.BackgroundPrefix, globalAuto: true},
		{desc: "incognito job", session: "chat-1", incognito: true, globalAuto: true},
		{desc: "auto-resume off for the agent", session: "chat-1", agentAuto: &off, globalAuto: true},
		{desc: "auto-resume off globally", session: "chat-1", globalAuto: false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			rr := &recordingResumer{}
			b := setup(t, withResumer(rr), func(c *bgjobs.Config, _ *Deps) { c.NoAutoResume = !tc.globalAuto })
			b.registerAgent(t, tc.agentAuto)
			b.startWorker(t)
			if tc.session == bgjobs.BackgroundPrefix {
				// A worker's own spawn names its (incognito, so silent) parent.
				parent := echoSpawn("chat-parent", "parent", 0, false)
				parent.Incognito = true
				tc.session += b.spawn(t, parent).ID
			}
			req := echoSpawn(tc.session, "x", 0, false)
			req.Incognito = tc.incognito
			j := b.spawn(t, req)
			b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 10*time.Second)
			time.Sleep(500 * time.Millisecond)
			require.Empty(t, rr.all())
			n, err := b.env.RDB.ZCard(context.Background(), b.m.store.Keys().Outbox(bgjobs.Tag("alpha", tc.session))).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the outbox entry was consumed, not left behind")
		})
	}
}

// A burst that goes on is told of in a handful of nudges, however long it
// lasts (the window grows while completions keep coming); a lone
// completion after a quiet spell still goes at once.
func TestStormGuardAdaptsToALongBurst(t *testing.T) {
	t.Parallel()
	// The default window: a loaded -race run spaces settles out, and a gap
	// longer than the window would end the burst, not test it.
	const base = 250 * time.Millisecond
	b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.ResumeCoalesce = base })
	b.startWorker(t)
	ctx := context.Background()
	var jobs []*bgjobs.Job
	for i := range 101 { // slow, so the worker never ends them: the test does
		jobs = append(jobs, b.spawn(t, echoSpawn("chat-burst", fmt.Sprint(i), 600000, false)))
	}
	r := "done"
	start := time.Now()
	for _, j := range jobs[:100] { // 100 completions, one every 30 ms: over 3 s, 12+ base windows
		_, err := b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond)
	}
	burst := time.Since(start)
	testenv.Eventually(t, 60*time.Second, "the burst announced", func() bool { return len(rr.listed()) == 100 })
	nudges := len(rr.all())
	t.Logf("100 completions over %s: %d nudges", burst.Round(time.Millisecond), nudges)
	require.LessOrEqual(t, nudges, 6, "a handful, not one per window")

	time.Sleep(2 * time.Second) // quiet: the window lapses
	sent := time.Now()
	_, err := b.m.follow.Settle(ctx, jobs[100], bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
	require.NoError(t, err)
	testenv.Eventually(t, 30*time.Second, "the lone completion's nudge", func() bool { return len(rr.all()) == nudges+1 })
	got := rr.all()
	require.Equal(t, []string{jobs[100].ID}, got[len(got)-1].Meta.Jobs, "a lone completion goes alone")
	t.Logf("a lone completion after quiet: nudged %s after it ended", got[len(got)-1].At.Sub(sent).Round(time.Millisecond))
}

func batchSpecs(n int, failAt int, delayMS func(i int) int) []SpawnRequest {
	specs := make([]SpawnRequest, n)
	for i := range n {
		specs[i] = echoSpawn("", fmt.Sprint(i), delayMS(i), i == failAt)
	}
	return specs
}

// A batch of 7 with one failing member: exactly one resume with its
// counts, no per-member resumes, and the batch shows joined.
func TestBatchJoinsOnce(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	ctx := context.Background()
	res, err := b.m.SpawnBatch(ctx, "alpha", "chat-b", batchSpecs(7, 3, func(i int) int { return i * 20 }))
	require.NoError(t, err)
	require.Len(t, res.Jobs, 7)
	require.Empty(t, res.Skipped)
	testenv.Eventually(t, 10*time.Second, "the join resume", func() bool { return len(rr.all()) >= 1 })
	time.Sleep(500 * time.Millisecond)
	got := rr.all()
	require.Len(t, got, 1, "one resume for the batch, none per member")
	require.Equal(t, "resume-"+res.BatchID, got[0].MessageID)
	require.Equal(t, bgjobs.Counts{Completed: 6, Failed: 1}, got[0].Meta.Counts)
	require.Equal(t, res.BatchID, *got[0].Meta.BatchID)
	require.False(t, got[0].Meta.Partial)
	require.Len(t, got[0].Meta.Jobs, 7)

	bt, err := b.m.GetBatch(ctx, "alpha", res.BatchID)
	require.NoError(t, err)
	require.True(t, bt.Joined)
	require.Equal(t, 7, bt.Settled)
	require.Equal(t, bgjobs.Counts{Completed: 6, Failed: 1}, bt.Counts)
	// Its straggler timeout was armed by the first settle and is gone with
	// the join, rather than coming due for nothing later.
	testenv.Eventually(t, 10*time.Second, "the straggler timeout disarmed", func() bool {
		due, _, err := b.m.stragglers.Due(ctx, time.Now().Add(24*time.Hour), 1000)
		require.NoError(t, err)
		return !slices.Contains(due, stragglers.Straggler{Tag: bgjobs.Tag("alpha", "chat-b"), BatchID: res.BatchID})
	})

	// Replaying a member's settle after the join fires nothing.
	j, err := b.m.store.Lookup(ctx, res.Jobs[0].ID)
	require.NoError(t, err)
	r := "again"
	ok, err := b.m.follow.Settle(ctx, j, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r})
	require.NoError(t, err)
	require.False(t, ok)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rr.all(), 1)
	bt, err = b.m.GetBatch(ctx, "alpha", res.BatchID)
	require.NoError(t, err)
	require.Equal(t, 7, bt.Settled)

	ns := b.drain(t, "chat-b")
	require.Len(t, ns, 7)
}

func TestBatchSkipsBadSpecs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	specs := batchSpecs(3, -1, func(int) int { return 0 })
	specs[1].Work = &bgjobs.WorkSpec{Type: "teleport"}
	res, err := b.m.SpawnBatch(ctx, "alpha", "chat-b", specs)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.Equal(t, []int{0, 2}, []int{res.Jobs[0].Index, res.Jobs[1].Index})
	require.Len(t, res.Skipped, 1)
	require.Equal(t, 1, res.Skipped[0].Index)
	require.Equal(t, "work.type", res.Skipped[0].Error.Field)
	bt, err := b.m.GetBatch(ctx, "alpha", res.BatchID)
	require.NoError(t, err)
	require.Equal(t, 2, bt.Size, "the size is what spawned")

	_, err = b.m.SpawnBatch(ctx, "alpha", "chat-b", []SpawnRequest{{Kind: bgjobs.KindWork}})
	require.Equal(t, bgjobs.EInvalid, bgjobs.ErrorCode(err))
	_, err = b.m.SpawnBatch(ctx, "alpha", "chat-b", make([]SpawnRequest, BatchMax+1))
	require.Equal(t, bgjobs.ETooLarge, bgjobs.ErrorCode(err))
	_, err = b.m.GetBatch(ctx, "beta", res.BatchID)
	require.Equal(t, bgjobs.ENotFound, bgjobs.ErrorCode(err), "another agent's batch does not exist")
}

// A straggler timeout armed by a process that stopped before it came due
// is kept by the maintenance sweep of another: the batch joins partially,
// once, however often the sweep runs.
func TestStragglerOfAStoppedProcessJoins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// No worker: the members stay queued, as if their process died.
	res, err := b.m.SpawnBatch(ctx, "alpha", "chat-gone", batchSpecs(3, -1, func(int) int { return 0 }))
	require.NoError(t, err)
	tag := bgjobs.Tag("alpha", "chat-gone")
	require.NoError(t, b.m.stragglers.Arm(ctx, tag, res.BatchID, time.Now().Add(-time.Second)))
	require.False(t, b.m.follow.StragglerDue(), "this process did not arm it")
	for range 2 {
		_, err = b.m.Reconcile(ctx)
		require.NoError(t, err)
	}
	bt, err := b.m.GetBatch(ctx, "alpha", res.BatchID)
	require.NoError(t, err)
	require.True(t, bt.Joined)
	require.True(t, bt.Partial)
	require.Equal(t, 0, bt.Settled)
	due, _, err := b.m.stragglers.Due(ctx, time.Now().Add(24*time.Hour), 1000)
	require.NoError(t, err)
	require.NotContains(t, due, stragglers.Straggler{Tag: tag, BatchID: res.BatchID}, "a kept timeout is dropped")
	// A timeout of a batch that is gone (expired, purged) joins nothing.
	require.NoError(t, b.m.stragglers.Arm(ctx, tag, "bt-00000000dead", time.Now().Add(-time.Second)))
	_, err = b.m.Reconcile(ctx)
	require.NoError(t, err)
	_, err = b.m.GetBatch(ctx, "alpha", "bt-00000000dead")
	require.Equal(t, bgjobs.ENotFound, bgjobs.ErrorCode(err))
	// More due at once than a sweep's page: one sweep keeps them all, each
	// once, and leaves none behind.
	for i := range 250 {
		require.NoError(t, b.m.stragglers.Arm(ctx, tag, fmt.Sprintf("bt-%012x", i), time.Now().Add(-time.Second)))
	}
	_, err = b.m.Reconcile(ctx)
	require.NoError(t, err)
	due, _, err = b.m.stragglers.Due(ctx, time.Now().Add(24*time.Hour), 1000)
	require.NoError(t, err)
	require.Empty(t, due)
}

// Straggler: a 2 s timeout, one member 10 s late. A partial join fires at
// about 2 s with the counts settled so far; the straggler later resumes on
// its own and drains; nothing else fires.
func TestStragglerForcesPartialJoin(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.BatchJoinTimeout = 2 * time.Second })
	b.startWorker(t)
	ctx := context.Background()
	start := time.Now()
	res, err := b.m.SpawnBatch(ctx, "alpha", "chat-s", batchSpecs(4, -1, func(i int) int {
		if i == 3 {
			return 15000
		}
		return 0
	}))
	require.NoError(t, err)
	testenv.Eventually(t, 12*time.Second, "the partial join", func() bool { return len(rr.all()) == 1 })
	partial := rr.all()[0]
	took := partial.At.Sub(start)
	require.GreaterOrEqual(t, took, 2*time.Second)
	require.Less(t, took, 12*time.Second, "at the 2 s timeout, well before the straggler ends at 15 s")
	require.Equal(t, "resume-"+res.BatchID, partial.MessageID)
	require.True(t, partial.Meta.Partial)
	require.Equal(t, bgjobs.Counts{Completed: 3}, partial.Meta.Counts)

	ns := b.drain(t, "chat-s")
	require.Len(t, ns, 3)

	testenv.Eventually(t, 30*time.Second, "the straggler's own resume", func() bool { return len(rr.all()) == 2 })
	late := rr.all()[1]
	straggler := res.Jobs[3].ID
	require.Equal(t, "resume-"+straggler, late.MessageID)
	require.Equal(t, []string{straggler}, late.Meta.Jobs)
	ns = b.drain(t, "chat-s")
	require.Len(t, ns, 1)
	require.Equal(t, straggler, ns[0].JobID)
	time.Sleep(1500 * time.Millisecond)
	require.Len(t, rr.all(), 2, "nothing else fires")
}

func TestBusySessionFoldsResumes(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	ctx := context.Background()

	require.NoError(t, b.m.Busy(ctx, "alpha", "chat-1", time.Minute))
	j1 := b.spawn(t, echoSpawn("chat-1", "a", 0, false))
	j2 := b.spawn(t, echoSpawn("chat-1", "b", 0, false))
	b.waitStatus(t, j1.ID, bgjobs.StatusCompleted, 10*time.Second)
	b.waitStatus(t, j2.ID, bgjobs.StatusCompleted, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	require.Empty(t, rr.all(), "no resume while busy")

	require.NoError(t, b.m.Idle(ctx, "alpha", "chat-1"))
	testenv.Eventually(t, 20*time.Second, "one coalesced resume", func() bool { return len(rr.all()) == 1 })
	time.Sleep(500 * time.Millisecond)
	got := rr.all()
	require.Len(t, got, 1)
	require.ElementsMatch(t, []string{j1.ID, j2.ID}, got[0].Meta.Jobs)
	require.Equal(t, bgjobs.Counts{Completed: 2}, got[0].Meta.Counts)

	// A second idle has nothing held: nothing fires.
	require.NoError(t, b.m.Idle(ctx, "alpha", "chat-1"))
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rr.all(), 1)
}

func TestBusyLeaseLapseSendsOne(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	ctx := context.Background()
	b.heldWhileBusy(t, rr, "chat-1", "a", 2*time.Second)
	// No client call: the lease lapses and its timer sends the nudge.
	testenv.Eventually(t, 10*time.Second, "the lapse resume", func() bool { return len(rr.all()) == 1 })
	time.Sleep(1500 * time.Millisecond)
	require.Len(t, rr.all(), 1)
	busy, err := b.m.IsBusy(ctx, "alpha", "chat-1")
	require.NoError(t, err)
	require.False(t, busy)
}

// The seed bug, as a regression test: an unread completion held through a
// busy period of hours (an injected clock) is still delivered, once.
func TestHeldThroughHoursOfBusyIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	ctx := context.Background()
	clock := time.Now()
	b.now.Store(&clock)

	b.heldWhileBusy(t, rr, "chat-h", "unread", time.Hour)
	// Five hours pass; the agent keeps renewing its lease, turn after turn.
	for h := 1; h <= 5; h++ {
		later := clock.Add(time.Duration(h) * time.Hour)
		b.now.Store(&later)
		require.NoError(t, b.m.Busy(ctx, "alpha", "chat-h", time.Hour))
	}
	require.Empty(t, rr.all(), "held, not sent, while busy")
	require.NoError(t, b.m.Idle(ctx, "alpha", "chat-h"))
	testenv.Eventually(t, 20*time.Second, "the held resume", func() bool { return len(rr.all()) == 1 })
	ns := b.drain(t, "chat-h")
	require.Len(t, ns, 1)
	require.Contains(t, ns[0].Text, "<result>unread</result>")
	ns = b.drain(t, "chat-h")
	require.Empty(t, ns)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, rr.all(), 1)
}

// A settle whose pump never ran (the process died between the two) is
// moved on by the sweep: the resume still goes, once.
func TestOutboxSurvivesACrashAfterSettle(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	ctx := context.Background()
	j := b.spawn(t, echoSpawn("chat-c", "x", 0, false))
	r := "done"
	_, err := b.m.store.Settle(ctx, registry.Settlement{Tag: bgjobs.Tag("alpha", "chat-c"), ID: j.ID,
		Outcome: bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r}, Now: time.Now(), Announce: true})
	require.NoError(t, err)
	b.startWorker(t) // its reconciler sweeps outboxes at start
	testenv.Eventually(t, 10*time.Second, "the resume", func() bool { return len(rr.all()) == 1 })
	_, err = b.m.Reconcile(ctx)
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	require.Len(t, rr.all(), 1)
	require.Equal(t, "resume-"+j.ID, rr.all()[0].MessageID)
}

// The storm guard: 50 jobs of one session ending within ~100 ms make at
// most a few nudges — the first at once, the rest merged at the window's
// end (bound: 3, should they straddle windows) — listing every job once;
// each job drains once. With the guard off each job sends its own.
func TestResumeStormGuard(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc       string
		window     time.Duration
		minResumes int
		maxResumes int
	}{
		{desc: "guard on", window: 250 * time.Millisecond, minResumes: 1, maxResumes: 3},
		{desc: "guard off", window: -1, minResumes: 50, maxResumes: 50},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.ResumeCoalesce = tc.window; c.WorkConcurrency = 50 })
			ctx := context.Background()
			var ids []string
			for i := range 50 {
				ids = append(ids, b.spawn(t, echoSpawn("chat-storm", fmt.Sprint(i), 0, false)).ID)
			}
			b.startWorker(t) // all 50 are queued: they end together
			testenv.Eventually(t, 60*time.Second, "every job announced", func() bool { return len(rr.listed()) == 50 })
			time.Sleep(700 * time.Millisecond)
			got := rr.all()
			require.GreaterOrEqual(t, len(got), tc.minResumes)
			if tc.window > 0 {
				// The bound: the leading nudge, then the burst stretches its
				// window up to 8 windows (2 s), and the next one up to 4 s
				// more; a loaded -race run spreads the completions further.
				var first, last time.Time
				for _, id := range ids {
					j, err := b.m.Get(ctx, "alpha", id)
					require.NoError(t, err)
					if first.IsZero() || j.CompletedAt.Before(first) {
						first = *j.CompletedAt
					}
					if j.CompletedAt.After(last) {
						last = *j.CompletedAt
					}
				}
				// (+1 for timer jitter at a window edge)
				bound := 4
				if spread := last.Sub(first); spread > 6*time.Second {
					bound += int(spread / (6 * time.Second))
				}
				t.Logf("50 completions over %s: %d nudges (bound %d)", last.Sub(first), len(got), bound)
				require.LessOrEqual(t, len(got), bound)
				if last.Sub(first) <= 100*time.Millisecond {
					require.LessOrEqual(t, len(got), tc.maxResumes)
				}
			} else {
				require.LessOrEqual(t, len(got), tc.maxResumes)
			}
			for id, n := range rr.listed() {
				require.Equal(t, 1, n, "job %s listed once", id)
			}
			total := 0
			for _, r := range got {
				require.Equal(t, len(r.Meta.Jobs), r.Meta.Counts.Completed, "counts match the list")
				total += len(r.Meta.Jobs)
			}
			require.Equal(t, 50, total)
			ns := b.drain(t, "chat-storm")
			require.Len(t, ns, 50)
		})
	}
}

// An outbox entry pumped twice (a settle's own pump racing a sweep) gets the
// storm guard's first answer again: the leading job is not merged as well,
// and a merged job is not merged twice.
func TestStormGateAnswersARepeatTheSame(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.ResumeCoalesce = 300 * time.Millisecond })
	ctx := context.Background()
	tag := bgjobs.Tag("alpha", "chat-rep")
	var entries []registry.Entry
	for _, text := range []string{"lead", "merged"} {
		j := b.spawn(t, echoSpawn("chat-rep", text, 0, false))
		r := text
		es, err := b.m.store.Settle(ctx, registry.Settlement{Tag: tag, ID: j.ID,
			Outcome: bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r}, Now: time.Now(), Announce: true})
		require.NoError(t, err)
		entries = append(entries, es...)
	}
	require.Len(t, entries, 2)
	b.startWorker(t)
	for range 2 {
		for _, e := range entries {
			require.NoError(t, b.m.follow.PumpEntry(ctx, tag, e))
		}
	}
	testenv.Eventually(t, 10*time.Second, "the leading and the merged nudge", func() bool { return len(rr.all()) == 2 })
	time.Sleep(700 * time.Millisecond) // a second window's flush, were anything queued again
	got := rr.all()
	require.Len(t, got, 2)
	listed := rr.listed()
	require.Len(t, listed, 2)
	for id, n := range listed {
		require.Equal(t, 1, n, "job %s listed once", id)
	}
}

// longTurns answers every turn with a report too long to hand over whole.
type longTurns struct{}

func (longTurns) RunTurn(_ context.Context, t bgjobs.Turn) (string, error) {
	return strings.Repeat("finding "+t.JobID+" ", 600), nil
}

// A batch of turns with long reports joins once every report is searchable
// (an indexer runs): the nudge never comes before the drain would hand over
// every member.
func TestBatchJoinWaitsForLongReportsToBeIndexed(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t, func(_ *bgjobs.Config, d *Deps) { d.Turns = longTurns{} })
	ctx := context.Background()
	require.NoError(t, b.env.RDB.Set(ctx, b.m.store.Keys().IndexerAlive(), "1", time.Minute).Err())
	specs := []SpawnRequest{
		{Kind: bgjobs.KindTurn, Description: "one", Prompt: "look into one"},
		{Kind: bgjobs.KindTurn, Description: "two", Prompt: "look into two"},
	}
	res, err := b.m.SpawnBatch(ctx, "alpha", "chat-bi", specs)
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	b.startWorker(t)
	for _, j := range res.Jobs {
		b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 10*time.Second)
	}
	testenv.Eventually(t, 20*time.Second, "the batch to join", func() bool {
		bt, err := b.m.GetBatch(ctx, "alpha", res.BatchID)
		return err == nil && bt.Joined
	})
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, rr.all(), "no nudge while the reports are not searchable")
	ns := b.drain(t, "chat-bi")
	require.Empty(t, ns, "the drain holds them back too")

	// The indexer catches up with the first report: still waiting on the second.
	doc := func(j bgjobs.BatchMember) search.Doc {
		return search.Doc{SourceType: search.SourceReport, JobID: j.ID, Agent: "alpha", Session: "chat-bi"}
	}
	b.m.MarkIndexed(ctx, []search.Doc{doc(res.Jobs[0])})
	time.Sleep(300 * time.Millisecond)
	require.Empty(t, rr.all())
	b.m.MarkIndexed(ctx, []search.Doc{doc(res.Jobs[1])})
	testenv.Eventually(t, 20*time.Second, "the join nudge", func() bool { return len(rr.all()) == 1 })
	require.Equal(t, "resume-"+res.BatchID, rr.all()[0].MessageID)
	ns = b.drain(t, "chat-bi")
	require.Len(t, ns, 2, "the drain after the nudge hands over every member")
}

// fixedTurns answers every turn with the same report.
type fixedTurns string

func (f fixedTurns) RunTurn(context.Context, bgjobs.Turn) (string, error) { return string(f), nil }

// The drain holds back a report only when it will be cut (more characters
// than the cap, not more bytes): 1,500 two-byte characters under a cap of
// 2,000 drain whole at once, with an index running that has not seen them;
// 2,500 wait for it.
func TestDrainHoldsOnlyReportsThatWillBeCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		chars int
		held  bool
	}{{1500, false}, {2500, true}} {
		t.Run(fmt.Sprint(tc.chars), func(t *testing.T) {
			t.Parallel()
			report := strings.Repeat("ж", tc.chars)
			b := setup(t, func(c *bgjobs.Config, d *Deps) { c.SummaryChars = 2000; d.Turns = fixedTurns(report) })
			b.registerAgent(t, nil)
			ctx := context.Background()
			require.NoError(t, b.env.RDB.Set(ctx, b.m.store.Keys().IndexerAlive(), "1", time.Minute).Err())
			b.startWorker(t)
			j := b.spawn(t, SpawnRequest{Agent: "alpha", OriginSession: "chat-u", Kind: bgjobs.KindTurn, Description: "cyrillic", Prompt: "go"})
			b.waitStatus(t, j.ID, bgjobs.StatusCompleted, 10*time.Second)
			ns := b.drain(t, "chat-u")
			if tc.held {
				require.Empty(t, ns, "held until searchable")
				return
			}
			require.Len(t, ns, 1)
			require.False(t, ns[0].Truncated)
			require.Contains(t, ns[0].Text, "<result>"+report+"</result>")
		})
	}
}

// Three spawns of one turn (turn_id) get one briefing: a resume with
// counts 3, once the turn is sealed — by its window after the last spawn,
// or at once when the session goes idle. The batch reads like any other.
func TestTurnJoinsOneBriefing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("sealed by its window", func(t *testing.T) {
		t.Parallel()
		b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.TurnWindow = 400 * time.Millisecond })
		b.startWorker(t)
		var bids []string
		for i, fail := range []bool{false, true, false} {
			req := echoSpawn("chat-t", fmt.Sprint("job ", i), 0, fail)
			req.TurnID = "turn-1"
			j := b.spawn(t, req)
			require.NotNil(t, j.BatchID, "a turn's spawn carries its batch id")
			bids = append(bids, *j.BatchID)
		}
		require.Equal(t, bids[0], bids[1])
		require.Equal(t, bids[0], bids[2])
		testenv.Eventually(t, 15*time.Second, "the turn's resume", func() bool { return len(rr.all()) >= 1 })
		time.Sleep(500 * time.Millisecond)
		got := rr.all()
		require.Len(t, got, 1, "one briefing for the turn")
		require.Equal(t, bgjobs.Counts{Completed: 2, Failed: 1}, got[0].Meta.Counts)
		require.Equal(t, bids[0], *got[0].Meta.BatchID)
		require.Len(t, got[0].Meta.Jobs, 3)
		bt, err := b.m.GetBatch(ctx, "alpha", bids[0])
		require.NoError(t, err)
		require.True(t, bt.Joined)
		require.Equal(t, 3, bt.Size)
		require.Len(t, bt.Jobs, 3)

		// The turn is sealed: the same turn_id starts a new batch.
		req := echoSpawn("chat-t", "later", 0, false)
		req.TurnID = "turn-1"
		later := b.spawn(t, req)
		require.NotEqual(t, bids[0], *later.BatchID)
		require.GreaterOrEqual(t, len(b.drain(t, "chat-t")), 3)
	})
	t.Run("sealed when the session goes idle", func(t *testing.T) {
		t.Parallel()
		b, rr := setupResuming(t, func(c *bgjobs.Config, _ *Deps) { c.TurnWindow = time.Hour })
		b.startWorker(t)
		require.NoError(t, b.m.Busy(ctx, "alpha", "chat-i", time.Minute))
		var ids []string
		for i := range 3 {
			req := echoSpawn("chat-i", fmt.Sprint("job ", i), 0, false)
			req.TurnID = "turn-9"
			ids = append(ids, b.spawn(t, req).ID)
		}
		for _, id := range ids {
			b.waitStatus(t, id, bgjobs.StatusCompleted, 10*time.Second)
		}
		time.Sleep(300 * time.Millisecond)
		require.Empty(t, rr.all(), "no briefing while the turn is open")
		require.NoError(t, b.m.Idle(ctx, "alpha", "chat-i"))
		testenv.Eventually(t, 10*time.Second, "the turn's resume", func() bool { return len(rr.all()) >= 1 })
		time.Sleep(300 * time.Millisecond)
		got := rr.all()
		require.Len(t, got, 1)
		require.Equal(t, bgjobs.Counts{Completed: 3}, got[0].Meta.Counts)
	})
}

// A resume task run again after it was sent (its worker died before asynq
// recorded it done) finds the sent mark and sends nothing; one that comes
// while the session is busy is held, not sent.
func TestAResumeRunAgainIsNotSentTwice(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	ctx := context.Background()
	resume := func(id string) *asynq.Task {
		p, err := json.Marshal(engine.ResumePayload{Agent: "alpha", Session: "chat-r", MessageID: "resume-" + id,
			Meta: bgjobs.ResumeMeta{Trigger: id, Jobs: []string{id}}})
		require.NoError(t, err)
		return asynq.NewTask(engine.TypeResume, p)
	}
	require.NoError(t, b.m.follow.ProcessResume(ctx, resume("bg-000000000001")))
	require.NoError(t, b.m.follow.ProcessResume(ctx, resume("bg-000000000001")))
	require.Len(t, rr.all(), 1, "sent once")

	require.NoError(t, b.m.Busy(ctx, "alpha", "chat-r", time.Minute))
	require.NoError(t, b.m.follow.ProcessResume(ctx, resume("bg-000000000002")))
	require.Len(t, rr.all(), 1, "held while the session is busy")
}

// asynq keeps a timer's due time in whole seconds, so a lapse timer can
// fire up to a second before its lease ends. That early run comes back
// later (engine.ErrLater) rather than doing nothing: the nudge held through
// the lease still goes, with no idle call.
func TestAnEarlyLapseTimerComesBack(t *testing.T) {
	t.Parallel()
	b, rr := setupResuming(t)
	b.startWorker(t)
	ctx := context.Background()
	clock := time.Now()
	b.now.Store(&clock)
	b.heldWhileBusy(t, rr, "chat-l", "held", time.Hour)

	lapse := func() error {
		p, err := json.Marshal(engine.ControlPayload{Agent: "alpha", Session: "chat-l", Until: clock.Add(time.Hour).UnixMilli()})
		require.NoError(t, err)
		return b.m.follow.ProcessLapse(ctx, asynq.NewTask(engine.TypeLapse, p))
	}
	early := clock.Add(time.Hour - 400*time.Millisecond)
	b.now.Store(&early)
	require.ErrorIs(t, lapse(), engine.ErrLater, "fired before the lease ends: again shortly")
	busy, err := b.m.IsBusy(ctx, "alpha", "chat-l")
	require.NoError(t, err)
	require.True(t, busy)

	due := clock.Add(time.Hour + 300*time.Millisecond)
	b.now.Store(&due)
	require.NoError(t, lapse())
	testenv.Eventually(t, 10*time.Second, "the lapse resume", func() bool { return len(rr.all()) == 1 })
}
