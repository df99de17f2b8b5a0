package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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
//
// Batches are applied two at a time yet count in stream order: a caller
// released for its entry finds every entry appended before it searchable.
func TestWriterServesCallersThatWaitForTheirEntry(t *testing.T) {
	t.Parallel()
	servesCallers(t, nil)
}

// A batch that fails is applied again, with whatever followed it: no
// caller is released early, none is lost, no document is indexed twice,
// and the checkpoint still ends at the last entry.
func TestWriterRecoversFromAFailedBatch(t *testing.T) {
	t.Parallel()
	var calls, failed atomic.Int64
	servesCallers(t, func(x *Index) func([]Doc, string) error {
		return func(docs []Doc, checkpoint string) error {
			if n := calls.Add(1); n == 3 || n == 6 { // there are at least ten: each caller's ten entries are in ten batches
				failed.Add(1)
				return errors.New("disk full")
			}
			return x.Apply(docs, checkpoint)
		}
	})
	require.EqualValues(t, 2, failed.Load(), "the failures happened")
}

func servesCallers(t *testing.T, apply func(x *Index) func([]Doc, string) error) {
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
	if apply != nil {
		w.apply = apply(x)
	}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)

	const callers, each = 16, 10
	var appendedMu sync.Mutex
	var appended []string // doc ids whose append has returned, in that order
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				appendedMu.Lock()
				before := slices.Clone(appended)
				appendedMu.Unlock()
				docID := fmt.Sprintf("c%d-%d", c, i)
				raw, _ := json.Marshal(doc(docID, "a", "s", fmt.Sprintf("caller%d note %d", c, i)))
				id, err := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"doc", raw}}).Result()
				if err == nil {
					appendedMu.Lock()
					appended = append(appended, docID)
					appendedMu.Unlock()
					waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
					err = w.WaitFor(waitCtx, id) // released once applied
					cancel()
				}
				for _, earlier := range append(before, docID) {
					if err == nil && !indexed(t, x, earlier) {
						err = fmt.Errorf("released for %s before %s, appended earlier, was searchable", docID, earlier)
					}
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
	if apply == nil {
		require.Equal(t, callers*each, total)
	} else {
		require.GreaterOrEqual(t, total, callers*each, "a failed batch's entries are applied again")
	}
	require.Less(t, len(batches), callers*each, "entries that arrive together share a batch")
	ckpt, err := x.Checkpoint()
	require.NoError(t, err)
	last, err := env.RDB.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	require.NoError(t, err)
	require.Equal(t, last[0].ID, ckpt, "the checkpoint is the last entry")
}

func indexed(t *testing.T, x *Index, id string) bool {
	d, err := x.idx.Document(id)
	require.NoError(t, err)
	return d != nil
}
