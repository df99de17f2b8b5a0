package tasks

import (
	"context"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/followup"
)

// FetchSplit is how a process splits its work concurrency over at most
// maxLoops fetch loops (asynq servers): the slots of each.
func FetchSplit(concurrency, maxLoops int) []int { return engine.FetchSplit(concurrency, maxLoops) }

// Worker runs the asynq servers of one process (work, turns, resumes,
// timers) and the elected maintenance sweeps.
type Worker struct {
	m       *Manager
	servers []*asynq.Server
	mux     *asynq.ServeMux
}

// NewWorker builds the servers; Start runs them.
func (m *Manager) NewWorker() *Worker {
	mux := asynq.NewServeMux()
	mux.HandleFunc(engine.TypeTurn, m.ProcessTask)
	mux.HandleFunc(engine.TypeWork, m.ProcessTask)
	mux.HandleFunc(engine.TypeResume, m.follow.ProcessResume)
	mux.HandleFunc(engine.TypeStraggler, m.follow.ProcessStraggler)
	mux.HandleFunc(engine.TypeLapse, m.follow.ProcessLapse)
	mux.HandleFunc(engine.TypeSeal, m.follow.ProcessSeal)
	mux.Use(m.running.Count)
	w := &Worker{m: m, mux: mux}
	for _, c := range m.eng.ServerConfigs(m.cfg, m.log, followup.ErrNudgeInFlight) {
		w.servers = append(w.servers, asynq.NewServerFromRedisClient(m.writer.AsynqClient(), c))
	}
	return w
}

// Start runs the servers and the maintenance loop.
func (w *Worker) Start(ctx context.Context) error {
	w.m.writer.FetchWaits(w.m.cfg.FetchWait)
	for _, s := range w.servers {
		if err := s.Start(w.mux); err != nil {
			return err
		}
	}
	return w.m.maint.Start(ctx)
}

// Shutdown stops taking tasks, lets running ones finish within the
// shutdown timeout (the rest go back to their queue), and stops the
// maintenance loop.
func (w *Worker) Shutdown() {
	w.m.stopping.Store(true)
	defer w.m.stopping.Store(false)
	w.m.writer.FetchWaits(0)
	var wg sync.WaitGroup
	for _, s := range w.servers {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
	// Those asynq gave up on hand their rows back now (engine.Inflight):
	// milliseconds, unless Redis is gone.
	w.m.running.Wait(5 * time.Second)
	w.m.maint.Stop()
}
