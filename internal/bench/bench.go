// Package bench measures bgjobs end to end beside raw asynq, in one run, on
// the same Redis, with the same worker concurrency: the figures the issues
// ask for, printed side by side.
package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/app"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/bench/knowledge"
	"github.com/bgjobs/bgjobs/internal/bench/loadgen"
	"github.com/bgjobs/bgjobs/internal/bench/recall"
	"github.com/bgjobs/bgjobs/internal/bench/stats"
	"github.com/bgjobs/bgjobs/internal/redisconn"
	"github.com/bgjobs/bgjobs/internal/redisns"
	"github.com/bgjobs/bgjobs/tasks"
)

// Options of a run.
type Options struct {
	// RedisURL is the server to measure on; "" tries the local Redis
	// (database 14) and falls back to an embedded miniredis.
	RedisURL string
	// Jobs per phase.
	Jobs int
	// Concurrency is the worker concurrency of both phases.
	Concurrency int
	// Clients is how many HTTP clients spawn at once.
	Clients int
	// Poll is the idle worker poll interval of both phases.
	Poll time.Duration
	// Rounds is how many times each phase runs; medians are reported.
	Rounds int
	// Samples is how many resumes the latency phase times per target.
	Samples int
	// FetchLoops caps bgjobs' work fetch loops (Config.MaxFetchLoops); 0
	// is the default. The split baseline gets the same split.
	FetchLoops int
	// RecallDocs is the corpus of the recall phase; 0 skips it.
	RecallDocs int
	// log is what bgjobs logs to in the end-to-end phases; nil logs
	// nothing.
	log *slog.Logger
	// Only names the phases to run (see Phases); empty runs them all.
	// A ratio is printed only when both of its phases ran.
	Only []string
}

// Phases are the names Options.Only takes, in the order a run takes them:
// the seven throughput phases, then the sections after them.
var Phases = []string{"asynq", "e2e", "split", "oneloop", "logged", "spawn", "workers", "cluster", "joins", "resume", "idle", "parked", "sweep", "knowledge", "recall"}

// runs reports whether the phase named is part of this run.
func (o Options) runs(name string) bool {
	return len(o.Only) == 0 || slices.Contains(o.Only, name)
}

// checkOnly refuses a name Phases does not list, rather than measuring
// nothing for a typo.
func (o Options) checkOnly() error {
	for _, name := range o.Only {
		if !slices.Contains(Phases, name) {
			return fmt.Errorf("unknown phase %q: the phases are %s", name, strings.Join(Phases, ", "))
		}
	}
	return nil
}

// drainEvery is how often the end-to-end phase's consumer drains.
const drainEvery = 10 * time.Millisecond

// LocalRedisDefault is where `make bench` measures unless told otherwise.
const LocalRedisDefault = "redis://127.0.0.1:6379/14"

// Run measures and prints the table to out.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if err := o.checkOnly(); err != nil {
		return err
	}
	rdb, where, closeRedis, err := connect(ctx, o.RedisURL)
	if err != nil {
		return err
	}
	defer closeRedis()
	o.Rounds = max(o.Rounds, 1)
	split := tasks.FetchSplit(o.Concurrency, cmp.Or(o.FetchLoops, bgjobs.MaxFetchLoopsDefault))
	fmt.Fprintf(out, "bgjobs bench: %d no-op jobs per phase, worker concurrency %d, %d HTTP clients, poll %s, median of %d rounds, redis %s\n",
		o.Jobs, o.Concurrency, o.Clients, o.Poll, o.Rounds, where)

	type phase struct {
		name  string
		label string
		// short names the phase in the per-job costs.
		short string
		run   func() (stats.Sample, error)
		// prepare makes a run, its setup left out of time and cost.
		prepare func() (run func() (stats.Sample, error), done func(), err error)
		took    []time.Duration
		costs   []stats.Cost
	}
	phases := []phase{
		{name: "asynq", short: "raw asynq", label: "raw asynq   (enqueue → no-op handler)",
			run: func() (stats.Sample, error) { return rawAsynq(ctx, rdb, o, []int{o.Concurrency}) }},
		{name: "e2e", short: "bgjobs", label: "bgjobs      (HTTP spawn → worker → settle → drain/10ms)",
			run: func() (stats.Sample, error) { return endToEnd(ctx, rdb, o, 1) }},
		{name: "split", short: "raw asynq split like bgjobs", label: fmt.Sprintf("raw asynq   split like bgjobs (%d servers)", len(split)),
			run: func() (stats.Sample, error) { return rawAsynq(ctx, rdb, o, split) }},
		{name: "oneloop", short: "bgjobs one fetch loop", label: "bgjobs      the same on one work fetch loop",
			run: func() (stats.Sample, error) { o := o; o.FetchLoops = 1; return endToEnd(ctx, rdb, o, 1) }},
		{name: "logged", short: "bgjobs logging at info", label: "bgjobs      the same, logging at info to a file",
			run: func() (stats.Sample, error) { return logged(ctx, rdb, o) }},
		{name: "spawn", short: "bgjobs HTTP spawn alone", label: "bgjobs      HTTP spawn alone (no worker)",
			run: func() (stats.Sample, error) { return spawnOnly(ctx, rdb, o, 1) }},
		{name: "workers", short: "bgjobs workers alone", label: "bgjobs      workers alone (queued → settle → drain/10ms)",
			prepare: func() (func() (stats.Sample, error), func(), error) { return queuedJobs(ctx, rdb, o) }},
	}
	phases = slices.DeleteFunc(phases, func(p phase) bool { return !o.runs(p.name) })
	// Rounds alternate the phases, so a slow spell of a shared machine
	// lands on all of them; the median of each is reported.
	for range o.Rounds {
		for i := range phases {
			run, done := phases[i].run, func() {}
			if phases[i].prepare != nil {
				var err error
				if run, done, err = phases[i].prepare(); err != nil {
					return fmt.Errorf("%s: %w", phases[i].label, err)
				}
			}
			// Each run times and meters its own timed part: not its setup,
			// nor the namespace's deletion after it.
			sample, err := run()
			done()
			if err != nil {
				return fmt.Errorf("%s: %w", phases[i].label, err)
			}
			phases[i].took = append(phases[i].took, sample.Took)
			phases[i].costs = append(phases[i].costs, sample.Cost)
		}
	}
	rate := map[string]float64{}
	rounds := map[string][]float64{}
	for _, p := range phases {
		med := stats.Median(p.took)
		rate[p.name] = float64(o.Jobs) / med.Seconds()
		rounds[p.name] = stats.Rates(o.Jobs, p.took)
		fmt.Fprintf(out, "%-58s %9.0f jobs/s  (%.2fs)\n", p.label, rate[p.name], med.Seconds())
	}
	// ratio prints a line of two phases' rates when both ran, and how far
	// single rounds strayed.
	ratio := func(label, goal, a, b string) {
		if ra, rb := rate[a], rate[b]; ra > 0 && rb > 0 {
			fmt.Fprintf(out, "%s: %.2f (%s)\n", label, ra/rb, stats.Notes(goal, stats.Spread(rounds[a], rounds[b])))
		}
	}
	ratio("ratio bgjobs/asynq", "goal ≥ 0.70; baseline 0.37", "e2e", "asynq")
	// asynq fetches one task per round trip from one loop per server;
	// bgjobs runs its work slots on several servers to lift that cap. The
	// same split given to raw asynq shows what is left of the gap.
	ratio("ratio bgjobs/asynq split like bgjobs", "goal ≥ 0.50; baseline 0.32", "e2e", "split")
	// The split is a setting (BGJOBS_MAX_FETCH_LOOPS) that stays only while
	// it pays: bgjobs on its loops against bgjobs on one.
	ratio(fmt.Sprintf("what the split gives bgjobs, %d loops / one", len(split)), "the split stays while this is above 1", "e2e", "oneloop")
	// The phases above log nothing; serve logs a line per request and job
	// event unless BGJOBS_LOG_LEVEL says otherwise.
	ratio("what logging at info leaves of end to end", "BGJOBS_LOG_LEVEL=warn keeps the rest", "logged", "e2e")
	// End to end runs both halves at once on the same cores: bound by
	// CPU alone, its rate would be the halves one after the other.
	if rate["spawn"] > 0 && rate["workers"] > 0 && rate["e2e"] > 0 && rate["asynq"] > 0 {
		fmt.Fprintf(out, "bgjobs's halves one after the other: %.0f jobs/s (end to end ran at %.0f); raw asynq's enqueue and run together: %.0f\n",
			1/(1/rate["spawn"]+1/rate["workers"]), rate["e2e"], rate["asynq"])
	}
	// What each spent per job, load included (bgjobs' HTTP clients, asynq's
	// enqueuers): steadier than the rates on a shared machine.
	if len(phases) > 0 {
		fmt.Fprintln(out, "per job (median of rounds; this process includes the load generator; Redis commands include those inside scripts):")
	}
	for _, p := range phases {
		stats.MedianCost(p.costs).Print(out, p.short)
	}
	// The GC target trades memory for CPU (cmd/bgjobs sets bgjobs' own).
	fmt.Fprintf(out, "this process's peak resident memory so far: %.0f MiB, at Go GC target %d %%\n", float64(stats.PeakRSS())/(1<<20), stats.GCPercent())
	bullURL := redisURLOf(rdb)
	if strings.HasPrefix(where, "embedded") {
		bullURL = "" // BullMQ's scripts need a real Redis
	}
	// The sections after the throughput table; --samples 0 skips the
	// latency phase and everything after it.
	for _, section := range []struct {
		name         string
		needsSamples bool
		run          func() error
	}{
		{"cluster", false, func() error { return Cluster(ctx, o, out) }},
		{"joins", false, func() error { return Joins(ctx, o, rdb, bullURL, out) }},
		{"resume", true, func() error { return Resume(ctx, o, out) }},
		{"idle", true, func() error { return Idle(ctx, o, out) }},
		{"parked", true, func() error { return Parked(ctx, o, out) }},
		{"sweep", true, func() error { return Sweep(ctx, o, out) }},
		{"knowledge", true, func() error { return knowledge.Run(ctx, rdb, o.Clients, o.Rounds, out) }},
		{"recall", true, func() error {
			if o.RecallDocs == 0 {
				return nil
			}
			return recall.Run(ctx, o.RecallDocs, 200, out)
		}},
	} {
		if !o.runs(section.name) || section.needsSamples && o.Samples == 0 {
			continue
		}
		if err := section.run(); err != nil {
			return err
		}
	}
	return nil
}

func connect(ctx context.Context, url string) (redis.UniversalClient, string, func(), error) {
	try := url
	if try == "" {
		try = LocalRedisDefault
	}
	rdb, err := redisconn.Open(try)
	if err != nil {
		return nil, "", nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rdb.Ping(pingCtx).Err(); err == nil {
		return rdb, try, func() { _ = rdb.Close() }, nil
	} else if url != "" {
		_ = rdb.Close()
		return nil, "", nil, fmt.Errorf("%s does not answer: %w", url, err)
	}
	_ = rdb.Close()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", nil, err
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), Protocol: 2})
	return rdb, "embedded miniredis (local Redis did not answer)", func() { _ = rdb.Close(); m.Close() }, nil
}

func namespace() string { return redisns.Fresh("bench") }

var quiet = slog.New(slog.DiscardHandler)

type quietAsynqLogger struct{}

func (quietAsynqLogger) Debug(...any) {}
func (quietAsynqLogger) Info(...any)  {}
func (quietAsynqLogger) Warn(...any)  {}
func (quietAsynqLogger) Error(...any) {}
func (quietAsynqLogger) Fatal(...any) {}

// rawAsynq is the baseline: asynq alone, enqueue to a no-op handler, on one
// server per entry of split with that many workers.
func rawAsynq(ctx context.Context, rdb redis.UniversalClient, o Options, split []int) (stats.Sample, error) {
	ns := namespace()
	defer redisns.DropNamespace(context.Background(), rdb, ns)
	queue := ns + ":raw"
	var handled atomic.Int64
	done := make(chan struct{})
	handler := asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(o.Jobs) {
			close(done)
		}
		return nil
	})
	for _, n := range split {
		srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency: n, Queues: map[string]int{queue: 1}, TaskCheckInterval: o.Poll,
			Logger: quietAsynqLogger{}, LogLevel: asynq.ErrorLevel,
		})
		if err := srv.Start(handler); err != nil {
			return stats.Sample{}, err
		}
		defer srv.Shutdown()
	}
	client := asynq.NewClientFromRedisClient(rdb)
	defer client.Close()

	clock := stats.Clock(ctx, rdb)
	if err := loadgen.FanOut(o.Jobs, o.Clients, func(int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("noop", nil, asynq.Queue(queue)))
		return err
	}); err != nil {
		return stats.Sample{}, err
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return stats.Sample{}, errors.New("timed out")
	}
	return clock(o.Jobs), nil
}

// rig is a Manager (with its workers when asked) behind the HTTP API on a
// loopback port, in a namespace of its own.
type rig struct {
	m     *tasks.Manager
	post  func(path string, b []byte) ([]byte, error)
	close func()
}

func startRig(ctx context.Context, rdb redis.UniversalClient, o Options, workers bool) (*rig, error) {
	ns := namespace()
	cfg := bgjobs.Config{Namespace: ns, WorkConcurrency: o.Concurrency, MaxFetchLoops: o.FetchLoops, PollInterval: o.Poll, Addr: "127.0.0.1:0"}.WithDefaults()
	log := cmp.Or(o.log, quiet)
	m := tasks.NewManager(rdb, cfg, tasks.Deps{Logger: log})
	closers := []func(){func() { redisns.DropNamespace(context.Background(), rdb, ns) }, func() { _ = m.Close() }}
	done := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	if workers {
		w := m.NewWorker()
		if err := w.Start(ctx); err != nil {
			done()
			return nil, err
		}
		closers = append(closers, w.Shutdown)
	}
	base, stopAPI, err := loadgen.Serve(handlers.NewServer(cfg, handlers.Deps{Manager: m, Log: log}))
	if err != nil {
		done()
		return nil, err
	}
	closers = append(closers, stopAPI)
	pc, err := loadgen.New(base, o.Clients+1)
	if err != nil {
		done()
		return nil, err
	}
	closers = append(closers, pc.Close)
	post := func(path string, b []byte) ([]byte, error) {
		status, raw, err := pc.Post(path, b)
		if err == nil && status >= 300 {
			err = fmt.Errorf("%s: %d %s", path, status, raw)
		}
		return raw, err
	}
	return &rig{m: m, post: post, close: done}, nil
}

// spawnBody is a no-op echo job of session i of sessions.
func spawnBody(i, sessions int) []byte {
	return fmt.Appendf(nil, `{"origin_session":"bench-%d","kind":"work","description":"noop","work":{"type":"echo","args":{"text":"ok"}}}`, i%sessions)
}

// spawnOnly is the HTTP spawn alone: no worker runs.
func spawnOnly(ctx context.Context, rdb redis.UniversalClient, o Options, sessions int) (stats.Sample, error) {
	r, sample, err := spawned(ctx, rdb, o, sessions)
	if err == nil {
		r.close()
	}
	return sample, err
}

// spawned is a rig with no worker and o.Jobs spawned over HTTP, timed.
func spawned(ctx context.Context, rdb redis.UniversalClient, o Options, sessions int) (*rig, stats.Sample, error) {
	r, err := startRig(ctx, rdb, o, false)
	if err != nil {
		return nil, stats.Sample{}, err
	}
	clock := stats.Clock(ctx, rdb)
	if err := loadgen.FanOut(o.Jobs, o.Clients, func(i int) error {
		_, err := r.post("/v1/jobs", spawnBody(i, sessions))
		return err
	}); err != nil {
		r.close()
		return nil, stats.Sample{}, err
	}
	return r, clock(o.Jobs), nil
}

// logged is endToEnd with bgjobs logging as serve does by default: JSON
// lines at info, to a file.
func logged(ctx context.Context, rdb redis.UniversalClient, o Options) (stats.Sample, error) {
	f, err := os.CreateTemp("", "bgjobs-bench-log")
	if err != nil {
		return stats.Sample{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	o.log = app.NewLogger(f, slog.LevelInfo)
	return endToEnd(ctx, rdb, o, 1)
}

// endToEnd is bgjobs through its HTTP API: spawn, run, settle, drain, with
// the jobs spread over sessions.
func endToEnd(ctx context.Context, rdb redis.UniversalClient, o Options, sessions int) (stats.Sample, error) {
	r, err := startRig(ctx, rdb, o, true)
	if err != nil {
		return stats.Sample{}, err
	}
	defer r.close()

	clock := stats.Clock(ctx, rdb)
	drained := make(chan error, 1)
	go func() { drained <- r.drainAll(o.Jobs, sessions) }()
	if err := loadgen.FanOut(o.Jobs, o.Clients, func(i int) error {
		_, err := r.post("/v1/jobs", spawnBody(i, sessions))
		return err
	}); err != nil {
		return stats.Sample{}, err
	}
	if err := <-drained; err != nil {
		return stats.Sample{}, err
	}
	return clock(o.Jobs), nil
}

// drainAll drains the sessions over HTTP every drainEvery (an agent drains
// at its turn boundaries, not in a hot loop) until jobs notifications came.
func (r *rig) drainAll(jobs, sessions int) error {
	for drained, deadline := 0, time.Now().Add(5*time.Minute); drained < jobs; {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out with %d of %d drained", drained, jobs)
		}
		for s := range sessions {
			raw, err := r.post(fmt.Sprintf("/v1/sessions/bench-%d/drain", s), nil)
			if err != nil {
				return err
			}
			var res struct {
				Notifications []json.RawMessage `json:"notifications"`
			}
			if err := json.Unmarshal(raw, &res); err != nil {
				return err
			}
			drained += len(res.Notifications)
		}
		if drained < jobs { // not after the last: the phase is timed to it
			time.Sleep(drainEvery)
		}
	}
	return nil
}

// queuedJobs spawns o.Jobs with no worker running; run then starts the
// workers and times them until every job is drained, and done stops it
// all. With spawnOnly it splits end to end into its halves.
func queuedJobs(ctx context.Context, rdb redis.UniversalClient, o Options) (run func() (stats.Sample, error), done func(), err error) {
	r, _, err := spawned(ctx, rdb, o, 1)
	if err != nil {
		return nil, nil, err
	}
	w := r.m.NewWorker()
	return func() (stats.Sample, error) {
		clock := stats.Clock(ctx, rdb)
		if err := w.Start(ctx); err != nil {
			return stats.Sample{}, err
		}
		err := r.drainAll(o.Jobs, 1)
		return clock(o.Jobs), err
	}, func() { w.Shutdown(); r.close() }, nil
}
