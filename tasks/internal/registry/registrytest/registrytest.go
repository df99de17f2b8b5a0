// Package registrytest gives a test its own registry on its own Redis space
// (real Redis when BGJOBS_TEST_REDIS_URL is set, miniredis otherwise), with
// the rows and settles the script tables start from.
package registrytest

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
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
)

// Now is the tests' clock: scripts take their time as an argument.
var Now = time.UnixMilli(1_800_000_000_000)

// Bundle is one test's registry.
type Bundle struct {
	S   *registry.Store
	H   *handover.Store
	W   *pipeline.Writer
	RDB redis.UniversalClient
	Ctx context.Context
	n   int
}

// New returns a registry for t, stopped when t ends.
func New(t *testing.T) *Bundle {
	t.Helper()
	return On(t, testenv.New(t))
}

// On is New on the Redis space env (testenv.NewMini for a test that must
// have a server of its own).
func On(t *testing.T, env *testenv.Env) *Bundle {
	t.Helper()
	w := pipeline.New(env.RDB, slog.New(slog.DiscardHandler))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	s := registry.New(env.RDB, w, env.Namespace, time.Hour)
	return &Bundle{S: s, H: handover.New(w, s.Keys(), time.Hour), W: w, RDB: env.RDB, Ctx: context.Background()}
}

// Job writes a queued turn row of a one-member batch in session "s" of
// agent "alpha" (CreateBatch is the row writer that needs no asynq
// enqueue).
func (b *Bundle) Job(t *testing.T) *bgjobs.Job {
	t.Helper()
	b.n++
	bid := fmt.Sprintf("bt-%012x", b.n)
	j := &bgjobs.Job{ID: fmt.Sprintf("bg-%012x", b.n), Agent: "alpha", OriginSession: "s", Kind: bgjobs.KindTurn,
		Description: "d", Status: bgjobs.StatusQueued, BatchID: &bid, CreatedAt: Now}
	require.NoError(t, b.S.CreateBatch(b.Ctx, bgjobs.Tag("alpha", "s"), bid, []*bgjobs.Job{j}, Now))
	return j
}

// PlainJob is Job with no batch: its batch field cleared by hand (the
// store writes plain rows only together with their asynq task). waiting
// marks a caller waiting for it (wait_ms).
func (b *Bundle) PlainJob(t *testing.T, waiting bool) *bgjobs.Job {
	t.Helper()
	j := b.Job(t)
	key := b.S.Keys().Job(bgjobs.Tag("alpha", "s"), j.ID)
	require.NoError(t, b.RDB.HDel(b.Ctx, key, "batch_id").Err())
	if waiting {
		require.NoError(t, b.RDB.HSet(b.Ctx, key, "wait_until", Now.Add(time.Minute).UnixMilli()).Err())
	}
	j.BatchID = nil
	return j
}

// Settle settles j at Now; a Settlement without an outcome completes it
// with a report.
func (b *Bundle) Settle(t *testing.T, j *bgjobs.Job, st registry.Settlement) ([]registry.Entry, error) {
	t.Helper()
	r := "report"
	st.Tag, st.ID, st.Now = bgjobs.Tag(j.Agent, j.OriginSession), j.ID, Now
	if st.Outcome.Status == "" {
		st.Outcome = bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r}
	}
	return b.S.Settle(b.Ctx, st)
}

// Kinds lists the entries' kinds.
func Kinds(es []registry.Entry) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, string(e.Kind))
	}
	return out
}
