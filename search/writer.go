package search

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/metrics"
)

// Writer is the one process-wide writer of an Index: it tails the reports
// stream from the index's checkpoint and applies entries in batches. A
// batch is whatever arrived while the last one was applied (group commit):
// under load batches grow by themselves, and a lone entry is applied at
// once — waiting to fill a batch would only delay what waits for it (a
// report's held notification, a caller of WaitFor). The one wait is
// Linger's, for callers a batch just released. Texts this process appends
// for a waiting caller (POST /v1/knowledge) are offered to the writer
// directly instead (offer.go), and the read skips them.
type Writer struct {
	// RDB is the Redis the stream lives on.
	RDB redis.UniversalClient
	// Stream is the reports stream key.
	Stream string
	// AliveKey is refreshed while the writer runs, so settles know reports
	// are being made searchable somewhere.
	AliveKey string
	// Index is written to.
	Index *Index
	// OnIndexed runs after each applied batch.
	OnIndexed func(ctx context.Context, docs []Doc)
	// Log defaults to slog.Default().
	Log *slog.Logger
	// BatchMax is the most entries per batch. Defaults to 200.
	BatchMax int

	stop context.CancelFunc
	wg   sync.WaitGroup

	// apply stands in for Index.Apply in tests.
	apply func(docs []Doc, checkpoint string) error

	mu      sync.Mutex
	applied string
	changed chan struct{}

	// slots holds one token per batch being applied, the read's and
	// offers' alike (applyingMax).
	slots chan struct{}
	// offers feeds offerLoop; stopped is closed once it has returned.
	offers  chan *Offer
	stopped chan struct{}
	earlyMu sync.Mutex
	early   map[string]*Offer // doc id → the offer applying it ahead of the read
	// forget is offerForget, shorter in tests; lastForget is the read
	// loop's last forgetStale.
	forget     time.Duration
	lastForget time.Time
	// checkpointEvery is the const of that name, longer in tests.
	checkpointEvery time.Duration
}

// AliveTTL is how long AliveKey outlives the writer's last refresh.
const AliveTTL = 30 * time.Second

// Start runs the writer until Stop.
func (w *Writer) Start(ctx context.Context) error {
	if w.Log == nil {
		w.Log = slog.Default()
	}
	if w.BatchMax == 0 {
		w.BatchMax = 200
	}
	from, err := w.Index.Checkpoint()
	if err != nil {
		return err
	}
	w.applied, w.changed = from, make(chan struct{})
	w.slots, w.offers, w.stopped = make(chan struct{}, applyingMax), make(chan *Offer), make(chan struct{})
	w.early = map[string]*Offer{}
	if w.forget == 0 {
		w.forget = offerForget
	}
	if w.checkpointEvery == 0 {
		w.checkpointEvery = checkpointEvery
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.wg.Go(func() { w.loop(ctx, from) })
	w.wg.Go(func() { w.offerLoop(ctx) })
	return nil
}

// Stop ends the loop after the batch in hand.
func (w *Writer) Stop() {
	if w.stop != nil {
		w.stop()
	}
	w.wg.Wait()
}

// WaitFor blocks until the entry id is applied or ctx ends.
func (w *Writer) WaitFor(ctx context.Context, id string) error {
	for {
		w.mu.Lock()
		done, ch := CompareIDs(w.applied, id) >= 0, w.changed
		w.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Linger is how long the writer waits for more entries when a read finds
// fewer than the batch it last applied. Callers that wait for their entry
// (WaitFor) send their next one only once that batch is applied:
// read at once, the next batch holds the few that came meanwhile and the
// rest follow in another, so batches split and each pays bleve's cost per
// batch again. A lone caller never waits (its last batch was one entry),
// nor does a burst (the read fills BatchMax).
const Linger = time.Millisecond

// applyingMax batches may be applied at once. bleve builds a batch's
// segment on the goroutine that applies it, a core's work for most of the
// batch's time, while the callers whose entries came after wait and the
// other core idles: the next batch builds beside it (POST /v1/knowledge
// from 32 clients: 0.58 → 0.73 of bleve's own batch rate, medians of five
// alternating runs; three at once did no better). Batches still end in
// stream order: the applied mark, the checkpoint and OnIndexed follow each in
// turn (complete). Offers' batches (offer.go) take the same slots. Two of
// the read's batches run together only when the order of their
// introduction into the index cannot matter:
//   - a batch holding a report waits for the one before it, since a
//     report supersedes the earlier reports of its job (Index.Apply looks
//     them up in the index);
//   - so does a batch sharing a document id with the one before it;
//   - a batch applied beside another carries no checkpoint, which is
//     recorded once every batch before it is in (a crash in between
//     applies it again: its documents replace themselves).
//
// A batch that fails stops the batches after it from counting; once those
// in flight are done, the stream is read again from the last applied entry.
const applyingMax = 2

// batch is one read of the stream on its way into the index.
type batch struct {
	docs []Doc
	last string
	// checkpoint is last when Apply records it (nothing was in flight),
	// "" when complete does, after the batches before.
	checkpoint string
	// gen is the reader's generation: a failure starts a new one, and the
	// batches of the failed one left in flight do not count.
	gen int
	// done has Apply's error; finished is closed once complete is through
	// with the batch.
	done     chan error
	finished chan struct{}
}

func (w *Writer) loop(ctx context.Context, from string) {
	queue := make(chan *batch, applyingMax)
	var failed atomic.Bool
	w.wg.Go(func() { w.complete(ctx, queue, &failed) })
	defer close(queue)
	lastBeat := time.Time{}
	lastBatch, gen := 0, 0
	var flight []*batch // started, not known to have finished, oldest first
	for ctx.Err() == nil {
		if failed.Load() {
			// A batch failed; once the rest in flight are done, read again
			// from the last applied entry. (Checked before each read too:
			// the callers of the batches in flight may send nothing new.)
			if len(flight) > 0 {
				<-flight[len(flight)-1].finished
			}
			w.mu.Lock()
			from = w.applied
			w.mu.Unlock()
			failed.Store(false)
			gen++
			flight, lastBatch = nil, 0
			sleep(ctx, time.Second)
			continue
		}
		if time.Since(lastBeat) > AliveTTL/3 {
			w.RDB.Set(ctx, w.AliveKey, "1", AliveTTL)
			lastBeat = time.Now()
		}
		w.forgetStale(time.Now())
		msgs, err := w.read(ctx, from, w.BatchMax, time.Second)
		if err == nil && len(msgs) > 0 && len(msgs) < min(lastBatch, w.BatchMax) {
			sleep(ctx, Linger)
			var more []redis.XMessage
			more, err = w.read(ctx, msgs[len(msgs)-1].ID, w.BatchMax-len(msgs), -1)
			msgs = append(msgs, more...)
		}
		if err != nil {
			if ctx.Err() == nil {
				w.Log.Warn("reports stream", slog.Any("err", err))
				sleep(ctx, time.Second)
			}
			continue
		}
		if len(msgs) == 0 {
			metrics.IndexLag.Set(0)
			continue
		}
		if ms, _ := splitID(msgs[0].ID); ms > 0 {
			metrics.IndexLag.Set(max(0, time.Since(time.UnixMilli(int64(ms))).Seconds()))
		}
		b := &batch{docs: parseEntries(msgs, w.Log, func(id string) bool { return w.offeredAndApplied(ctx, id) }), last: msgs[len(msgs)-1].ID, gen: gen,
			done: make(chan error, 1), finished: make(chan struct{})}
		for len(flight) > 0 && isClosed(flight[0].finished) {
			flight = flight[1:]
		}
		if len(flight) >= applyingMax {
			<-flight[0].finished
			flight = flight[1:]
		}
		if len(flight) > 0 && mustFollow(b.docs, flight) {
			<-flight[len(flight)-1].finished
			flight = nil
		}
		if failed.Load() {
			continue // reset at the loop's top; b is read again
		}
		if len(b.docs) == 0 {
			// Offers applied them all (or none was readable): nothing for
			// bleve, and complete records the checkpoint in its turn.
			b.done <- nil
		} else {
			if len(flight) == 0 {
				b.checkpoint = b.last
			}
			go func() {
				w.slots <- struct{}{}
				err := w.applyFunc()(b.docs, b.checkpoint)
				<-w.slots
				b.done <- err
			}()
		}
		queue <- b
		from, lastBatch = b.last, len(msgs)
		flight = append(flight, b)
	}
}

// complete takes the batches in the order they were read: each counts
// once applied, and the first that fails sets failed.
func (w *Writer) complete(ctx context.Context, queue <-chan *batch, failed *atomic.Bool) {
	ctx = context.WithoutCancel(ctx)
	failedGen := -1
	var cp checkpointer
	defer cp.flush(w)
	for {
		var b *batch
		select {
		case b = <-queue:
		case <-cp.due:
			cp.flush(w)
			continue
		}
		if b == nil {
			return // the queue is closed
		}
		err := <-b.done
		if b.gen == failedGen {
			close(b.finished) // after a failure: read and applied again
			continue
		}
		if err == nil {
			cp.done(w, b)
		}
		if err != nil {
			w.Log.Error("index batch", slog.Int("docs", len(b.docs)), slog.Any("err", err))
			failedGen = b.gen
			failed.Store(true) // before finished: the reader looks after waiting
		} else {
			w.mu.Lock()
			w.applied = b.last
			close(w.changed)
			w.changed = make(chan struct{})
			w.mu.Unlock()
			if w.OnIndexed != nil && len(b.docs) > 0 {
				w.OnIndexed(ctx, b.docs)
			}
		}
		close(b.finished)
	}
}

// checkpointEvery: a checkpoint a batch did not carry (it was applied
// beside another, or the offers had applied all its documents) is written
// at most this often. Each write is a bleve batch of its own: with callers
// waiting one text at a time, the read met their entries some hundred
// times a second, each time only to move the checkpoint, and each of those
// batches made bleve take a new snapshot of every segment in memory. A
// crash re-reads at most this much more of the stream, applying again
// documents that are in the index already, each over itself.
const checkpointEvery = 100 * time.Millisecond

// checkpointer holds the checkpoint complete has not yet written; due
// fires when it may be, and is nil while nothing waits, so an idle writer
// sleeps.
type checkpointer struct {
	pending     string
	lastWritten time.Time
	due         <-chan time.Time
}

// done notes a batch complete: its checkpoint, if it carried none, is
// written now if none was for checkpointEvery, else once due.
func (c *checkpointer) done(w *Writer, b *batch) {
	if b.checkpoint != "" {
		c.pending, c.due = "", nil // written with the batch, and later than any pending
		return
	}
	c.pending = b.last
	switch wait := w.checkpointEvery - time.Since(c.lastWritten); {
	case wait <= 0:
		c.flush(w)
	case c.due == nil:
		c.due = time.After(wait)
	}
}

// flush writes the pending checkpoint; one that fails is tried again a
// checkpointEvery later.
func (c *checkpointer) flush(w *Writer) {
	c.due = nil
	if c.pending == "" {
		return
	}
	if err := w.Index.SetCheckpoint(c.pending); err != nil {
		w.Log.Warn("index checkpoint", slog.String("entry", c.pending), slog.Any("err", err))
		c.due = time.After(w.checkpointEvery)
		return
	}
	c.pending, c.lastWritten = "", time.Now()
}

// applyFunc is what applies a batch: the index, unless a test stands in.
func (w *Writer) applyFunc() func([]Doc, string) error {
	if w.apply != nil {
		return w.apply
	}
	return w.Index.Apply
}

// mustFollow reports whether docs must wait for the batches in flight to
// be in the index: they hold a report, or share a document with them.
func mustFollow(docs []Doc, flight []*batch) bool {
	ids := map[string]bool{}
	for _, b := range flight {
		for _, d := range b.docs {
			ids[d.DocID] = true
		}
	}
	for _, d := range docs {
		if d.SourceType == SourceReport || ids[d.DocID] {
			return true
		}
	}
	return false
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// read returns up to count entries after from, waiting up to block for
// the first (a negative block does not wait).
func (w *Writer) read(ctx context.Context, from string, count int, block time.Duration) ([]redis.XMessage, error) {
	res, err := w.RDB.XRead(ctx, &redis.XReadArgs{Streams: []string{w.Stream, from}, Count: int64(count), Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[0].Messages, nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// CompareIDs orders two stream entry ids ("ms-seq").
func CompareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	switch {
	case am != bm:
		if am < bm {
			return -1
		}
		return 1
	case as != bs:
		if as < bs {
			return -1
		}
		return 1
	}
	return 0
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	a, _ := strconv.ParseUint(ms, 10, 64)
	b, _ := strconv.ParseUint(seq, 10, 64)
	return a, b
}

// Rebuild replaces the index under dir with one built from the whole
// stream, and returns how many documents it holds. The serving process
// must be stopped: bleve allows one process per index directory.
func Rebuild(ctx context.Context, dir string, rdb redis.UniversalClient, stream string, log *slog.Logger) (uint64, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	lock, err := lockDir(dir) // refuses while a serve holds the index
	if err != nil {
		return 0, err
	}
	if err := os.RemoveAll(filepath.Join(dir, "index.bleve")); err != nil {
		lock.Close()
		return 0, err
	}
	x, _, err := open(dir, log)
	if err != nil {
		lock.Close()
		return 0, err
	}
	x.lock = lock
	defer x.Close()
	w := &Writer{RDB: rdb, Stream: stream, Index: x, Log: log, BatchMax: 500}
	from := StreamStart
	for {
		msgs, err := w.read(ctx, from, w.BatchMax, -1)
		if err != nil {
			return 0, err
		}
		if len(msgs) == 0 {
			return x.Count()
		}
		docs := parseEntries(msgs, log, nil)
		from = msgs[len(msgs)-1].ID
		if err := x.Apply(docs, from); err != nil {
			return 0, err
		}
	}
}

// parseEntries reads the documents of stream entries, leaving out those
// skip (if any) says were applied already; an unreadable entry is logged
// and skipped, never retried forever.
func parseEntries(msgs []redis.XMessage, log *slog.Logger, skip func(docID string) bool) []Doc {
	docs := make([]Doc, 0, len(msgs))
	for _, m := range msgs {
		raw, _ := m.Values["doc"].(string)
		id, known := leadingDocID(raw)
		if known && skip != nil && skip(id) {
			continue
		}
		var d Doc
		if err := json.Unmarshal([]byte(raw), &d); err != nil || d.DocID == "" {
			log.Error("reports stream entry unreadable; skipped", slog.String("id", m.ID), slog.Any("err", err))
			continue
		}
		if !known && skip != nil && skip(d.DocID) {
			continue
		}
		docs = append(docs, d)
	}
	return docs
}
