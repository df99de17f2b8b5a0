package wake_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/registrytest"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/wake"
)

// The wake-up scripts' outcomes, on real Redis when BGJOBS_TEST_REDIS_URL
// is set and on miniredis otherwise.

type testBundle struct {
	*registrytest.Bundle
	wake *wake.Store
}

func setup(t *testing.T) *testBundle {
	b := registrytest.New(t)
	return &testBundle{Bundle: b, wake: wake.New(b.RDB, b.W, b.S.Keys())}
}

var now = registrytest.Now

func kinds(es []registry.Entry) []string { return registrytest.Kinds(es) }

func TestStormScripts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	lead, merged := b.PlainJob(t, false), b.PlainJob(t, false)
	window := time.Second
	for _, tc := range []struct {
		desc     string
		j        *bgjobs.Job
		at       time.Time
		wantSend bool
		wantWait time.Duration
	}{
		{desc: "the first goes at once", j: lead, at: now, wantSend: true, wantWait: window},
		{desc: "the next merges, keeping the window open a window longer", j: merged, at: now.Add(200 * time.Millisecond), wantWait: window},
		{desc: "a repeat of the first is answered the same", j: lead, at: now.Add(300 * time.Millisecond), wantSend: true, wantWait: window},
		{desc: "a repeat of the merged is answered the same", j: merged, at: now.Add(400 * time.Millisecond), wantWait: 800 * time.Millisecond},
	} {
		send, wait, err := b.wake.StormGate(b.Ctx, tag, tc.j.ID, 0, tc.at, window, 3*window)
		require.NoError(t, err, tc.desc)
		require.Equal(t, tc.wantSend, send, tc.desc)
		require.Equal(t, tc.wantWait, wait, tc.desc)
	}
	_, ok, left, err := b.wake.StormFlush(b.Ctx, tag, now.Add(500*time.Millisecond), window, time.Minute, false)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 700*time.Millisecond, left, "the window is still open")
	end := now.Add(1200 * time.Millisecond)
	e, ok, left, err := b.wake.StormFlush(b.Ctx, tag, end, window, time.Minute, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, registry.Entry{Kind: registry.EntryMerged, Ref: merged.ID, At: end.UnixMilli()}, e)
	require.Equal(t, window, left, "a new window opens behind the merge")

	// Completions that keep coming stretch a window only up to its cap,
	// which doubles with each window that merged something.
	at := end
	for i := range 10 {
		j := b.PlainJob(t, false)
		at = end.Add(time.Duration(i+1) * 500 * time.Millisecond)
		send, _, err := b.wake.StormGate(b.Ctx, tag, j.ID, 0, at, window, 3*window)
		require.NoError(t, err)
		require.False(t, send, "completion %d merges", i)
	}
	_, ok, left, err = b.wake.StormFlush(b.Ctx, tag, at, window, time.Minute, false)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, end.Add(6*window).Sub(at), left, "the second window's cap is twice the first's: 6 s from its opening")
}

// Busy: a resume is held; a lapse before the lease ends changes nothing;
// idle with something undrained records one fold.
func TestBusyScripts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	require.NoError(t, b.wake.SetBusy(b.Ctx, tag, now.Add(time.Minute), 2*time.Minute))
	d, err := b.wake.BeginDelivery(b.Ctx, tag, "bg-000000000abc", "resume-bg-000000000abc", now, time.Minute)
	require.NoError(t, err)
	require.Equal(t, wake.DeliveryHeld, d)
	ended, folded, err := b.wake.EndBusy(b.Ctx, tag, now, true)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, []bool{ended, folded})
	j := b.PlainJob(t, false)
	_, err = b.Settle(t, j, registry.Settlement{})
	require.NoError(t, err)
	ended, folded, err = b.wake.EndBusy(b.Ctx, tag, now, false)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, []bool{ended, folded})
	out, err := b.S.Outbox(b.Ctx, tag)
	require.NoError(t, err)
	require.Equal(t, []string{"f"}, kinds(out))
	d, err = b.wake.BeginDelivery(b.Ctx, tag, "bg-000000000abc", "resume-bg-000000000abc", now, time.Minute)
	require.NoError(t, err)
	require.Equal(t, wake.DeliverNow, d, "idle: it goes")
}

// The delivery lock and the sent mark: one delivery of a session at a time,
// a lock freed only by its holder, a message sent once not sent again, and
// nothing sent while the session is busy.
func TestDeliveryLockAndMarks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tag := bgjobs.Tag("alpha", "s")
	for _, tc := range []struct {
		desc  string
		busy  bool
		end   string // ended by this sender first
		sent  bool   // … having sent its resume
		begin string
		want  wake.Delivery
	}{
		{desc: "the first takes the lock", begin: "m1", want: wake.DeliverNow},
		{desc: "a second waits its turn", begin: "m2", want: wake.DeliveryInFlight},
		{desc: "another's end frees nothing", end: "m2", begin: "m2", want: wake.DeliveryInFlight},
		{desc: "the holder's end frees it", end: "m1", sent: true, begin: "m2", want: wake.DeliverNow},
		{desc: "a message sent is not sent again", end: "m2", begin: "m1", want: wake.DeliveredBefore},
		{desc: "one not sent may go again", begin: "m2", want: wake.DeliverNow},
		{desc: "nothing goes while the session is busy", end: "m2", busy: true, begin: "m3", want: wake.DeliveryHeld},
	} {
		if tc.end != "" {
			var ttl time.Duration
			if tc.sent {
				ttl = time.Minute
			}
			require.NoError(t, b.wake.EndDelivery(b.Ctx, tag, tc.end, ttl), tc.desc)
		}
		if tc.busy {
			require.NoError(t, b.wake.SetBusy(b.Ctx, tag, now.Add(time.Minute), 2*time.Minute))
		}
		d, err := b.wake.BeginDelivery(b.Ctx, tag, "bg-000000000abc", tc.begin, now, time.Minute)
		require.NoError(t, err, tc.desc)
		require.Equal(t, tc.want, d, tc.desc)
	}
}
