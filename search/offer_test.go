package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// offerRig is a writer on a test stream whose applies are counted by
// document, and may be stood in for (wrap).
type offerRig struct {
	t      *testing.T
	env    *testenv.Env
	x      *Index
	w      *Writer
	stream string

	mu      sync.Mutex
	applied map[string]int // doc id → times applied
}

func newOfferRig(t *testing.T, wrap func(apply func([]Doc, string) error) func([]Doc, string) error, set ...func(*Writer)) *offerRig {
	env := testenv.New(t)
	r := &offerRig{t: t, env: env, x: openTest(t), stream: env.Namespace + ":reports", applied: map[string]int{}}
	apply := func(docs []Doc, checkpoint string) error {
		if err := r.x.Apply(docs, checkpoint); err != nil {
			return err
		}
		r.mu.Lock()
		for _, d := range docs {
			r.applied[d.DocID]++
		}
		r.mu.Unlock()
		return nil
	}
	if wrap != nil {
		apply = wrap(apply)
	}
	r.w = &Writer{RDB: env.RDB, Stream: r.stream, AliveKey: env.Namespace + ":alive", Index: r.x,
		Log: slog.New(slog.DiscardHandler), apply: apply}
	for _, f := range set {
		f(r.w)
	}
	require.NoError(t, r.w.Start(context.Background()))
	t.Cleanup(r.w.Stop)
	return r
}

// add appends d to the stream as a caller does (json.Marshal of the Doc).
func (r *offerRig) add(d Doc) string {
	r.t.Helper()
	raw, _ := json.Marshal(d)
	id, err := r.env.RDB.XAdd(context.Background(), &redis.XAddArgs{Stream: r.stream, Values: []any{"doc", raw}}).Result()
	require.NoError(r.t, err)
	return id
}

func (r *offerRig) waitFor(id string, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return r.w.WaitFor(ctx, id)
}

// Callers that offer their texts, as POST /v1/knowledge does, beside
// entries of another process that only the read applies: each offer is
// searchable when Apply returns, every document is applied exactly once
// (the read skips the offered ones), and the checkpoint ends at the last
// entry.
func TestOffersAreAppliedAheadOfTheRead(t *testing.T) {
	t.Parallel()
	r := newOfferRig(t, nil)
	const callers, each = 12, 8
	var wg sync.WaitGroup
	errs := make(chan error, callers+1)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				d := note(fmt.Sprintf("c%d-%d", c, i), fmt.Sprintf("caller%d note %d", c, i))
				o := r.w.Expect([]Doc{d})
				if o == nil {
					errs <- errors.New("a note was not offered")
					return
				}
				r.add(d)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := o.Apply(ctx)
				cancel()
				o.Cancel() // after Apply: does nothing
				if err == nil && !indexed(t, r.x, d.DocID) {
					err = fmt.Errorf("%s: Apply returned before it was searchable", d.DocID)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var last string
	wg.Go(func() { // another process's entries, read back only
		for i := range each {
			last = r.add(note(fmt.Sprintf("other-%d", i), "from another process"))
			time.Sleep(5 * time.Millisecond)
		}
	})
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	require.NoError(t, r.waitFor(last, time.Minute))
	all, err := r.env.RDB.XRevRangeN(context.Background(), r.stream, "+", "-", 1).Result()
	require.NoError(t, err)
	require.NoError(t, r.waitFor(all[0].ID, time.Minute))
	r.mu.Lock()
	for id, n := range r.applied {
		require.Equal(t, 1, n, "%s applied %d times", id, n)
	}
	require.Len(t, r.applied, callers*each+each)
	r.mu.Unlock()
	n, err := r.x.Count()
	require.NoError(t, err)
	require.EqualValues(t, callers*each+each, n)
	checkpointReaches(t, r.x, all[0].ID)
	r.w.earlyMu.Lock()
	require.Empty(t, r.w.early, "every offered document was met by the read")
	r.w.earlyMu.Unlock()
}

// The read waits for an offer still being applied before it counts the
// entries after it: the checkpoint never passes an offered document that is
// not yet in the index.
func TestTheReadWaitsForAnOfferInFlight(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	r := newOfferRig(t, func(apply func([]Doc, string) error) func([]Doc, string) error {
		return func(docs []Doc, checkpoint string) error {
			if docs[0].DocID == "held" {
				<-hold
			}
			return apply(docs, checkpoint)
		}
	})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release) // before Stop, which waits for the apply

	held := note("held", "an offered note held in its apply")
	o := r.w.Expect([]Doc{held})
	heldID := r.add(held)
	applied := make(chan error, 1)
	go func() { applied <- o.Apply(context.Background()) }()
	after := r.add(note("after", "another process's note"))
	require.ErrorIs(t, r.waitFor(after, 300*time.Millisecond), context.DeadlineExceeded, "counted past an offer in flight")
	ckpt, err := r.x.Checkpoint()
	require.NoError(t, err)
	require.NotEqual(t, after, ckpt)
	require.NotEqual(t, heldID, ckpt)
	release()
	require.NoError(t, <-applied)
	require.NoError(t, r.waitFor(after, time.Minute))
	require.True(t, indexed(t, r.x, "held"))
	require.True(t, indexed(t, r.x, "after"))
	checkpointReaches(t, r.x, after)
}

// An offer whose batch fails, and one cancelled after its append landed
// anyway (the append's answer was lost), are applied by the read: the
// caller falls back to WaitFor. One whose append failed leaves nothing
// behind.
func TestTheReadAppliesWhatOffersDidNot(t *testing.T) {
	t.Parallel()
	r := newOfferRig(t, func(apply func([]Doc, string) error) func([]Doc, string) error {
		return func(docs []Doc, checkpoint string) error {
			if checkpoint == "" && docs[0].DocID == "fails" {
				return errors.New("disk full")
			}
			return apply(docs, checkpoint)
		}
	})
	ctx := context.Background()

	fails := note("fails", "an offer whose batch fails")
	o := r.w.Expect([]Doc{fails})
	id := r.add(fails)
	require.Error(t, o.Apply(ctx), "a failed offer reports it")
	require.NoError(t, r.waitFor(id, time.Minute))
	require.True(t, indexed(t, r.x, "fails"), "the read applied it")

	lost := note("lost", "an append whose answer was lost")
	o = r.w.Expect([]Doc{lost})
	id = r.add(lost)
	o.Cancel()
	require.Error(t, o.Apply(ctx), "a cancelled offer is not applied")
	require.NoError(t, r.waitFor(id, time.Minute))
	require.True(t, indexed(t, r.x, "lost"), "the read applied it")

	// An append that failed outright: the read never meets the text, and
	// nothing of the offer stays registered.
	r.w.Expect([]Doc{note("never", "an append that failed")}).Cancel()
	r.w.earlyMu.Lock()
	defer r.w.earlyMu.Unlock()
	require.Empty(t, r.w.early, "a withdrawn offer left its documents registered")
}

// An offer applied whose entry the stream then lost (a failover without
// replicas confirming the append) is not kept waiting for the read for
// ever: once forgotten, an entry that turns up after all is applied again
// by the read, the same document over itself. An offer still in flight is
// never forgotten.
func TestAppliedOffersAreForgottenWhenTheirEntryNeverComes(t *testing.T) {
	t.Parallel()
	r := newOfferRig(t, nil, func(w *Writer) { w.forget = 200 * time.Millisecond })
	ctx := context.Background()
	registered := func(id string) bool {
		r.w.earlyMu.Lock()
		defer r.w.earlyMu.Unlock()
		return r.w.early[id] != nil
	}

	lost := note("lost-in-failover", "appended, applied, and then lost with the master")
	require.NoError(t, r.w.Expect([]Doc{lost}).Apply(ctx))
	waiting := r.w.Expect([]Doc{note("in-flight", "an append still on its way")})
	require.Eventually(t, func() bool { return !registered("lost-in-failover") }, 30*time.Second, 20*time.Millisecond,
		"an applied offer whose entry never came stayed registered")
	require.True(t, registered("in-flight"), "an offer in flight was forgotten")
	waiting.Cancel()

	id := r.add(lost)
	require.NoError(t, r.waitFor(id, time.Minute))
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Equal(t, 2, r.applied["lost-in-failover"], "the entry met late was not applied by the read")
	require.True(t, indexed(t, r.x, "lost-in-failover"))
}

// Reports are not offered (each waits for the batches before it); a nil
// offer is safe to use; after Stop an offer returns at once.
func TestWhatIsNotOffered(t *testing.T) {
	t.Parallel()
	r := newOfferRig(t, nil)
	require.Nil(t, r.w.Expect([]Doc{doc("rep", "a", "s", "a report")}))
	require.Nil(t, r.w.Expect(nil))
	var none *Offer
	require.Error(t, none.Apply(context.Background()))
	none.Cancel()
	require.Nil(t, (&Writer{}).Expect([]Doc{note("n", "a writer never started")}))

	o := r.w.Expect([]Doc{note("late", "offered after Stop")})
	r.w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := o.Apply(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "Apply waited after Stop")
}

func TestLeadingDocID(t *testing.T) {
	raw, _ := json.Marshal(note("kn-1", "x"))
	for in, want := range map[string]string{
		string(raw):                   "kn-1",
		`{"doc_id":"a\"b","x":1}`:     "",
		`{"doc_id":"","x":1}`:         "",
		`{"job_id":"j","doc_id":"d"}`: "",
		`{"doc_id":"unterminated`:     "",
	} {
		got, ok := leadingDocID(in)
		require.Equal(t, want, got, in)
		require.Equal(t, want != "", ok, in)
	}
}

// Entries the offers applied leave the read only the checkpoint to move.
// It is written at once when none was written for checkpointEvery, and
// otherwise later, at the latest when the writer stops: the entries are
// counted applied meanwhile, and the index never records a checkpoint past
// a document it does not hold.
func TestACheckpointLeftToTheReadIsWrittenLaterOrOnStop(t *testing.T) {
	t.Parallel()
	r := newOfferRig(t, nil, func(w *Writer) { w.checkpointEvery = time.Hour })
	offer := offerer(t, r)
	first := offer("first")
	checkpointReaches(t, r.x, first) // the first write of the writer's life goes at once
	offer("second")
	third := offer("third")
	ckpt, err := r.x.Checkpoint()
	require.NoError(t, err)
	require.Equal(t, first, ckpt, "within checkpointEvery of the last write, the checkpoint waits")
	for _, id := range []string{"first", "second", "third"} {
		require.True(t, indexed(t, r.x, id))
	}
	r.w.Stop()
	ckpt, err = r.x.Checkpoint()
	require.NoError(t, err)
	require.Equal(t, third, ckpt, "Stop writes the checkpoint it held")
}

// With nothing more arriving, a checkpoint held back is written once
// checkpointEvery has passed, the writer still running.
func TestAHeldCheckpointIsWrittenWhenDue(t *testing.T) {
	t.Parallel()
	r := newOfferRig(t, nil, func(w *Writer) { w.checkpointEvery = 300 * time.Millisecond })
	offer := offerer(t, r)
	checkpointReaches(t, r.x, offer("first"))
	checkpointReaches(t, r.x, offer("second"))
}

// offerer offers one note at a time as POST /v1/knowledge does, and
// returns its stream entry once the writer counts it applied.
func offerer(t *testing.T, r *offerRig) func(id string) string {
	return func(id string) string {
		d := note(id, "an offered note")
		o := r.w.Expect([]Doc{d})
		entry := r.add(d)
		require.NoError(t, o.Apply(context.Background()))
		require.NoError(t, r.waitFor(entry, time.Minute), "counted applied")
		return entry
	}
}
