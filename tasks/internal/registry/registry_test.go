package registry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/registrytest"
)

// The scripts' outcomes, table by table, on real Redis when
// BGJOBS_TEST_REDIS_URL is set and on miniredis otherwise.

type testBundle struct{ *registrytest.Bundle }

func setup(t *testing.T) *testBundle { return &testBundle{registrytest.New(t)} }

var now = registrytest.Now

func kinds(es []registry.Entry) []string { return registrytest.Kinds(es) }

func TestStartScript(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc        string
		starts      int // earlier starts
		settled     bool
		missing     bool
		wantErr     error
		wantAttempt int64
		wantRerun   bool
	}{
		{desc: "queued runs", wantAttempt: 1},
		{desc: "running again after a lost lease", starts: 1, wantAttempt: 2, wantRerun: true},
		{desc: "ended does not run", settled: true, wantErr: registry.ErrEnded},
		{desc: "no row", missing: true, wantErr: registry.ErrNoJob},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			j := b.Job(t)
			tag := bgjobs.Tag("alpha", "s")
			if tc.missing {
				tag = bgjobs.Tag("alpha", "elsewhere")
			}
			for range tc.starts {
				_, err := b.S.Start(b.Ctx, tag, j.ID, now)
				require.NoError(t, err)
			}
			if tc.settled {
				_, err := b.Settle(t, j, registry.Settlement{})
				require.NoError(t, err)
			}
			got, err := b.S.Start(b.Ctx, tag, j.ID, now)
			require.ErrorIs(t, err, tc.wantErr)
			if tc.wantErr == nil {
				require.Equal(t, tc.wantAttempt, got.Attempt)
				require.Equal(t, tc.wantRerun, got.Rerun)
				require.Equal(t, bgjobs.StatusRunning, got.Job.Status)
			}
		})
	}
}

// Briefs reads what a sweep needs of each row, not the row: a started
// job's status and start, a missing one as nil.
func TestBriefs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started, queued := b.Job(t), b.Job(t)
	_, err := b.S.Start(b.Ctx, bgjobs.Tag("alpha", "s"), started.ID, now)
	require.NoError(t, err)
	got, err := b.S.Briefs(b.Ctx, []string{started.ID, "bg-000000000fff", queued.ID})
	require.NoError(t, err)
	require.Len(t, got, 3)
	require.Nil(t, got[1], "no such job")
	require.Equal(t, bgjobs.StatusRunning, got[0].Status)
	require.True(t, got[0].StartedAt.Equal(now))
	require.False(t, got[0].Notified)
	require.Nil(t, got[0].CompletedAt)
	require.Equal(t, bgjobs.StatusQueued, got[2].Status)
	for _, j := range []*bgjobs.Job{got[0], got[2]} {
		require.Equal(t, "alpha", j.Agent)
		require.Equal(t, "s", j.OriginSession)
		require.Equal(t, bgjobs.KindTurn, j.Kind)
		require.Empty(t, j.Description, "only the brief's fields")
	}
}

// A Redis that lost its scripts (restarted, flushed) answers NOSCRIPT to
// the start and its row read rides behind it for nothing: the start loads
// the script, runs, and reads the row again. On a server of its own, since
// other tests use a shared server's script cache.
func TestStartLoadsItsScript(t *testing.T) {
	t.Parallel()
	b := &testBundle{registrytest.On(t, testenv.NewMini(t))}
	j := b.Job(t)
	require.NoError(t, b.RDB.ScriptFlush(b.Ctx).Err())
	got, err := b.S.Start(b.Ctx, bgjobs.Tag("alpha", "s"), j.ID, now)
	require.NoError(t, err)
	require.EqualValues(t, 1, got.Attempt)
	require.Equal(t, bgjobs.StatusRunning, got.Job.Status)
	require.Equal(t, j.ID, got.Job.ID)
}

func TestSettleScript(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc        string
		batchSize   int // 0: a plain job
		settleFirst int // members settled before
		waiting     bool
		st          registry.Settlement
		twice       bool
		wantErr     error
		wantKinds   []string
		wantHold    bool
	}{
		{desc: "plain job announced", st: registry.Settlement{Announce: true}, wantKinds: []string{"r"}},
		{desc: "plain job, nobody to wake", st: registry.Settlement{}, wantKinds: []string{}},
		{desc: "report indexed and held", st: registry.Settlement{Announce: true, Index: true, HoldForIndex: true},
			wantKinds: []string{"i", "r"}, wantHold: true},
		{desc: "a caller waits", waiting: true, st: registry.Settlement{Announce: true}, wantKinds: []string{"w"}},
		{desc: "first member arms the straggler timer", batchSize: 3, st: registry.Settlement{Announce: true}, wantKinds: []string{"s"}},
		{desc: "last member joins", batchSize: 3, settleFirst: 2, st: registry.Settlement{Announce: true}, wantKinds: []string{"j"}},
		{desc: "already ended", twice: true, st: registry.Settlement{Announce: true}, wantErr: registry.ErrEnded},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var j *bgjobs.Job
			if tc.batchSize == 0 {
				j = b.PlainJob(t, tc.waiting)
			} else {
				bid := "bt-00000000beef"
				var members []*bgjobs.Job
				for i := range tc.batchSize {
					members = append(members, &bgjobs.Job{ID: fmt.Sprintf("bg-%012x", 0xbeef00+i), Agent: "alpha", OriginSession: "s",
						Kind: bgjobs.KindWork, BatchID: &bid, CreatedAt: now})
				}
				require.NoError(t, b.S.CreateBatch(b.Ctx, bgjobs.Tag("alpha", "s"), bid, members, now))
				for _, m := range members[:tc.settleFirst] {
					_, err := b.Settle(t, m, registry.Settlement{})
					require.NoError(t, err)
				}
				j = members[tc.settleFirst]
			}
			if tc.twice {
				_, err := b.Settle(t, j, tc.st)
				require.NoError(t, err)
			}
			got, err := b.Settle(t, j, tc.st)
			require.ErrorIs(t, err, tc.wantErr)
			if tc.wantErr != nil {
				return
			}
			if diff := cmp.Diff(tc.wantKinds, kinds(got)); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			row, err := b.S.Load(b.Ctx, bgjobs.Tag("alpha", "s"), j.ID)
			require.NoError(t, err)
			require.Equal(t, bgjobs.StatusCompleted, row.Status)
			require.Equal(t, tc.wantHold, row.HoldForIndex)
		})
	}
}

func TestAckRetryAndDeleteScripts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		settled   bool
		status    bgjobs.Status
		acked     bool
		wantAck   bool
		wantAckEr error
		force     bool
		wantRetry error
		wantDel   error
	}{
		{desc: "running", wantAckEr: registry.ErrNotEnded, wantRetry: registry.ErrNotEnded, wantDel: registry.ErrNotEnded},
		{desc: "completed", settled: true, status: bgjobs.StatusCompleted, wantAck: true, wantRetry: registry.ErrCompleted},
		{desc: "completed, forced", settled: true, status: bgjobs.StatusCompleted, wantAck: true, force: true},
		{desc: "failed, acked before", settled: true, status: bgjobs.StatusFailed, acked: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			j := b.PlainJob(t, false)
			tag := bgjobs.Tag("alpha", "s")
			if tc.settled {
				msg := "x"
				_, err := b.Settle(t, j, registry.Settlement{Outcome: bgjobs.Outcome{Status: tc.status, Error: &msg}})
				require.NoError(t, err)
			}
			if tc.acked {
				_, err := b.H.Ack(b.Ctx, tag, j.ID, "", now)
				require.NoError(t, err)
			}
			flipped, err := b.H.Ack(b.Ctx, tag, j.ID, "", now)
			require.ErrorIs(t, err, tc.wantAckEr)
			require.Equal(t, tc.wantAck, flipped)
			err = b.S.Retry(b.Ctx, j, tc.force, now)
			require.ErrorIs(t, err, tc.wantRetry)
			if tc.settled && tc.wantRetry == nil {
				row, err := b.S.Load(b.Ctx, tag, j.ID)
				require.NoError(t, err)
				require.Equal(t, bgjobs.StatusQueued, row.Status)
				require.Equal(t, 1, row.Generation)
				require.False(t, row.Notified)
				require.ErrorIs(t, b.S.Remove(b.Ctx, j), registry.ErrNotEnded)
				return
			}
			require.ErrorIs(t, b.S.Remove(b.Ctx, j), tc.wantDel)
			if tc.wantDel == nil {
				require.ErrorIs(t, b.S.Remove(b.Ctx, j), registry.ErrNoJob)
			}
		})
	}
}

func TestDrainScript(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		hold      bool // the settle marked the report hold-for-index
		indexed   bool
		holdOn    bool // an indexer runs
		graceGone bool
		idem      string
		wantFirst int
		wantAgain int
	}{
		{desc: "handed over once", wantFirst: 1},
		{desc: "a repeat with its key replays", idem: "k1", wantFirst: 1, wantAgain: 1},
		{desc: "held until indexed", hold: true, holdOn: true, wantFirst: 0},
		{desc: "indexed, handed over", hold: true, indexed: true, holdOn: true, wantFirst: 1},
		{desc: "no indexer, handed over", hold: true, wantFirst: 1},
		{desc: "grace gone, handed over", hold: true, holdOn: true, graceGone: true, wantFirst: 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			j := b.PlainJob(t, false)
			tag := bgjobs.Tag("alpha", "s")
			_, err := b.Settle(t, j, registry.Settlement{Index: tc.hold, HoldForIndex: tc.hold})
			require.NoError(t, err)
			if tc.indexed {
				_, err := b.S.MarkIndexed(b.Ctx, []registry.JobRef{{Tag: tag, ID: j.ID}})
				require.NoError(t, err)
			}
			hold := handover.DrainHold{On: tc.holdOn, Since: now.Add(-time.Minute)}
			if tc.graceGone {
				hold.Since = now.Add(time.Second)
			}
			first, _, err := b.H.Drain(b.Ctx, tag, tc.idem, "", now, hold, 1000)
			require.NoError(t, err)
			require.Len(t, first, tc.wantFirst)
			again, _, err := b.H.Drain(b.Ctx, tag, tc.idem, "", now, hold, 1000)
			require.NoError(t, err)
			require.Len(t, again, tc.wantAgain)
			if tc.wantFirst == 1 {
				require.Equal(t, j.ID, first[0].ID)
				require.Equal(t, "report", *first[0].Result)
			}
		})
	}
}

// A hand-over (drain, ack, wait take) given back returns its rows to the
// next drain; a call of the same nonce landing after the undo (a stalled
// pipeline, a client's resend) takes nothing; a resend landing before it
// answers the same; a drain's idempotency record goes with it.
func TestHandoverUndoScript(t *testing.T) {
	t.Parallel()
	hold := handover.DrainHold{}
	for _, tc := range []struct {
		desc     string
		take     func(b *testBundle, tag, id, nonce string) int
		announce bool
	}{
		{desc: "drain", take: func(b *testBundle, tag, _, nonce string) int {
			rows, _, err := b.H.Drain(b.Ctx, tag, "k1", nonce, now, hold, 1000)
			require.NoError(t, err)
			return len(rows)
		}},
		{desc: "ack", take: func(b *testBundle, tag, id, nonce string) int {
			ok, err := b.H.Ack(b.Ctx, tag, id, nonce, now)
			if err != nil {
				return 0
			}
			return map[bool]int{true: 1}[ok]
		}},
		{desc: "wait take", announce: true, take: func(b *testBundle, tag, id, nonce string) int {
			end, err := b.H.ReleaseWait(b.Ctx, tag, id, true, nonce, now)
			require.NoError(t, err)
			return map[bool]int{true: 1}[end == handover.WaitTaken]
		}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			tag := bgjobs.Tag("alpha", "s")
			j := b.PlainJob(t, tc.announce)
			_, err := b.Settle(t, j, registry.Settlement{Announce: tc.announce})
			require.NoError(t, err)

			require.Equal(t, 1, tc.take(b, tag, j.ID, "n1"))
			require.Equal(t, 1, tc.take(b, tag, j.ID, "n1"), "a resend of the same call answers the same")
			n, err := b.H.Undo(b.Ctx, tag, "n1", "k1", tc.announce, now)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, 0, tc.take(b, tag, j.ID, "n1"), "a call of a given-back nonce takes nothing")
			row, err := b.S.Load(b.Ctx, tag, j.ID)
			require.NoError(t, err)
			require.False(t, row.Notified)
			ttl, err := b.RDB.TTL(b.Ctx, b.S.Keys().Job(tag, j.ID)).Result()
			require.NoError(t, err)
			require.Less(t, ttl, time.Duration(0), "an unread row never ages out")

			rows, _, err := b.H.Drain(b.Ctx, tag, "k1", "n2", now, hold, 1000)
			require.NoError(t, err)
			require.Len(t, rows, 1, "the next drain (even with the old key) gets it")
			n, err = b.H.Undo(b.Ctx, tag, "n1", "k1", false, now)
			require.NoError(t, err)
			require.Equal(t, 0, n, "an old nonce's undo leaves another's hand-over alone")
		})
	}
}

func TestJoinLeaseAndWaitScripts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")

	// The straggler's claim: once.
	bid := "bt-0000000000aa"
	require.NoError(t, b.S.CreateBatch(b.Ctx, tag, bid, []*bgjobs.Job{{ID: "bg-0000000000aa", Agent: "alpha", OriginSession: "s", BatchID: &bid, CreatedAt: now}}, now))
	for i, want := range []bool{true, false} {
		joined, err := b.S.ForceJoin(b.Ctx, tag, bid, now)
		require.NoError(t, err)
		require.Equal(t, want, joined, "force join %d", i)
	}
	batch, err := b.S.LoadBatch(b.Ctx, tag, bid)
	require.NoError(t, err)
	require.True(t, batch.Joined && batch.Partial)

	// The maintenance lease: one holder at a time.
	for _, tc := range []struct {
		holder string
		want   bool
	}{{"a", true}, {"b", false}, {"a", true}} {
		ok, err := b.S.HoldLease(b.Ctx, "m", tc.holder, time.Minute)
		require.NoError(t, err)
		require.Equal(t, tc.want, ok, tc.holder)
	}
	b.S.ReleaseLease(b.Ctx, "m", "a")
	ok, err := b.S.HoldLease(b.Ctx, "m", "b", time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	// A waiter: take once ended, or hand the announcement back.
	for _, tc := range []struct {
		desc string
		take bool
		want handover.WaitEnd
	}{{"take", true, handover.WaitTaken}, {"let go", false, handover.WaitHandedBack}} {
		w := b.PlainJob(t, true)
		_, err := b.Settle(t, w, registry.Settlement{Announce: true})
		require.NoError(t, err)
		got, err := b.H.ReleaseWait(b.Ctx, tag, w.ID, tc.take, "", now)
		require.NoError(t, err)
		require.Equal(t, tc.want, got, tc.desc)
	}
}

func TestRequeueTurnCapAndMarkScripts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")

	// Requeue: a running row goes back to queued; nothing else moves.
	j := b.PlainJob(t, false)
	_, err := b.S.Start(b.Ctx, tag, j.ID, now)
	require.NoError(t, err)
	for i, want := range []bgjobs.Status{bgjobs.StatusQueued, bgjobs.StatusQueued} {
		require.NoError(t, b.S.Requeue(b.Ctx, tag, j.ID, nil))
		row, err := b.S.Load(b.Ctx, tag, j.ID)
		require.NoError(t, err)
		require.Equal(t, want, row.Status, "requeue %d", i)
	}

	// A mark on a row that is gone does not bring it back as a fragment.
	gone := registry.JobRef{Tag: tag, ID: "bg-0000000000ff"}
	_, err = b.S.MarkIndexed(b.Ctx, []registry.JobRef{gone, {Tag: tag, ID: j.ID}})
	require.NoError(t, err)
	row, err := b.S.Load(b.Ctx, tag, gone.ID)
	require.NoError(t, err)
	require.Nil(t, row)
	row, err = b.S.Load(b.Ctx, tag, j.ID)
	require.NoError(t, err)
	require.True(t, row.ReportIndexed)
}

// A drain hands over a page at a time and says when more wait; pages
// never repeat a job nor skip one, held reports included.
func TestDrainPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	ids := map[string]bool{}
	for range 25 {
		j := b.PlainJob(t, false)
		_, err := b.Settle(t, j, registry.Settlement{})
		require.NoError(t, err)
		ids[j.ID] = true
	}
	seen := map[string]int{}
	for page := 0; ; page++ {
		rows, more, err := b.H.Drain(b.Ctx, tag, "", "", now, handover.DrainHold{}, 10)
		require.NoError(t, err)
		require.LessOrEqual(t, len(rows), 10)
		for _, r := range rows {
			seen[r.ID]++
		}
		if !more {
			require.Equal(t, 2, page, "25 jobs in pages of 10: three drains")
			break
		}
	}
	require.Len(t, seen, 25)
	for id, n := range seen {
		require.True(t, ids[id])
		require.Equal(t, 1, n, "%s handed over once", id)
	}
}

// A full page leaves the pending set in chunks: 1,200 ended jobs drain as
// 1,000 and then 200, each once, and nothing stays pending.
func TestDrainALargePage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	for range 1200 {
		_, err := b.Settle(t, b.PlainJob(t, false), registry.Settlement{})
		require.NoError(t, err)
	}
	seen := map[string]bool{}
	for _, want := range []int{1000, 200} {
		rows, _, err := b.H.Drain(b.Ctx, tag, "", "", now, handover.DrainHold{}, 1000)
		require.NoError(t, err)
		require.Len(t, rows, want)
		left, err := b.RDB.ZCard(b.Ctx, b.S.Keys().Pending(tag)).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1200-len(seen)-want, left, "every job handed over left the pending set")
		for _, r := range rows {
			require.False(t, seen[r.ID], "%s handed over twice", r.ID)
			seen[r.ID] = true
		}
	}
	rows, more, err := b.H.Drain(b.Ctx, tag, "", "", now, handover.DrainHold{}, 1000)
	require.NoError(t, err)
	require.Empty(t, rows)
	require.False(t, more)
}

// On a Redis Cluster the sweeps' scans visit every master: sessions whose
// slots live on different masters are all found.
func TestScansVisitEveryMaster(t *testing.T) {
	t.Parallel()
	addrs := testenv.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	w := pipeline.New(rdb, nil)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	s := registry.New(rdb, w, "scan", time.Hour)
	want := map[string]bool{}
	masters := map[string]bool{}
	for i := range 30 {
		tag := bgjobs.Tag("alpha", fmt.Sprint("s", i))
		key := s.Keys().Outbox(tag)
		require.NoError(t, rdb.ZAdd(ctx, key, redis.Z{Score: 1, Member: "r|bg-000000000001"}).Err())
		node, err := rdb.MasterForKey(ctx, key)
		require.NoError(t, err)
		masters[node.Options().Addr] = true
		want[tag] = true
	}
	require.Len(t, masters, 3, "the sessions span every master")
	got := map[string]bool{}
	require.NoError(t, s.OutboxSessions(ctx, func(tag string) error { got[tag] = true; return nil }))
	require.Equal(t, want, got)
}

// The purge's and the reconciler's walk of a sorted set up to a cutoff, a
// page at a time: runs of a shared score across a page's end (a batch's
// members share their spawn's millisecond) are read whole, each member
// once, in score order, also while the walker removes what it has read.
func TestEachBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := b.S.Keys().AgentJobs("alpha")
	var want []string
	add := func(score float64, n int) {
		for range n {
			id := fmt.Sprintf("bg-%012x", len(want)+1)
			require.NoError(t, b.RDB.ZAdd(b.Ctx, key, redis.Z{Score: score, Member: id}).Err())
			if score <= 4000 {
				want = append(want, id)
			}
		}
	}
	add(1000, 7) // past the first page of 4
	add(1001, 3)
	for s := 1002.0; s <= 1006; s++ {
		add(s, 1)
	}
	add(4000, 4) // a page of ties at the cutoff itself
	add(4001, 2) // past it
	var got []string
	cutoff := time.UnixMilli(4000)
	require.NoError(t, b.S.EachAgentJobBefore(b.Ctx, "alpha", cutoff, 4, func(ids []string) error {
		got = append(got, ids...)
		return b.RDB.ZRem(b.Ctx, key, ids[0]).Err() // as a purge removes
	}))
	require.Equal(t, want, got)

	boom := fmt.Errorf("boom")
	calls := 0
	require.ErrorIs(t, b.S.EachAgentJobBefore(b.Ctx, "alpha", cutoff, 4, func([]string) error { calls++; return boom }), boom)
	require.Equal(t, 1, calls, "an error ends the walk")
	require.NoError(t, b.S.EachAgentJobBefore(b.Ctx, "nobody", cutoff, 4, func([]string) error {
		t.Fatal("no page for an empty list")
		return nil
	}))
}

// A run settles (or hands back) its job only while it is the job's latest:
// a handler that outlived its task (asynq moved on when its context ended)
// does nothing once the job was retried, queued or running again.
func TestALateRunSettlesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	j := b.PlainJob(t, false)
	st, err := b.S.Start(b.Ctx, tag, j.ID, now)
	require.NoError(t, err)
	first := &bgjobs.Run{Generation: st.Job.Generation, Attempt: st.Attempt}
	stopped := "cancelled by request"
	_, err = b.S.Settle(b.Ctx, registry.Settlement{Tag: tag, ID: j.ID, Now: now, Outcome: bgjobs.Outcome{Status: bgjobs.StatusCancelled, Error: &stopped}})
	require.NoError(t, err)
	require.NoError(t, b.S.Retry(b.Ctx, j, false, now))

	late := "the first run's late word"
	for _, phase := range []string{"queued again", "running again"} {
		_, err = b.S.Settle(b.Ctx, registry.Settlement{Tag: tag, ID: j.ID, Now: now, Outcome: bgjobs.Outcome{Status: bgjobs.StatusCancelled, Error: &late, Run: first}})
		require.ErrorIs(t, err, registry.ErrEnded, phase)
		require.NoError(t, b.S.Requeue(b.Ctx, tag, j.ID, first))
		row, err := b.S.Load(b.Ctx, tag, j.ID)
		require.NoError(t, err)
		require.Nil(t, row.Error, phase)
		if phase == "queued again" {
			require.Equal(t, bgjobs.StatusQueued, row.Status)
			st, err = b.S.Start(b.Ctx, tag, j.ID, now)
			require.NoError(t, err)
		} else {
			require.Equal(t, bgjobs.StatusRunning, row.Status, "the late run did not hand the new one back")
		}
	}
	second := &bgjobs.Run{Generation: st.Job.Generation, Attempt: st.Attempt}
	require.Equal(t, bgjobs.Run{Generation: 1, Attempt: 2}, *second)
	done := "done"
	_, err = b.S.Settle(b.Ctx, registry.Settlement{Tag: tag, ID: j.ID, Now: now, Outcome: bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &done, Run: second}})
	require.NoError(t, err, "the latest run settles")
	row, err := b.S.Load(b.Ctx, tag, j.ID)
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCompleted, row.Status)
}
