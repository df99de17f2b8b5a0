package search

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// Offers: documents this process appends to the stream and whose caller
// waits until they are searchable (POST /v1/knowledge) are handed to the
// writer directly, not only read back from the stream. Read back, each
// waited for the writer's next read, its linger and its parse: about a
// quarter of the caller's time at 32 callers, while the index idled
// between batches a quarter of the time.
//
// The stream stays the record: a caller registers its documents (Expect)
// before appending them, and offers them (Apply) once the append returned.
// The read that reaches a registered document waits for its offer and skips
// it if the offer applied it, so the index's checkpoint never passes a
// document that is not in it; if the append failed (Cancel) or the offer's
// batch failed, the read applies the document as any other. Other
// processes read the entries from the stream as before.

// OfferLinger is the longest an offer's batch waits for more offers, and
// only while it holds fewer documents than the largest of the offers' last
// four batches: callers waiting on their documents send the next ones only
// once their batch is applied, and a batch taken at once would hold the
// first few of them and split the rest off into another, each paying
// bleve's cost per batch (measured against the last batch alone, batches
// shrank: 7–12 documents from 32 callers, against 13).
// A lone caller waits only for the four batches after a burst.
const OfferLinger = 2 * time.Millisecond

// offerWaitMax bounds how long the read waits for an offer to settle. An
// offer always settles (applied, failed or cancelled), but the read must
// not hang on a caller that vanished between Expect and Apply.
const offerWaitMax = 10 * time.Second

// errNotOffered is Apply's error when the documents were not applied ahead
// of the read: the caller falls back to WaitFor.
var errNotOffered = errors.New("search: not applied ahead of the read")

// Offer is documents a caller of this process is appending to the stream.
// A nil Offer is valid: Apply returns an error and Cancel does nothing.
type Offer struct {
	w    *Writer
	docs []Doc

	mu        sync.Mutex
	submitted bool
	applied   bool
	settledAt time.Time
	done      chan struct{} // closed once settled: applied, failed or withdrawn
}

// offerForget is how long an applied offer's documents stay registered
// waiting for the read to meet their entry. An entry the stream lost (a
// failover without BGJOBS_MIN_REPLICAS) is never met, and its offer would
// stay in memory, documents and all, for the life of the process; an
// entry met after this is applied again by the read, which replaces the
// document with itself.
const offerForget = 10 * time.Minute

// Expect registers docs, which the caller is about to append to the
// stream, to be applied ahead of the read; the caller then calls Apply once
// the append succeeded, and Cancel in any case (after Apply it does
// nothing). Reports are not offered (nil): a report must wait for the
// batches before it, as it supersedes the earlier reports of its job.
func (w *Writer) Expect(docs []Doc) *Offer {
	if w.offers == nil || len(docs) == 0 {
		return nil
	}
	for _, d := range docs {
		if d.SourceType == SourceReport {
			return nil
		}
	}
	o := &Offer{w: w, docs: docs, done: make(chan struct{})}
	w.earlyMu.Lock()
	for _, d := range docs {
		w.early[d.DocID] = o
	}
	w.earlyMu.Unlock()
	return o
}

// Apply offers the documents, now in the stream, and returns once they are
// searchable; an error means they were not applied ahead of the read (the
// read applies them: WaitFor their entry).
func (o *Offer) Apply(ctx context.Context) error {
	if o == nil {
		return errNotOffered
	}
	o.mu.Lock()
	settled := o.settledLocked()
	o.submitted = !settled
	o.mu.Unlock()
	if settled {
		return errNotOffered
	}
	select {
	case o.w.offers <- o:
	case <-o.w.stopped:
		o.settle(false)
	case <-ctx.Done():
		o.settle(false)
		return ctx.Err()
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if !o.applied {
		return errNotOffered
	}
	return nil
}

// Cancel withdraws documents that were never offered (their append failed,
// or the caller gave up): the read applies them if they are in the stream
// after all.
func (o *Offer) Cancel() {
	if o == nil {
		return
	}
	o.mu.Lock()
	submitted := o.submitted
	o.mu.Unlock()
	if !submitted {
		o.settle(false)
	}
}

// settle records the offer's outcome once; a later call does nothing. An
// offer that did not apply its documents unregisters them: the read then
// applies them like any entry, if they are in the stream at all (an append
// that failed leaves nothing for the read to meet, nor anything behind).
func (o *Offer) settle(applied bool) {
	o.mu.Lock()
	if o.settledLocked() {
		o.mu.Unlock()
		return
	}
	o.applied, o.settledAt = applied, time.Now()
	close(o.done)
	o.mu.Unlock()
	if !applied {
		o.w.earlyMu.Lock()
		for _, d := range o.docs {
			if o.w.early[d.DocID] == o {
				delete(o.w.early, d.DocID)
			}
		}
		o.w.earlyMu.Unlock()
	}
}

// settledLocked reports whether done is closed; o.mu is held.
func (o *Offer) settledLocked() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// offerLoop applies offers in batches, each once an apply slot is free,
// beside the read's batches.
func (w *Writer) offerLoop(ctx context.Context) {
	defer func() {
		close(w.stopped)
		for {
			select {
			case o := <-w.offers:
				o.settle(false)
			default:
				return
			}
		}
	}()
	var recent [4]int // documents in the last four batches
	for k := 0; ; k++ {
		last := max(recent[0], recent[1], recent[2], recent[3])
		var batch []*Offer
		n := 0
		take := func(o *Offer) { batch, n = append(batch, o), n+len(o.docs) }
		select {
		case o := <-w.offers:
			take(o)
		case <-ctx.Done():
			return
		}
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			batch[0].settle(false)
			return
		}
		if n < min(last, w.BatchMax) {
			linger := time.NewTimer(OfferLinger)
		gather:
			for n < min(last, w.BatchMax) {
				select {
				case o := <-w.offers:
					take(o)
				case <-linger.C:
					break gather
				}
			}
			linger.Stop()
		}
	drain:
		for n < w.BatchMax {
			select {
			case o := <-w.offers:
				take(o)
			default:
				break drain
			}
		}
		recent[k%len(recent)] = n
		w.wg.Go(func() { w.applyOffers(ctx, batch) })
	}
}

func (w *Writer) applyOffers(ctx context.Context, batch []*Offer) {
	var docs []Doc
	for _, o := range batch {
		docs = append(docs, o.docs...)
	}
	err := w.applyFunc()(docs, "")
	<-w.slots
	for _, o := range batch {
		o.settle(err == nil)
	}
	if err != nil {
		w.Log.Warn("offered documents; the read applies them", slog.Int("docs", len(docs)), slog.Any("err", err))
		return
	}
	if w.OnIndexed != nil {
		w.OnIndexed(context.WithoutCancel(ctx), docs)
	}
}

// forgetStale unregisters the documents of offers applied longer than
// w.forget ago, at most twice per w.forget; the read loop calls it.
func (w *Writer) forgetStale(now time.Time) {
	if now.Sub(w.lastForget) < w.forget/2 {
		return
	}
	w.lastForget = now
	w.earlyMu.Lock()
	defer w.earlyMu.Unlock()
	for id, o := range w.early {
		o.mu.Lock()
		stale := o.settledLocked() && o.applied && now.Sub(o.settledAt) > w.forget
		o.mu.Unlock()
		if stale {
			delete(w.early, id)
		}
	}
}

// offeredAndApplied reports whether an offer applied the document docID, just read
// from the stream: a document this process offered waits for its offer to
// settle; any other was not.
func (w *Writer) offeredAndApplied(ctx context.Context, docID string) bool {
	w.earlyMu.Lock()
	o := w.early[docID]
	delete(w.early, docID)
	w.earlyMu.Unlock()
	if o == nil {
		return false
	}
	select {
	case <-o.done:
	default:
		t := time.NewTimer(offerWaitMax)
		defer t.Stop()
		select {
		case <-o.done:
		case <-ctx.Done():
		case <-t.C:
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.applied
}

// leadingDocID is the doc_id that opens a stream entry's document, as
// json.Marshal writes a Doc, so an offered one is skipped unparsed; ok is
// false when the entry does not open that way (it is then parsed).
func leadingDocID(raw string) (id string, ok bool) {
	rest, found := strings.CutPrefix(raw, `{"doc_id":"`)
	if !found {
		return "", false
	}
	end := strings.IndexAny(rest, `"\`)
	if end <= 0 || rest[end] != '"' {
		return "", false
	}
	return rest[:end], true
}
