package search

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search"
	"github.com/blevesearch/bleve/v2/search/query"
	zapx "github.com/blevesearch/zapx/v17"

	"github.com/bgjobs/bgjobs"
)

// Index is the bleve knowledge store of one process (bleve holds a file
// lock: one process per directory).
type Index struct {
	path string
	// lock is held while the index is open: one process at a time.
	lock *os.File
	// mu keeps Close from closing the index under a call. Everything else
	// shares it: bleve is safe for concurrent use (a search reads a
	// snapshot while a batch is applied), and batches come from one writer
	// (the Writer, or Rebuild with the directory locked). Batches once held
	// it alone, and every recall waited for the batch in progress: over
	// 50,000 documents, with batches of 200 coming, p50 about 100 ms
	// instead of 11 (make bench).
	mu  sync.RWMutex
	idx bleve.Index
}

// checkpointKey is where the index keeps the last stream entry it applied,
// written in the same batch as the documents, so a crash never applies an
// entry twice nor skips one.
var checkpointKey = []byte("bgjobs.checkpoint")

// StreamStart is the checkpoint of an empty index: read the stream from its
// beginning.
const StreamStart = "0-0"

// Open opens the index under dir, creating it when missing. An index that
// cannot be opened is moved aside and created anew; rebuilt says so, and
// the writer then replays the whole stream into it.
func Open(dir string, log *slog.Logger) (x *Index, rebuilt bool, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, false, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, false, err
	}
	x, rebuilt, err = open(dir, log)
	if err != nil {
		lock.Close()
		return nil, false, err
	}
	x.lock = lock
	return x, rebuilt, nil
}

// runtimeConfig: a batch returns once its documents are searchable, not
// once they are on disk. The index is a cache of the reports stream: each
// batch carries its stream checkpoint, persisted with its documents, so an
// index reopened after a crash (or a stop) resumes from the last batch that
// reached disk and indexes the rest again. Waiting for the disk cost ~4 ms a
// batch, which bounded POST /v1/knowledge (each answer waits for its text).
//
// The persister naps persistNap between flushes, so the small batches that
// callers waiting one text at a time make are merged in memory and written
// as one segment, rather than each written and then merged again on disk
// (that merging took 44 % of the CPU of POST /v1/knowledge from 32 clients;
// with the nap the rate went from ~0.4 to ~0.7 of bleve's own batch rate).
// A crash re-indexes at most that much more from the stream.
// bleve writes into the map it is given, so each open gets its own.
func runtimeConfig() map[string]any {
	return map[string]any{
		"unsafe_batch":           true,
		"scorchPersisterOptions": map[string]any{"PersisterNapTimeMSec": persistNap.Milliseconds()},
	}
}

// persistNap is how long the index's persister waits between flushes.
const persistNap = 2 * time.Second

// zapx sizes a new segment's buffer for the batch plus a hundred documents
// (its NewSegmentBufferNumResultsBump), in memory it allocates and clears.
// For the batches of ten or twenty that callers waiting on their text make,
// that is five to ten times the segment, and clearing it took an eighth of
// the CPU of POST /v1/knowledge from 32 clients; sized for the batch plus
// two, that rate rose by a third or more (1,070–1,370 → 1,600–2,060 docs/s
// in alternating runs). A segment bigger than the estimate grows its
// buffer as it writes.
func init() { zapx.NewSegmentBufferNumResultsBump = 2 }

func open(dir string, log *slog.Logger) (x *Index, rebuilt bool, err error) {
	path := filepath.Join(dir, "index.bleve")
	idx, err := bleve.OpenUsing(path, runtimeConfig())
	switch {
	case err == nil:
		return &Index{path: path, idx: idx}, false, nil
	case errors.Is(err, bleve.ErrorIndexPathDoesNotExist):
	default:
		aside := fmt.Sprintf("%s.broken-%d", path, time.Now().Unix())
		log.Warn("search index unreadable; rebuilding it from the reports stream", slog.String("path", path),
			slog.String("moved_to", aside), slog.Any("err", err))
		if err := os.Rename(path, aside); err != nil {
			return nil, false, fmt.Errorf("move unreadable index aside: %w", err)
		}
	}
	idx, err = bleve.NewUsing(path, newMapping(), bleve.Config.DefaultIndexType, bleve.Config.DefaultKVStore, runtimeConfig())
	if err != nil {
		return nil, false, fmt.Errorf("create search index: %w", err)
	}
	return &Index{path: path, idx: idx}, true, nil
}

// Close closes the index.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	err := x.idx.Close()
	if x.lock != nil {
		x.lock.Close()
	}
	return err
}

// Checkpoint is the last stream entry applied.
func (x *Index) Checkpoint() (string, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	v, err := x.idx.GetInternal(checkpointKey)
	if err != nil {
		return "", err
	}
	if len(v) == 0 {
		return StreamStart, nil
	}
	return string(v), nil
}

// Apply indexes docs and records checkpoint, in one bleve batch; "" records
// none (SetCheckpoint follows). A report supersedes the earlier reports of
// its job. One writer calls it; recalls go on meanwhile.
func (x *Index) Apply(docs []Doc, checkpoint string) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	b := x.idx.NewBatch()
	latest := map[string]string{} // job id → newest report doc id in this batch
	for _, d := range docs {
		if d.SourceType == SourceReport && d.JobID != "" {
			latest[d.JobID] = d.DocID
		}
	}
	for _, d := range docs {
		if d.SourceType == SourceReport && latest[d.JobID] != d.DocID {
			d.Superseded = true
		}
		if err := b.Index(d.DocID, d); err != nil {
			return err
		}
	}
	for job, newest := range latest {
		old, err := x.reportsOf(job)
		if err != nil {
			return err
		}
		for _, d := range old {
			if d.DocID != newest && !d.Superseded && !inBatch(docs, d.DocID) {
				d.Superseded = true
				if err := b.Index(d.DocID, d); err != nil {
					return err
				}
			}
		}
	}
	if checkpoint != "" {
		b.SetInternal(checkpointKey, []byte(checkpoint))
	}
	return x.idx.Batch(b)
}

// SetCheckpoint records checkpoint alone, for documents applied without it.
func (x *Index) SetCheckpoint(checkpoint string) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.idx.SetInternal(checkpointKey, []byte(checkpoint))
}

func inBatch(docs []Doc, id string) bool {
	for _, d := range docs {
		if d.DocID == id {
			return true
		}
	}
	return false
}

// reportsOf returns the indexed reports of a job.
func (x *Index) reportsOf(jobID string) ([]Doc, error) {
	q := bleve.NewConjunctionQuery(termQ("job_id", jobID), termQ("source_type", SourceReport))
	req := bleve.NewSearchRequestOptions(q, 100, 0, false)
	req.Fields = []string{"*"}
	res, err := x.idx.Search(req)
	if err != nil {
		return nil, err
	}
	out := make([]Doc, 0, len(res.Hits))
	for _, h := range res.Hits {
		out = append(out, docFromFields(h.ID, h.Fields))
	}
	return out, nil
}

func termQ(field, v string) query.Query {
	q := bleve.NewTermQuery(v)
	q.SetField(field)
	return q
}

func docFromFields(id string, f map[string]any) Doc {
	s := func(k string) string { v, _ := f[k].(string); return v }
	d := Doc{DocID: id, JobID: s("job_id"), Agent: s("agent"), Session: s("session"), SourceType: s("source_type"),
		Heading: s("heading"), Body: s("body")}
	if n, ok := f["trust_tier"].(float64); ok {
		d.TrustTier = int(n)
	}
	if b, ok := f["superseded"].(bool); ok {
		d.Superseded = b
	}
	if t, err := time.Parse(time.RFC3339, s("created_at")); err == nil {
		d.CreatedAt = t
	}
	return d
}

// RecallRequest is a search of one agent's documents.
type RecallRequest struct {
	Agent             string
	Session           string
	SourceType        string
	Query             string
	Limit             int
	IncludeSuperseded bool
}

// Hit is one recall result.
type Hit struct {
	DocID      string    `json:"doc_id"`
	JobID      string    `json:"job_id"`
	Session    string    `json:"session"`
	SourceType string    `json:"source_type"`
	Heading    string    `json:"heading"`
	Snippet    string    `json:"snippet"`
	Score      float64   `json:"score"`
	TrustTier  int       `json:"trust_tier"`
	CreatedAt  time.Time `json:"created_at"`
	Superseded bool      `json:"superseded,omitempty"`
}

// RecallResult is a page of hits and how many matched in all.
type RecallResult struct {
	Total uint64 `json:"total"`
	Hits  []Hit  `json:"hits"`
}

// Recall limits.
const (
	RecallLimitDefault = 10
	RecallLimitMax     = 100
	snippetChars       = 300
)

// Recall searches the agent's own documents: the agent filter is part of
// every query, and the user's words are only ever matched as text.
func (x *Index) Recall(ctx context.Context, r RecallRequest) (*RecallResult, error) {
	if r.Limit == 0 {
		r.Limit = RecallLimitDefault
	}
	if r.Limit < 1 || r.Limit > RecallLimitMax {
		return nil, bgjobs.FieldError("limit", "between 1 and %d", RecallLimitMax)
	}
	switch r.SourceType {
	case "", SourceReport, SourceIngest, SourceNote:
	default:
		// A misspelt filter would otherwise find nothing, silently.
		return nil, bgjobs.FieldError("source_type", "want %s, %s or %s, got %q", SourceReport, SourceIngest, SourceNote, bgjobs.CutRunes(r.SourceType, 64))
	}
	terms, err := parseQuery(r.Query)
	if err != nil {
		return nil, err
	}
	// Who may see what filters without scoring; only the words rank.
	filters := []query.Query{termQ("agent", r.Agent)}
	if r.Session != "" {
		filters = append(filters, termQ("session", r.Session))
	}
	if r.SourceType != "" {
		filters = append(filters, termQ("source_type", r.SourceType))
	}
	if !r.IncludeSuperseded {
		nb := bleve.NewBoolFieldQuery(false)
		nb.SetField("superseded")
		filters = append(filters, nb)
	}
	var must []query.Query
	for _, t := range terms {
		var inHeading, inBody query.FieldableQuery
		if t.phrase {
			inHeading, inBody = bleve.NewMatchPhraseQuery(t.text), bleve.NewMatchPhraseQuery(t.text)
		} else {
			inHeading, inBody = bleve.NewMatchQuery(t.text), bleve.NewMatchQuery(t.text)
		}
		inHeading.SetField("heading")
		inBody.SetField("body")
		must = append(must, bleve.NewDisjunctionQuery(inHeading, inBody))
	}
	q := bleve.NewBooleanQuery()
	q.AddMust(must...)
	q.AddFilter(bleve.NewConjunctionQuery(filters...))
	// Rank first, without highlighting: bleve would otherwise gather term
	// positions for every matching document, not only the few returned.
	req := bleve.NewSearchRequestOptions(q, r.Limit, 0, false)
	req.Fields = []string{"*"}
	x.mu.RLock()
	defer x.mu.RUnlock()
	res, err := x.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("recall: %w", err)
	}
	frags, err := x.highlight(ctx, must, res.Hits)
	if err != nil {
		return nil, err
	}
	out := &RecallResult{Total: res.Total, Hits: make([]Hit, 0, len(res.Hits))}
	for _, h := range res.Hits {
		d := docFromFields(h.ID, h.Fields)
		snippet := strings.Join(frags[h.ID], " … ")
		if snippet == "" {
			snippet = html.EscapeString(bgjobs.Excerpt(d.Body, snippetChars))
		}
		out.Hits = append(out.Hits, Hit{DocID: d.DocID, JobID: d.JobID, Session: d.Session, SourceType: d.SourceType,
			Heading: d.Heading, Snippet: snippet, Score: h.Score, TrustTier: d.TrustTier, CreatedAt: d.CreatedAt,
			Superseded: d.Superseded})
	}
	return out, nil
}

// highlight marks the words in the bodies of the hits returned, with a
// second query restricted to their ids.
func (x *Index) highlight(ctx context.Context, words []query.Query, hits search.DocumentMatchCollection) (map[string][]string, error) {
	if len(hits) == 0 {
		return nil, nil
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	req := bleve.NewSearchRequestOptions(bleve.NewConjunctionQuery(append([]query.Query{bleve.NewDocIDQuery(ids)}, words...)...), len(ids), 0, false)
	req.Highlight = bleve.NewHighlightWithStyle("html")
	req.Highlight.AddField("body")
	res, err := x.idx.SearchInContext(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("recall highlight: %w", err)
	}
	frags := make(map[string][]string, len(res.Hits))
	for _, h := range res.Hits {
		frags[h.ID] = h.Fragments["body"]
	}
	return frags, nil
}

// Count returns how many documents the index holds.
func (x *Index) Count() (uint64, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.idx.DocCount()
}

// Settling reports that bleve is still merging or persisting what was
// indexed: searches meanwhile share the machine with that work and read
// more segments.
func (x *Index) Settling() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	stats, _ := x.idx.StatsMap()["index"].(map[string]any)
	busy, _ := stats["index_bgthreads_active"].(bool)
	return busy
}

// SearchRaw runs a bleve request on the index as it is, for the bench to
// measure bleve itself beside Recall.
func (x *Index) SearchRaw(ctx context.Context, req *bleve.SearchRequest) (*bleve.SearchResult, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.idx.SearchInContext(ctx, req)
}
