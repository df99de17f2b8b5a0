// Package recall is the bench's memory_recall phase at size, and the
// corpus of ~2 KB documents the knowledge phase indexes too.
package recall

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/search/query"

	"github.com/bgjobs/bgjobs/search"
)

// Filler is the vocabulary documents are written in, besides the topics.
func Filler() []string {
	filler := make([]string, 2000)
	for i := range filler {
		filler[i] = fmt.Sprintf("w%dx", i)
	}
	return filler
}

// recallTopics are words each document carries with probability 0.4, so a
// query of two of them matches about 16 % of the corpus (8,000 of 50,000).
var recallTopics = []string{"harbour", "ledger", "turbine", "glacier", "orchard", "quarry", "lantern", "meadow",
	"compass", "beacon", "canyon", "fjord", "granary", "kiln", "lagoon", "mill"}

// Doc is a ~2 KB document: filler prose with some topic words.
func Doc(r *rand.Rand, i int, filler []string) search.Doc {
	var b strings.Builder
	var topics []string
	for _, t := range recallTopics {
		if r.Float64() < 0.4 {
			topics = append(topics, t)
		}
	}
	for b.Len() < 2000 {
		// A topic word recurs through the text, as it would in prose.
		if len(topics) > 0 && r.IntN(10) == 0 {
			b.WriteString(topics[r.IntN(len(topics))])
		} else {
			b.WriteString(filler[r.IntN(len(filler))])
		}
		b.WriteByte(' ')
	}
	return search.Doc{DocID: fmt.Sprintf("kn-%08d", i), Agent: "alpha", Session: "chat-bench", SourceType: search.SourceIngest,
		Heading: fmt.Sprintf("Document %d", i), Body: b.String(), CreatedAt: time.Now().UTC()}
}

// docsFrom is n documents numbered from first.
func docsFrom(r *rand.Rand, first, n int, filler []string) []search.Doc {
	batch := make([]search.Doc, n)
	for j := range batch {
		batch[j] = Doc(r, first+j, filler)
	}
	return batch
}

// Run measures memory_recall at size: docs documents of about 2 KB,
// two-word queries each matching thousands of them; bgjobs' Recall beside
// the same words asked of bleve the way bgjobs asked before (one request
// that ranks and highlights every match, the filters scoring too).
func Run(ctx context.Context, docs, queries int, out io.Writer) error {
	dir, err := os.MkdirTemp("", "bgjobs-bench-recall")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	x, _, err := search.Open(dir, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer x.Close()
	r := rand.New(rand.NewPCG(1, 2))
	filler := Filler()
	start := time.Now()
	for i := 0; i < docs; i += 1000 {
		if err := x.Apply(docsFrom(r, i, min(1000, docs-i), filler), fmt.Sprintf("%d-0", i+1)); err != nil {
			return err
		}
	}
	took := time.Since(start)
	// Recall at size is asked of an index at rest; the busy line below is
	// the one measured while it is written.
	settled := time.Now()
	for x.Settling() && time.Since(settled) < time.Minute {
		time.Sleep(50 * time.Millisecond)
	}
	rest := fmt.Sprintf("merged and on disk %.1fs later", time.Since(settled).Seconds())
	if x.Settling() {
		rest = "still merging a minute later (measured anyway)"
	}
	fmt.Fprintf(out, "recall corpus: %d docs of ~2 KB indexed at %.0f docs/s (batches of 1,000), %s\n", docs, float64(docs)/took.Seconds(), rest)

	words := make([][2]string, queries)
	for i := range words {
		a := r.IntN(len(recallTopics))
		words[i] = [2]string{recallTopics[a], recallTopics[(a+1+r.IntN(len(recallTopics)-1))%len(recallTopics)]}
	}
	var matched uint64
	bgjobsTook, rawTook := make([]time.Duration, 0, queries), make([]time.Duration, 0, queries)
	// Alternate the two, so a slow spell of the machine lands on both.
	for _, w := range words {
		t0 := time.Now()
		res, err := x.Recall(ctx, search.RecallRequest{Agent: "alpha", Query: w[0] + " " + w[1]})
		if err != nil {
			return err
		}
		bgjobsTook = append(bgjobsTook, time.Since(t0))
		matched += res.Total
		t0 = time.Now()
		if _, err := x.SearchRaw(ctx, highlightEveryMatch(w)); err != nil {
			return err
		}
		rawTook = append(rawTook, time.Since(t0))
	}
	p := func(d []time.Duration, q float64) float64 {
		slices.Sort(d)
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	fmt.Fprintf(out, "recall, %d two-word queries matching ~%d docs each:\n", queries, matched/uint64(queries))
	fmt.Fprintf(out, "  bgjobs Recall (rank, then highlight the hits)   p50 %6.1f ms  p99 %6.1f ms  (goal p99 ≤ 25)\n", p(bgjobsTook, .5), p(bgjobsTook, .99))
	fmt.Fprintf(out, "  bleve, one request highlighting every match     p50 %6.1f ms  p99 %6.1f ms  (the way before)\n", p(rawTook, .5), p(rawTook, .99))

	// The same queries while the writer goes on indexing, batches of 200,
	// as a serve does while reports keep coming.
	stop, stopped := make(chan struct{}), make(chan error, 1)
	go func() {
		r := rand.New(rand.NewPCG(3, 4))
		for i := docs; ; i += 200 {
			select {
			case <-stop:
				stopped <- nil
				return
			default:
			}
			if err := x.Apply(docsFrom(r, i, 200, filler), fmt.Sprintf("%d-0", i+1)); err != nil {
				stopped <- err
				return
			}
		}
	}()
	busyTook := make([]time.Duration, 0, queries)
	for _, w := range words {
		t0 := time.Now()
		if _, err := x.Recall(ctx, search.RecallRequest{Agent: "alpha", Query: w[0] + " " + w[1]}); err != nil {
			close(stop)
			<-stopped
			return err
		}
		busyTook = append(busyTook, time.Since(t0))
	}
	close(stop)
	if err := <-stopped; err != nil {
		return err
	}
	fmt.Fprintf(out, "  bgjobs Recall while batches of 200 are indexed  p50 %6.1f ms  p99 %6.1f ms  (when a batch held recall off: p50 96–112, p99 155–190)\n",
		p(busyTook, .5), p(busyTook, .99))
	return nil
}

// highlightEveryMatch is recall as it was: the filter and the words in one
// scoring conjunction, highlighting on.
func highlightEveryMatch(w [2]string) *bleve.SearchRequest {
	agent := bleve.NewTermQuery("alpha")
	agent.SetField("agent")
	must := []query.Query{agent}
	for _, word := range w {
		h, b := bleve.NewMatchQuery(word), bleve.NewMatchQuery(word)
		h.SetField("heading")
		b.SetField("body")
		must = append(must, bleve.NewDisjunctionQuery(h, b))
	}
	req := bleve.NewSearchRequestOptions(bleve.NewConjunctionQuery(must...), 10, 0, false)
	req.Fields = []string{"*"}
	req.Highlight = bleve.NewHighlightWithStyle("html")
	req.Highlight.AddField("body")
	return req
}
