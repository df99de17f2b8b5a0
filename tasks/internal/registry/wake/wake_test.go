package wake_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/pipeline"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/wake"
)

// The wake-up scripts' outcomes, on real Redis when BGJOBS_TEST_REDIS_URL
// is set and on miniredis otherwise.

type testBundle struct {
	rdb  redis.UniversalClient
	s    *registry.Store
	wake *wake.Store
	ctx  context.Context
	n    int
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	env := testenv.New(t)
	w := pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	s := registry.New(env.RDB, w, env.Namespace, time.Hour)
	return &testBundle{rdb: env.RDB, s: s, wake: wake.New(env.RDB, w, s.Keys()), ctx: context.Background()}
}

var now = time.UnixMilli(1_800_000_000_000)

// plainJob writes a queued row with no batch in session s: a one-member
// batch's row, its batch field then cleared by hand (the store writes plain
// rows only together with their asynq task).
func (b *testBundle) plainJob(t *testing.T) *bgjobs.Job {
	t.Helper()
	b.n++
	bid := fmt.Sprintf("bt-%012x", b.n)
	j := &bgjobs.Job{ID: fmt.Sprintf("bg-%012x", b.n), Agent: "alpha", OriginSession: "s", Kind: bgjobs.KindWork,
		BatchID: &bid, CreatedAt: now}
	require.NoError(t, b.s.CreateBatch(b.ctx, bgjobs.Tag("alpha", "s"), bid, []*bgjobs.Job{j}, now))
	require.NoError(t, b.rdb.HDel(b.ctx, b.s.Keys().Job(bgjobs.Tag("alpha", "s"), j.ID), "batch_id").Err())
	j.BatchID = nil
	return j
}

func (b *testBundle) settle(t *testing.T, j *bgjobs.Job, st registry.Settlement) ([]registry.Entry, error) {
	t.Helper()
	r := "report"
	st.Tag, st.ID, st.Now, st.Outcome = bgjobs.Tag(j.Agent, j.OriginSession), j.ID, now, bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r}
	return b.s.Settle(b.ctx, st)
}

func kinds(es []registry.Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, string(e.Kind))
	}
	return out
}

func TestStormScripts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	lead, merged := b.plainJob(t), b.plainJob(t)
	window := time.Second
	for _, tc := range []struct {
		desc     string
		j        *bgjobs.Job
		at       time.Time
		wantSend bool
		wantWait time.Duration
	}{
		{desc: "the first goes at once", j: lead, at: now, wantSend: true, wantWait: window},
		{desc: "the next merges behind the window", j: merged, at: now.Add(200 * time.Millisecond), wantWait: 800 * time.Millisecond},
		{desc: "a repeat of the first is answered the same", j: lead, at: now.Add(300 * time.Millisecond), wantSend: true, wantWait: window},
		{desc: "a repeat of the merged is answered the same", j: merged, at: now.Add(400 * time.Millisecond), wantWait: 600 * time.Millisecond},
	} {
		send, wait, err := b.wake.StormGate(b.ctx, tag, tc.j.ID, 0, tc.at, window)
		require.NoError(t, err, tc.desc)
		require.Equal(t, tc.wantSend, send, tc.desc)
		require.Equal(t, tc.wantWait, wait, tc.desc)
	}
	_, ok, left, err := b.wake.StormFlush(b.ctx, tag, now.Add(500*time.Millisecond), window, false)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, left, "the window is still open")
	e, ok, _, err := b.wake.StormFlush(b.ctx, tag, now.Add(window), window, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, registry.Entry{Kind: registry.EntryMerged, Ref: merged.ID, At: now.Add(window).UnixMilli()}, e)
}

// Busy: a resume is held; a lapse before the lease ends changes nothing;
// idle with something undrained records one fold.
func TestBusyScripts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	require.NoError(t, b.wake.SetBusy(b.ctx, tag, now.Add(time.Minute), 2*time.Minute))
	held, err := b.wake.HoldIfBusy(b.ctx, tag, "bg-000000000abc", now)
	require.NoError(t, err)
	require.True(t, held)
	ended, folded, err := b.wake.EndBusy(b.ctx, tag, now, true)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, []bool{ended, folded})
	j := b.plainJob(t)
	_, err = b.settle(t, j, registry.Settlement{})
	require.NoError(t, err)
	ended, folded, err = b.wake.EndBusy(b.ctx, tag, now, false)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, []bool{ended, folded})
	out, err := b.s.Outbox(b.ctx, tag)
	require.NoError(t, err)
	require.Equal(t, []string{"f"}, kinds(out))
	held, err = b.wake.HoldIfBusy(b.ctx, tag, "bg-000000000abc", now)
	require.NoError(t, err)
	require.False(t, held)
}

// The delivery lock and the sent mark: one delivery of a session at a time,
// a lock freed only by its holder, a message marked sent once delivered.
func TestDeliveryLockAndMarks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	for _, tc := range []struct {
		desc    string
		holder  string
		want    bool
		release string // released by this holder first
	}{
		{desc: "the first takes the lock", holder: "m1", want: true},
		{desc: "a second waits its turn", holder: "m2", want: false},
		{desc: "another's release frees nothing", holder: "m2", release: "m2", want: false},
		{desc: "the holder's release frees it", holder: "m2", release: "m1", want: true},
	} {
		if tc.release != "" {
			b.wake.UnlockDelivery(b.ctx, tag, tc.release)
		}
		ok, err := b.wake.LockDelivery(b.ctx, tag, tc.holder, time.Minute)
		require.NoError(t, err, tc.desc)
		require.Equal(t, tc.want, ok, tc.desc)
	}
	sent, err := b.wake.Delivered(b.ctx, tag, "m1")
	require.NoError(t, err)
	require.False(t, sent)
	require.NoError(t, b.wake.MarkDelivered(b.ctx, tag, "m1", time.Minute))
	sent, err = b.wake.Delivered(b.ctx, tag, "m1")
	require.NoError(t, err)
	require.True(t, sent)
}
