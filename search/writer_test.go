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
// Batches count in stream order: a caller released for its entry finds
// every entry appended before it searchable.
func TestWriterServesCallersThatWaitForTheirEntry(t *testing.T) {
	t.Parallel()
	servesCallers(t, nil)
}

// A batch that fails is applied again, with whatever followed it: no
// caller is released early, every document is in the index, and the
// checkpoint still ends at the last entry.
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
				raw, _ := json.Marshal(note(docID, fmt.Sprintf("caller%d note %d", c, i)))
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
	last, err := env.RDB.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	require.NoError(t, err)
	checkpointReaches(t, x, last[0].ID)
}

// checkpointReaches waits for the index's checkpoint to be id: a batch
// that carried none has its checkpoint written within checkpointEvery.
func checkpointReaches(t *testing.T, x *Index, id string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the checkpoint is "+id, func() bool {
		ckpt, err := x.Checkpoint()
		require.NoError(t, err)
		return ckpt == id
	})
}

func indexed(t *testing.T, x *Index, id string) bool {
	d, err := x.idx.Document(id)
	require.NoError(t, err)
	return d != nil
}

// The next batch is applied while one is still being applied, yet counts
// only after it: its caller waits, and the checkpoint moves past both once
// both are in. A batch holding a report waits for the one in flight, since
// a report supersedes its job's earlier reports found in the index.
func TestWriterAppliesTheNextBatchBesideTheOneInFlight(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	ctx := context.Background()
	x := openTest(t)
	stream := env.Namespace + ":reports"
	// held: batches starting with these documents stay in flight until told.
	held := map[string]chan struct{}{"first": make(chan struct{}), "third": make(chan struct{})}
	started := make(chan string, 4)
	w := &Writer{RDB: env.RDB, Stream: stream, AliveKey: env.Namespace + ":alive", Index: x, Log: slog.New(slog.DiscardHandler),
		apply: func(docs []Doc, checkpoint string) error {
			started <- docs[0].DocID
			if ch, ok := held[docs[0].DocID]; ok {
				<-ch
			}
			return x.Apply(docs, checkpoint)
		}}
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)
	var once sync.Map
	letGo := func(id string) {
		if _, done := once.LoadOrStore(id, true); !done {
			close(held[id])
		}
	}
	t.Cleanup(func() { letGo("first"); letGo("third") }) // before Stop, which waits for them
	add := func(d Doc) string {
		raw, _ := json.Marshal(d)
		id, err := env.RDB.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"doc", raw}}).Result()
		require.NoError(t, err)
		return id
	}
	next := func(what string) string {
		t.Helper()
		select {
		case id := <-started:
			return id
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no batch started", what)
			return ""
		}
	}
	waitFor := func(id string, d time.Duration) error {
		waitCtx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return w.WaitFor(waitCtx, id)
	}
	notStarted := func(what string) {
		t.Helper()
		select {
		case id := <-started:
			t.Fatalf("%s: %s started while a batch was in flight", what, id)
		case <-time.After(300 * time.Millisecond):
		}
	}

	// Two notes: the second is applied beside the first, but counts after it.
	add(note("first", "the first note"))
	require.Equal(t, "first", next("first"))
	second := add(note("second", "the second note"))
	require.Equal(t, "second", next("second, beside the first"))
	testenv.Eventually(t, 30*time.Second, "the second batch in the index", func() bool { return indexed(t, x, "second") })
	require.ErrorIs(t, waitFor(second, 300*time.Millisecond), context.DeadlineExceeded, "the second counted before the first")
	letGo("first")
	require.NoError(t, waitFor(second, 30*time.Second))
	checkpointReaches(t, x, second) // past both

	// A report waits for the note in flight.
	add(note("third", "the third note"))
	require.Equal(t, "third", next("third"))
	report := add(doc("report", "a", "s", "a report"))
	notStarted("the report")
	letGo("third")
	require.Equal(t, "report", next("the report, once the third is in"))
	require.NoError(t, waitFor(report, 30*time.Second))
	for _, id := range []string{"first", "second", "third", "report"} {
		require.True(t, indexed(t, x, id), id)
	}
	checkpointReaches(t, x, report)
}

// note is a knowledge text: unlike a report, it supersedes nothing.
func note(id, body string) Doc {
	d := doc(id, "a", "s", body)
	d.SourceType, d.JobID = SourceIngest, ""
	return d
}
