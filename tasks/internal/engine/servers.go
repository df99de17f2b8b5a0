package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
)

const (
	// followConcurrency is how many resumes one process delivers at once.
	followConcurrency = 10
	// controlConcurrency is how many timers one process runs at once.
	controlConcurrency = 4
	// workersPerFetcher and slotsPerFastFetcher split work concurrency
	// over fetch loops (Config.MaxFetchLoops, Config.MaxFastFetchLoops).
	workersPerFetcher   = 4
	slotsPerFastFetcher = 16
	// spareForwardInterval: moving due retries into the queue is the fast
	// loops' job; a spare checks seldom, as a backstop.
	spareForwardInterval = 10 * time.Second
	// forwardInterval is how often due retries and delayed tasks move into
	// their queue: two scripts per queue each time, the most an idle
	// process pays now that its fetches wait for work. Timers (the control
	// queue) move a little more often.
	forwardInterval        = 3 * time.Second
	controlForwardInterval = 2 * time.Second
	// healthCheckInterval: each server pings Redis this often.
	healthCheckInterval = time.Minute
)

// FetchSplit is how a process splits its work concurrency over at most
// maxLoops fetch loops (asynq servers): the slots of each.
func FetchSplit(concurrency, maxLoops int) []int {
	fetchers := min(maxLoops, max(1, concurrency/workersPerFetcher))
	split := make([]int, fetchers)
	for i := range split {
		split[i] = concurrency / fetchers
		if i < concurrency%fetchers {
			split[i]++
		}
	}
	return split
}

// retryDelay backs off 1s, 2s, 4s … up to 5 minutes; a task sent back
// with ErrLater is looked at again after a second, or after the wait
// LaterBy gave it.
func retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	var by laterBy
	if errors.As(err, &by) {
		return by.after
	}
	if errors.Is(err, ErrLater) {
		return time.Second
	}
	return min(time.Second<<min(n, 9), 5*time.Minute)
}

// ServerConfigs are the asynq servers of one process: turns, resumes,
// timers, and work split over fetch loops. A resume that fails with
// notFailure (it only waits its turn) is retried without counting as a
// failure.
func (e *Engine) ServerConfigs(cfg bgjobs.Config, log *slog.Logger, notFailure error) []asynq.Config {
	base := asynq.Config{
		TaskCheckInterval:        cfg.PollInterval,
		DelayedTaskCheckInterval: forwardInterval,
		HealthCheckInterval:      healthCheckInterval,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		RetryDelayFunc:           retryDelay,
		Logger:                   asynqLogger{log.With(slog.String("component", "asynq"))},
		LogLevel:                 asynq.WarnLevel,
		ErrorHandler:             e.Stops,
	}
	server := func(queue string, concurrency int, poll time.Duration) asynq.Config {
		c := base
		c.Queues = map[string]int{e.Queue(queue): 1}
		c.Concurrency, c.TaskCheckInterval = concurrency, poll
		return c
	}
	// A cancelled task (bgjobs' cancel, or asynq's own tools) and one sent
	// back for later are retried by asynq, but they are not failures.
	notJobFailure := func(err error) bool {
		return !errors.Is(err, context.Canceled) && !errors.Is(err, ErrLater)
	}
	follow := server(QueueResume, followConcurrency, cfg.ResumePollInterval)
	follow.IsFailure = func(err error) bool { return !errors.Is(err, notFailure) }
	control := withFailure(server(QueueControl, controlConcurrency, cfg.ControlPollInterval), notJobFailure)
	control.DelayedTaskCheckInterval = controlForwardInterval
	configs := []asynq.Config{
		withFailure(server(QueueTurns, cfg.TurnConcurrency, cfg.TurnPollInterval), notJobFailure),
		follow,
		control,
	}
	// The first few work loops poll an idle queue at PollInterval, the
	// spares slowly: an idle process pays for a few fast pollers only, and
	// a burst wakes the spares within SparePollInterval.
	fast := min(cfg.MaxFastFetchLoops, max(1, cfg.WorkConcurrency/slotsPerFastFetcher))
	for i, n := range FetchSplit(cfg.WorkConcurrency, cfg.MaxFetchLoops) {
		work := withFailure(server(QueueWork, n, cfg.PollInterval), notJobFailure)
		if i >= fast {
			work.TaskCheckInterval = cfg.SparePollInterval
			work.DelayedTaskCheckInterval = spareForwardInterval
		}
		configs = append(configs, work)
	}
	return configs
}

// ErrLater sends a task back to its queue, to be tried again in a second
// without counting as a failure (asynq does not count it as a retry).
var ErrLater = errors.New("not yet")

// LaterBy is err, an ErrLater, with its own wait before the task is looked
// at again.
func LaterBy(err error, after time.Duration) error { return laterBy{err, after} }

type laterBy struct {
	error
	after time.Duration
}

func (l laterBy) Unwrap() error { return l.error }

// After is the wait LaterBy gave.
func (l laterBy) After() time.Duration { return l.after }

// ErrRowBehind sends a task whose row is not there yet back to asynq, to
// be tried again shortly (its row travelled in a separate round trip).
var ErrRowBehind = fmt.Errorf("%w: job row not written yet", ErrLater)

func withFailure(c asynq.Config, isFailure func(error) bool) asynq.Config {
	c.IsFailure = isFailure
	return c
}

// asynqLogger sends asynq's logs to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }

// Inflight counts the handlers running. At the shutdown timeout asynq puts
// a running task back in its queue, ends its handler's context and returns
// without waiting for the handler, which then winds up through the
// process's writer (a job's row handed back, a resume's delivery lock let
// go): the shutdown waits for that (Wait) before the process stops the
// writer under it (the row would stay running, the lock held until its
// TTL) or a late handler takes the end of its context for a cancel.
type Inflight struct{ n atomic.Int64 }

// Count is an asynq middleware counting the handlers it wraps.
func (f *Inflight) Count(h asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		f.n.Add(1)
		defer f.n.Add(-1)
		return h.ProcessTask(ctx, t)
	})
}

// Wait returns once no handler runs, or after most.
func (f *Inflight) Wait(most time.Duration) {
	for deadline := time.Now().Add(most); f.n.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
}
