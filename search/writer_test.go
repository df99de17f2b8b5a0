package search

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// Callers that each wait for their entry, as POST /v1/knowledge does, and
// send the next once it is applied, so reads keep finding fewer entries
// than the last batch and the writer lingers and tops them up: every entry
// is applied once, each caller is released, batches hold more than one
// entry, and the checkpoint ends at the last entry. How large the batches
// grow is timing, so the bench reports it (docs a batch on the knowledge
// lines), not this test.
func TestWriterServesCallersThatWaitForTheirEntry(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	x := openTest(t)
	stream := env.Namespace + ":reports"
	var mu sync.Mutex
	var batches []int
	w := &Writer{RDB: env.RDB, Stream: stream, AliveKey: env.Namespace + ":alive", Index: x,
		Log: slog.New(slog.DiscardHandler), BatchMax: 50,
		OnIndexed: func(_ context.Context, docs []Doc) {
			mu.Lock()
			batches = append(batches, len(docs))
			mu.Unlock()
		}}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)

	const callers, each = 16, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				raw, _ := json.Marshal(doc(fmt.Sprintf("c%d-%d", c, i), "a", "s", fmt.Sprintf("caller%d note %d", c, i)))
				id, err := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"doc", raw}}).Result()
				if err == nil {
					waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
					err = w.WaitFor(waitCtx, id) // released once applied
					cancel()
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	n, err := x.Count()
	require.NoError(t, err)
	require.EqualValues(t, callers*each, n, "every entry applied once")
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, b := range batches {
		total += b
	}
	require.Equal(t, callers*each, total)
	require.Less(t, len(batches), callers*each, "entries that arrive together share a batch")
	ckpt, err := x.Checkpoint()
	require.NoError(t, err)
	last, err := env.RDB.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	require.NoError(t, err)
	require.Equal(t, last[0].ID, ckpt, "the checkpoint is the last entry")
}
