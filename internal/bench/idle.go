package bench

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/bench/knowledge"
	"github.com/bgjobs/bgjobs/internal/bench/loadgen"
	"github.com/bgjobs/bgjobs/internal/bench/stats"
	"github.com/bgjobs/bgjobs/internal/redisns"
	"github.com/bgjobs/bgjobs/tasks"
)

// idleWindow is how long the idle phase watches.
const idleWindow = 15 * time.Second

// Idle measures what an idle serve process costs (its asynq servers,
// maintenance, search writer and API, as serve wires them), with the shipped
// defaults (work concurrency 10, poll 10 ms, fetches held until work
// arrives): Redis commands a second (the server's own count, inner script
// commands included, so nothing else may use that Redis meanwhile) and the
// share of one core this process burns.
func Idle(ctx context.Context, o Options, out io.Writer) error {
	own, err := newOwnManager(ctx, o, bgjobs.Config{}, quietDeps)
	if err != nil {
		return err
	}
	defer own.close()
	rdb, cfg, m := own.rdb, own.cfg, own.m
	fmt.Fprintf(out, "\nidle serve process (workers, search writer, API), shipped defaults, over %s, redis %s\n", idleWindow, own.where)
	w := m.NewWorker()
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Shutdown()
	mem, stopMemory, err := knowledge.StartMemory(ctx, rdb, m)
	if err != nil {
		return err
	}
	defer stopMemory()
	_, stopAPI, err := loadgen.Serve(handlers.NewServer(cfg, handlers.Deps{Manager: m, Memory: mem, Log: quiet}))
	if err != nil {
		return err
	}
	defer stopAPI()
	time.Sleep(time.Second) // past start-up sweeps
	return watch(ctx, rdb, out, "goal ≤ 20; baseline ~685", "   (goal ≤ 1 %; baseline 10–15 %)")
}

// ownManager is a phase's Manager in a namespace of its own on the bench's
// Redis.
type ownManager struct {
	rdb   redis.UniversalClient
	where string
	cfg   bgjobs.Config // with its defaults
	m     *tasks.Manager
	// close stops the Manager, drops the namespace and closes Redis.
	close func()
}

// newOwnManager connects to o's Redis and makes a Manager with cfg in a
// fresh namespace; deps gives its Deps for the completed cfg.
func newOwnManager(ctx context.Context, o Options, cfg bgjobs.Config, deps func(bgjobs.Config) tasks.Deps) (*ownManager, error) {
	rdb, where, closeRedis, err := connect(ctx, o.RedisURL)
	if err != nil {
		return nil, err
	}
	cfg.Namespace = namespace()
	cfg = cfg.WithDefaults()
	m := tasks.NewManager(rdb, cfg, deps(cfg))
	return &ownManager{rdb: rdb, where: where, cfg: cfg, m: m, close: func() {
		_ = m.Close()
		redisns.DropNamespace(context.Background(), rdb, cfg.Namespace)
		closeRedis()
	}}, nil
}

func quietDeps(bgjobs.Config) tasks.Deps { return tasks.Deps{Logger: quiet} }

// watch prints what Redis ran (commands a second, inner script commands
// included, so nothing else may use that Redis meanwhile) and the share of
// one core this process burnt over idleWindow, each with its note.
func watch(ctx context.Context, rdb redis.UniversalClient, out io.Writer, cmdsNote, cpuNote string) error {
	cmds0, err := stats.CommandsProcessed(ctx, rdb)
	if err != nil {
		fmt.Fprintf(out, "  (this Redis does not report its command count: %v)\n", err)
		return nil
	}
	cpu0 := stats.ProcessCPU()
	time.Sleep(idleWindow)
	cmds1, err := stats.CommandsProcessed(ctx, rdb)
	if err != nil {
		return err
	}
	cpu := stats.ProcessCPU() - cpu0
	fmt.Fprintf(out, "  Redis commands %6.0f /s              (%s)\n", float64(cmds1-cmds0)/idleWindow.Seconds(), cmdsNote)
	fmt.Fprintf(out, "  CPU            %6.1f %% of one core%s\n", 100*cpu.Seconds()/idleWindow.Seconds(), cpuNote)
	return nil
}

// parkedJobs and parkedSettle: the parked phase queues that many work jobs
// past one agent's share, lets their waits reach their longest, then
// watches as long as the idle phase.
const (
	parkedJobs   = 2000
	parkedSettle = 35 * time.Second
)

// Parked measures what an agent's jobs waiting past its share of the work
// slots cost while they wait: one agent holds its share (5 of the default
// 10 slots) with jobs that outlast the phase, another agent exists, and
// parkedJobs more of the first agent's jobs wait. The baseline is the same
// load before such jobs were parked (each came back every one to four
// seconds), measured with the same shape.
func Parked(ctx context.Context, o Options, out io.Writer) error {
	own, err := newOwnManager(ctx, o, bgjobs.Config{ShutdownTimeout: time.Second}, quietDeps)
	if err != nil {
		return err
	}
	defer own.close()
	rdb, cfg, m := own.rdb, own.cfg, own.m
	fmt.Fprintf(out, "\n%d work jobs waiting past their agent's share (5 of 10 slots held), after %s, over %s, redis %s\n", parkedJobs, parkedSettle, idleWindow, own.where)
	for _, a := range []string{"busy", "other"} {
		if err := m.PutAgent(ctx, &bgjobs.Agent{Name: a}); err != nil {
			return err
		}
	}
	w := m.NewWorker()
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Shutdown()
	spawn := func(delay time.Duration) func(int) error {
		args := fmt.Appendf(nil, `{"text":"x","delay_ms":%d}`, delay.Milliseconds())
		return func(int) error {
			_, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "busy", OriginSession: "chat", Kind: bgjobs.KindWork, Description: "parked",
				Work: &bgjobs.WorkSpec{Type: "echo", Args: args}})
			return err
		}
	}
	// The share's holders first, so the rest all find it held.
	if err := loadgen.FanOut(cfg.WorkShare, 1, spawn(time.Hour)); err != nil {
		return err
	}
	time.Sleep(time.Second)
	if err := loadgen.FanOut(parkedJobs, o.Clients, spawn(0)); err != nil {
		return err
	}
	time.Sleep(parkedSettle)
	return watch(ctx, rdb, out, "baseline 13,670, each job back every 1–4 s", "   (baseline 10 %)")
}

// sweepBacklog is how many queued jobs the sweep phase's reconcile visits.
const sweepBacklog = 20000

// Sweep measures one maintenance sweep over a backlog of queued jobs (no
// worker runs them), as the elected process runs one every 30 s: the
// reconciler looks at every job past its minute's grace. The baseline is
// the sweep reading one job at a time.
func Sweep(ctx context.Context, o Options, out io.Writer) error {
	var ahead atomic.Int64 // the clock moves past the reconciler's grace once the backlog is queued
	own, err := newOwnManager(ctx, o, bgjobs.Config{}, func(bgjobs.Config) tasks.Deps {
		return tasks.Deps{Logger: quiet, Now: func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }}
	})
	if err != nil {
		return err
	}
	defer own.close()
	rdb, m := own.rdb, own.m
	fmt.Fprintf(out, "\none maintenance sweep over %d queued jobs, redis %s\n", sweepBacklog, own.where)
	err = loadgen.FanOut(sweepBacklog, o.Clients, func(i int) error {
		_, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "default", OriginSession: fmt.Sprint("chat-", i%100), Kind: bgjobs.KindWork, Description: "backlog",
			Work: &bgjobs.WorkSpec{Type: "echo", Args: []byte(`{"text":"x"}`)}})
		return err
	})
	if err != nil {
		return err
	}
	ahead.Store(int64(2 * time.Minute))
	cmds0, err := stats.CommandsProcessed(ctx, rdb)
	if err != nil {
		fmt.Fprintf(out, "  (this Redis does not report its command count: %v)\n", err)
		return nil
	}
	start := time.Now()
	settled, err := m.Reconcile(ctx)
	took := time.Since(start)
	if err != nil {
		return err
	}
	if settled != 0 {
		return fmt.Errorf("sweep: settled %d queued jobs as lost", settled)
	}
	cmds1, err := stats.CommandsProcessed(ctx, rdb)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  took %8.0f ms, Redis commands %7d   (baseline 4,400–5,500 ms, 122,000 commands: one job at a time)\n",
		float64(took.Microseconds())/1000, cmds1-cmds0)
	return nil
}
