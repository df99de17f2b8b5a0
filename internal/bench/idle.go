package bench

import (
	"context"
	"fmt"
	"io"
	"time"

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
	rdb, where, closeRedis, err := connect(ctx, o.RedisURL)
	if err != nil {
		return err
	}
	defer closeRedis()
	fmt.Fprintf(out, "\nidle serve process (workers, search writer, API), shipped defaults, over %s, redis %s\n", idleWindow, where)
	ns := namespace()
	defer redisns.DropNamespace(context.Background(), rdb, ns)
	cfg := bgjobs.Config{Namespace: ns}.WithDefaults()
	m := tasks.NewManager(rdb, cfg, tasks.Deps{Logger: quiet})
	defer m.Close()
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
	fmt.Fprintf(out, "  Redis commands %6.0f /s              (goal ≤ 20; baseline ~685)\n", float64(cmds1-cmds0)/idleWindow.Seconds())
	fmt.Fprintf(out, "  CPU            %6.1f %% of one core   (goal ≤ 1 %%; baseline 10–15 %%)\n", 100*cpu.Seconds()/idleWindow.Seconds())
	return nil
}
