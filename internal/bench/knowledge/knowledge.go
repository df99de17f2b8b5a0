// Package knowledge is the bench's knowledge phase: POST /v1/knowledge
// beside bleve itself indexing the same texts, and the index with its
// writer as serve runs them (StartMemory), which the idle phase uses too.
package knowledge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/bench/loadgen"
	"github.com/bgjobs/bgjobs/internal/bench/recall"
	"github.com/bgjobs/bgjobs/internal/bench/stats"
	"github.com/bgjobs/bgjobs/internal/redisns"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
)

// knowledgeDocs is how many ~2 KB texts the knowledge phase indexes.
const knowledgeDocs = 5000

// textsPerRequest is how many texts a request of the bulk line carries
// (POST /v1/knowledge's documents).
const textsPerRequest = 20

// Memory is an index with its writer, as the API uses them, and what the
// writer has applied: batches, and documents in them.
type Memory struct {
	*search.Index
	*search.Writer
	batches, docs *atomic.Int64
}

// StartMemory opens an index in a temporary directory with its writer
// tailing m's reports stream, as serve does; stop closes and removes it.
func StartMemory(ctx context.Context, rdb redis.UniversalClient, m *tasks.Manager) (mem Memory, stop func(), err error) {
	dir, err := os.MkdirTemp("", "bgjobs-bench-index")
	if err != nil {
		return Memory{}, nil, err
	}
	x, _, err := search.Open(dir, quiet)
	if err != nil {
		_ = os.RemoveAll(dir)
		return Memory{}, nil, err
	}
	batches, applied := &atomic.Int64{}, &atomic.Int64{}
	onIndexed := func(ctx context.Context, docs []search.Doc) {
		batches.Add(1)
		applied.Add(int64(len(docs)))
		m.MarkIndexed(ctx, docs)
	}
	w := &search.Writer{RDB: rdb, Stream: m.ReportsStream(), AliveKey: m.IndexerAliveKey(), Index: x, OnIndexed: onIndexed, Log: quiet}
	if err := w.Start(ctx); err != nil {
		_ = x.Close()
		_ = os.RemoveAll(dir)
		return Memory{}, nil, err
	}
	return Memory{x, w, batches, applied}, func() {
		w.Stop()
		_ = x.Close()
		_ = os.RemoveAll(dir)
	}, nil
}

// Run measures POST /v1/knowledge (each answer waits until its text is
// searchable) from clients clients and from four times as many, one text a
// request, and from clients clients sending textsPerRequest each,
// beside bleve itself indexing the same texts with bgjobs' mapping in
// batches of 1,000, and the reports stream read by the search writer;
// rounds alternate them, after a run of bleve that is not counted (the
// first in a process is the slowest), medians reported.
func Run(ctx context.Context, rdb redis.UniversalClient, clients, rounds int, out io.Writer) error {
	return run(ctx, rdb, clients, rounds, knowledgeDocs, out)
}

// run is Run over n texts.
func run(ctx context.Context, rdb redis.UniversalClient, clients, rounds, n int, out io.Writer) error {
	r := rand.New(rand.NewPCG(3, 4))
	filler := recall.Filler()
	docs := make([]search.Doc, n)
	for i := range docs {
		docs[i] = recall.Doc(r, i, filler)
	}
	// Each answer waits for its text's batch, so with clients the rate is
	// bound by that wait; four times as many show what the index takes
	// when enough texts arrive at once.
	many := 4 * clients
	// The first round's bleve ran cold and set that round's ratios apart
	// from the rest (0.52–0.99 from 32 clients in one run).
	if _, err := rawIndexing(ctx, rdb, docs); err != nil {
		return err
	}
	var raw, stream, api, busy, bulk line
	for range rounds {
		for _, m := range []struct {
			l   *line
			run func() (result, error)
		}{
			{&raw, func() (result, error) { return rawIndexing(ctx, rdb, docs) }},
			{&api, func() (result, error) { return knowledgeOverHTTP(ctx, rdb, clients, docs, 1) }},
			{&busy, func() (result, error) { return knowledgeOverHTTP(ctx, rdb, many, docs, 1) }},
			{&bulk, func() (result, error) { return knowledgeOverHTTP(ctx, rdb, clients, docs, textsPerRequest) }},
			{&stream, func() (result, error) { return streamIndexing(ctx, rdb, docs) }},
		} {
			res, err := m.run()
			if err != nil {
				return err
			}
			m.l.rates, m.l.perBatch = append(m.l.rates, res.rate), append(m.l.perBatch, res.perBatch)
			m.l.costs = append(m.l.costs, res.cost)
		}
	}
	med := stats.Median[float64]
	fmt.Fprintf(out, "\nknowledge indexing, %d texts of ~2 KB, median of %d rounds\n", len(docs), rounds)
	fmt.Fprintf(out, "  %-53s %6.0f docs/s\n", "bleve, batches of 1,000, bgjobs' mapping", med(raw.rates))
	fmt.Fprintf(out, "  %-53s %6.0f docs/s   ratio %.2f (%s)\n", "reports stream → search writer (a burst of reports)", med(stream.rates), med(stream.rates)/med(raw.rates),
		stats.Notes("goal ≥ 0.80", stats.Spread(stream.rates, raw.rates)))
	for _, l := range []struct {
		label string
		line
	}{
		{fmt.Sprintf("POST /v1/knowledge, %d clients, searchable on 201", clients), api},
		{fmt.Sprintf("POST /v1/knowledge, %d clients, searchable on 201", many), busy},
		{fmt.Sprintf("the same, %d clients, %d texts a request", clients, textsPerRequest), bulk},
	} {
		fmt.Fprintf(out, "  %-53s %6.0f docs/s   ratio %.2f (%s), %.0f docs a batch\n",
			l.label, med(l.rates), med(l.rates)/med(raw.rates), stats.Notes("goal ≥ 0.80", "baseline 354–402 docs/s", stats.Spread(l.rates, raw.rates)),
			med(l.perBatch))
	}
	// CPU per text is steadier than the rates on a shared machine: bleve's
	// own rate swung a fifth between runs minutes apart.
	fmt.Fprintln(out, "  per text (median of rounds; this process includes the load generator and the index):")
	for _, l := range []struct {
		label string
		line
	}{
		{"bleve, batches of 1,000", raw},
		{"reports stream → search writer", stream},
		{fmt.Sprintf("POST, %d clients", clients), api},
		{fmt.Sprintf("POST, %d clients", many), busy},
		{fmt.Sprintf("POST, %d clients, %d texts each", clients, textsPerRequest), bulk},
	} {
		stats.MedianCost(l.costs).Print(out, l.label)
	}
	return nil
}

// result is one run of a line: its rate, documents a batch (0 where the
// phase has no batches of its own to count), and cost per text, all taken
// over the timed part alone (not the index's opening and closing, nor the
// request bodies' encoding).
type result struct {
	rate, perBatch float64
	cost           stats.Cost
}

// clock starts timing a run of len(docs) texts; calling what it returns
// ends it.
func clock(ctx context.Context, rdb redis.UniversalClient, docs []search.Doc) func(perBatch float64) result {
	stop := stats.Clock(ctx, rdb)
	return func(perBatch float64) result {
		s := stop(len(docs))
		return result{rate: float64(len(docs)) / s.Took.Seconds(), perBatch: perBatch, cost: s.Cost}
	}
}

// line is one knowledge line's rounds: its rates, documents a batch (0
// where the phase has no batches of its own to count) and costs per text.
type line struct {
	rates, perBatch []float64
	costs           []stats.Cost
}

func rawIndexing(ctx context.Context, rdb redis.UniversalClient, docs []search.Doc) (result, error) {
	dir, err := os.MkdirTemp("", "bgjobs-bench-index")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	x, _, err := search.Open(dir, quiet)
	if err != nil {
		return result{}, err
	}
	defer x.Close()
	timing := clock(ctx, rdb, docs)
	for i := 0; i < len(docs); i += 1000 {
		if err := x.Apply(docs[i:min(i+1000, len(docs))], fmt.Sprintf("%d-0", i+1)); err != nil {
			return result{}, err
		}
	}
	return timing(0), nil
}

// streamIndexing appends docs to the reports stream at once, as a burst of
// settles would, and times the search writer until the last is searchable.
func streamIndexing(ctx context.Context, rdb redis.UniversalClient, docs []search.Doc) (result, error) {
	ns := redisns.Fresh("bench")
	defer redisns.DropNamespace(context.Background(), rdb, ns)
	m := tasks.NewManager(rdb, bgjobs.Config{Namespace: ns}.WithDefaults(), tasks.Deps{Logger: quiet})
	defer m.Close()
	mem, stopMemory, err := StartMemory(ctx, rdb, m)
	if err != nil {
		return result{}, err
	}
	defer stopMemory()
	timing := clock(ctx, rdb, docs)
	last := ""
	for i := 0; i < len(docs); i += 500 {
		if last, err = m.AppendDocs(ctx, docs[i:min(i+500, len(docs))]); err != nil {
			return result{}, err
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := mem.WaitFor(waitCtx, last); err != nil {
		return result{}, err
	}
	return timing(0), nil
}

// knowledgeOverHTTP posts docs, perRequest texts a request; its result
// counts the documents per batch the search writer applied.
func knowledgeOverHTTP(ctx context.Context, rdb redis.UniversalClient, clients int, docs []search.Doc, perRequest int) (result, error) {
	ns := redisns.Fresh("bench")
	defer redisns.DropNamespace(context.Background(), rdb, ns)
	cfg := bgjobs.Config{Namespace: ns}.WithDefaults()
	m := tasks.NewManager(rdb, cfg, tasks.Deps{Logger: quiet})
	defer m.Close()
	mem, stopMemory, err := StartMemory(ctx, rdb, m)
	if err != nil {
		return result{}, err
	}
	defer stopMemory()
	api, stop, err := loadgen.Serve(handlers.NewServer(cfg, handlers.Deps{Manager: m, Memory: mem, Log: quiet}))
	if err != nil {
		return result{}, err
	}
	defer stop()
	pc, err := loadgen.New(api, clients+1)
	if err != nil {
		return result{}, err
	}
	defer pc.Close()
	// The bodies are encoded before the clock starts: an agent's client
	// does that work on its own machine, not on bgjobs' cores.
	requests := (len(docs) + perRequest - 1) / perRequest
	bodies := make([][]byte, requests)
	for i := range bodies {
		texts := []map[string]string{}
		for _, d := range docs[i*perRequest : min((i+1)*perRequest, len(docs))] {
			texts = append(texts, map[string]string{"title": d.Heading, "text": d.Body})
		}
		if perRequest == 1 {
			bodies[i], _ = json.Marshal(map[string]string{"session": "chat-bench", "title": texts[0]["title"], "text": texts[0]["text"]})
		} else {
			bodies[i], _ = json.Marshal(map[string]any{"session": "chat-bench", "documents": texts})
		}
	}
	timing := clock(ctx, rdb, docs)
	err = loadgen.FanOut(requests, clients, func(i int) error {
		status, b, err := pc.Post("/v1/knowledge", bodies[i])
		if err != nil {
			return err
		}
		var res struct {
			DocIDs []string `json:"doc_ids"`
		}
		if status != http.StatusCreated || json.Unmarshal(b, &res) != nil || perRequest > 1 && len(res.DocIDs) != min(perRequest, len(docs)-i*perRequest) {
			return fmt.Errorf("knowledge: %d %s", status, b)
		}
		return nil
	})
	if err != nil {
		return result{}, err
	}
	timed := timing(float64(mem.docs.Load()) / float64(max(1, mem.batches.Load())))
	res, err := mem.Recall(ctx, search.RecallRequest{Agent: handlers.OpenAgent, Query: "harbour"})
	if err != nil {
		return result{}, err
	}
	if res.Total == 0 {
		return result{}, fmt.Errorf("knowledge: nothing searchable after %d posts", len(docs))
	}
	return timed, nil
}

var quiet = slog.New(slog.DiscardHandler)
