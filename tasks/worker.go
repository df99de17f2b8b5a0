package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
)

// settle ends j with o and publishes the completion when this call was the
// one that ended it. It reports whether it was.
func (m *Manager) settle(ctx context.Context, j *Job, o Outcome) (bool, error) {
	ctx = context.WithoutCancel(ctx) // a settle must not be lost to a cancelled caller
	now := m.now()
	announce := !j.Incognito && m.mayResume(ctx, j.Agent, j.OriginSession)
	ok, entries, err := m.store.settle(ctx, Tag(j.Agent, j.OriginSession), j.ID, o, now, announce)
	if err != nil || !ok {
		return ok, err
	}
	e := Event{Type: EventCompleted, JobID: j.ID, Agent: j.Agent, OriginSession: j.OriginSession,
		Status: o.Status, Kind: j.Kind, Description: j.Description, At: now.UTC()}
	if o.Result != nil {
		e.Result = *o.Result
	}
	if o.Error != nil {
		e.Error = *o.Error
	}
	m.publish(e)
	active, id := m.k.active(), j.ID
	m.sink.add(func(ctx context.Context, p redis.Pipeliner) { p.ZRem(ctx, active, id) })
	// The settle recorded its follow-ups in the outbox; move them on now.
	// One that cannot go yet (a report not yet searchable) or fails is
	// moved on later by the indexer or the reconciler's sweep.
	for _, entry := range entries {
		if err := m.pumpEntry(ctx, Tag(j.Agent, j.OriginSession), entry, now.UnixMilli()); err != nil && !errors.Is(err, errAwaitingIndex) && !errors.Is(err, errAwaitingWaiter) {
			m.log.Warn("follow-up after settle", slog.String("job_id", j.ID), slog.String("entry", entry), slog.Any("err", err))
		}
	}
	metrics.Settled.WithLabelValues(string(o.Status), string(j.Kind)).Inc()
	m.log.Info("job settled", slog.String("job_id", j.ID), slog.String("agent", j.Agent), slog.String("status", string(o.Status)))
	return true, nil
}

// turnLease is how long a turn's slot under the global cap survives without
// renewal: a worker that dies frees its slot within this time.
const turnLease = 30 * time.Second

// ProcessTask is the asynq handler of turn and work tasks. The registry row
// is the truth: a task whose row has ended does nothing, so a re-run, a late
// delivery or a cancelled job can never run twice or change an outcome.
func (m *Manager) ProcessTask(ctx context.Context, t *asynq.Task) error {
	id, _ := asynq.GetTaskID(ctx)
	var p taskPayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		m.log.Error("task payload unreadable; dropping it", slog.String("task_id", id), slog.Any("err", err))
		return fmt.Errorf("%w: payload: %v", asynq.SkipRetry, err)
	}
	tag := Tag(p.Agent, p.Session)
	if t.Type() == TypeTurn {
		// Take a slot first, so a job past the cap stays queued.
		release, err := m.waitTurnSlot(ctx, id)
		if err != nil {
			return m.stoppedBeforeStart(ctx, tag, id, err)
		}
		defer release()
	}
	code, attempt, j, err := m.store.start(ctx, tag, id, m.now())
	if err != nil {
		return err // Redis trouble: asynq tries again later
	}
	if code <= 0 {
		return nil // ended already (cancelled, settled by a twin) or deleted
	}
	m.log.Info("job running", slog.String("job_id", id), slog.String("agent", j.Agent), slog.Int64("attempt", attempt))
	m.publish(Event{Type: EventRunning, JobID: id, Agent: j.Agent, OriginSession: j.OriginSession,
		Status: StatusRunning, Kind: j.Kind, Description: j.Description, Attempt: attempt, At: m.now().UTC()})

	runCtx, cancel := context.WithTimeout(ctx, m.cfg.TurnTimeout)
	defer cancel()
	result, runErr := m.run(runCtx, j)
	if runErr == nil {
		_, err := m.settle(ctx, j, Outcome{Status: StatusCompleted, Result: &result})
		return err
	}
	if ctx.Err() != nil {
		// Cancelled through the API (the row is already terminal), or the
		// server is shutting down: hand the job back and let asynq requeue it.
		_ = m.store.requeue(context.WithoutCancel(ctx), tag, id)
		return ctx.Err()
	}
	msg := runErr.Error()
	if errors.Is(runCtx.Err(), context.DeadlineExceeded) {
		msg = fmt.Sprintf("timed out after %s", m.cfg.TurnTimeout)
	} else if IsRetryable(runErr) {
		retried, _ := asynq.GetRetryCount(ctx)
		maxRetry, _ := asynq.GetMaxRetry(ctx)
		if retried < maxRetry {
			_ = m.store.requeue(ctx, tag, id)
			return runErr
		}
		msg = fmt.Sprintf("gave up after %d attempts: %s", retried+1, msg)
	}
	_, err = m.settle(ctx, j, Outcome{Status: StatusFailed, Error: &msg})
	return err
}

// stoppedBeforeStart handles a turn that never got a slot: if the row ended
// meanwhile (cancelled while queued) the task is done, otherwise asynq tries
// again later.
func (m *Manager) stoppedBeforeStart(ctx context.Context, tag, id string, err error) error {
	j, lerr := m.store.load(context.WithoutCancel(ctx), tag, id)
	if lerr == nil && (j == nil || j.Status.Terminal()) {
		return nil
	}
	return err
}

// run does the work of one job.
func (m *Manager) run(ctx context.Context, j *Job) (string, error) {
	switch j.Kind {
	case KindWork:
		kind, ok := m.kinds.Lookup(j.WorkType)
		if !ok {
			return "", fmt.Errorf("work kind %q is not registered in this process", j.WorkType)
		}
		ctx = context.WithValue(ctx, jobInfoKey{}, JobInfo{ID: j.ID, Agent: j.Agent, OriginSession: j.OriginSession, Description: j.Description})
		return kind.Run(ctx, j.WorkArgs)
	case KindTurn:
		if m.turns == nil {
			return "", errors.New("this process cannot run turns (no A2A runner)")
		}
		agent, err := m.store.getAgent(ctx, j.Agent)
		if err != nil {
			return "", Retryable(err)
		}
		if agent == nil || agent.A2AURL == "" {
			return "", fmt.Errorf("agent %q has no a2a_url", j.Agent)
		}
		seq := 0
		return m.turns.RunTurn(ctx, Turn{
			AgentURL: agent.A2AURL, JobID: j.ID, OriginSession: j.OriginSession,
			SubagentType: j.SubagentType, Preamble: agent.SubagentTypes[j.SubagentType], Prompt: j.Prompt,
			Progress: func(state, text string) {
				seq++
				key, line := m.k.job(Tag(j.Agent, j.OriginSession), j.ID), bgjobs.CutRunes(text, eventResultChars)
				m.sink.add(func(ctx context.Context, p redis.Pipeliner) {
					hsetIfExistsCmd.Eval(ctx, p, []string{key}, fProgress, line)
				})
				m.publish(Event{Type: EventProgress, JobID: j.ID, Agent: j.Agent, OriginSession: j.OriginSession,
					Status: StatusRunning, Kind: j.Kind, Description: j.Description, Seq: seq, State: state,
					Text: text, At: m.now().UTC()})
			},
		})
	}
	return "", fmt.Errorf("unknown job kind %q", j.Kind)
}

// waitTurnSlot blocks until the job holds a slot of the global turn cap and
// returns the function that frees it. The slot's lease is renewed while the
// turn runs, so a dead worker's slot frees itself.
func (m *Manager) waitTurnSlot(ctx context.Context, id string) (func(), error) {
	acquire := func() (bool, error) {
		now := m.now()
		n, err := acquireTurnCmd.Run(ctx, m.rdb, []string{m.k.turnSem()}, id,
			now.UnixMilli(), now.Add(turnLease).UnixMilli(), m.cfg.TurnConcurrency).Int()
		return n == 1, err
	}
	delay := m.cfg.PollInterval
	for {
		ok, err := acquire()
		if ok {
			break
		}
		if err != nil && ctx.Err() == nil {
			m.log.Warn("turn slot", slog.String("job_id", id), slog.Any("err", err))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(turnLease / 3)
		defer tick.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-tick.C:
				now := m.now()
				m.rdb.ZAddXX(renewCtx, m.k.turnSem(), redisZ(now.Add(turnLease).UnixMilli(), id))
			}
		}
	})
	return func() {
		stop()
		wg.Wait()
		m.rdb.ZRem(context.WithoutCancel(ctx), m.k.turnSem(), id)
	}, nil
}

// RunningTurns reports how many turn slots are held right now.
func (m *Manager) RunningTurns(ctx context.Context) (int64, error) {
	return m.rdb.ZCount(ctx, m.k.turnSem(), strconv.FormatInt(m.now().UnixMilli(), 10), "+inf").Result()
}

// retryDelay backs off 1s, 2s, 4s … up to 5 minutes.
func retryDelay(n int, _ error, _ *asynq.Task) time.Duration {
	return min(time.Second<<min(n, 9), 5*time.Minute)
}

const (
	// followConcurrency is how many resumes one process delivers at once.
	followConcurrency = 10
	// followPollInterval bounds how long an idle process takes to pick up
	// a resume: a nudge is worth its ~100 cheap polls a second.
	followPollInterval = 10 * time.Millisecond
	// Control tasks are timers (straggler joins, busy-lease lapses): each
	// is scheduled, and asynq moves due ones into the queue once a second,
	// so polling their queue faster than this would buy nothing.
	controlConcurrency  = 4
	controlPollInterval = 100 * time.Millisecond
	// turnPollInterval is the slowest an idle process looks for turns: a
	// turn runs for seconds, and a few tens of milliseconds to start one
	// are not worth a hundred polls a second.
	turnPollInterval = 50 * time.Millisecond
	// Fetch loops for work, per process: one per workersPerFetcher slots,
	// at most maxFetchers. Under load a fetch is one Redis round trip,
	// and a round trip on a busy machine takes a millisecond or two, so a
	// single loop would leave most slots idle while the queue grows.
	workersPerFetcher = 4
	maxFetchers       = 12
	// The first loops, one per slotsPerFastFetcher slots and at most
	// maxFastFetchers, poll an idle queue at PollInterval: a job spawned
	// into it waits about PollInterval/(2 × fast loops) to be picked up.
	// The spares exist for throughput, not pickup latency, and poll at
	// spareFetcherPoll, so an idle process pays for a few fast pollers
	// only; a burst wakes the spares within that.
	slotsPerFastFetcher  = 16
	maxFastFetchers      = 3
	spareFetcherPoll     = 100 * time.Millisecond
	spareForwardInterval = 10 * time.Second
)

// FetchSplit is how a process splits its work concurrency over fetch loops
// (asynq servers): the slots of each.
func FetchSplit(concurrency int) []int {
	fetchers := min(maxFetchers, max(1, concurrency/workersPerFetcher))
	split := make([]int, fetchers)
	for i := range split {
		split[i] = concurrency / fetchers
		if i < concurrency%fetchers {
			split[i]++
		}
	}
	return split
}

// Worker runs the asynq servers of one process: work jobs and turns each
// with their own concurrency, plus the reconciler.
type Worker struct {
	m       *Manager
	servers []*asynq.Server
	rec     *Reconciler
	mux     *asynq.ServeMux
}

// NewWorker builds the servers; Start runs them.
func (m *Manager) NewWorker() *Worker {
	mux := asynq.NewServeMux()
	mux.HandleFunc(TypeTurn, m.ProcessTask)
	mux.HandleFunc(TypeWork, m.ProcessTask)
	mux.HandleFunc(TypeResume, m.ProcessResume)
	mux.HandleFunc(TypeStraggler, m.ProcessStraggler)
	mux.HandleFunc(TypeLapse, m.ProcessLapse)
	logger := asynqLogger{m.log.With(slog.String("component", "asynq"))}
	base := asynq.Config{
		TaskCheckInterval:        m.cfg.PollInterval,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          m.cfg.ShutdownTimeout,
		RetryDelayFunc:           retryDelay,
		Logger:                   logger,
		LogLevel:                 asynq.WarnLevel,
	}
	turns := base
	turns.Concurrency = m.cfg.TurnConcurrency
	turns.TaskCheckInterval = max(m.cfg.PollInterval, turnPollInterval)
	turns.Queues = map[string]int{m.Queue(QueueTurns): 1}
	follow := base
	follow.Concurrency = followConcurrency
	follow.TaskCheckInterval = followPollInterval
	follow.IsFailure = func(err error) bool { return !errors.Is(err, errNudgeInFlight) }
	follow.Queues = map[string]int{m.Queue(QueueResume): 1}
	control := base
	control.Concurrency = controlConcurrency
	control.TaskCheckInterval = max(m.cfg.PollInterval, controlPollInterval)
	control.Queues = map[string]int{m.Queue(QueueControl): 1}
	configs := []asynq.Config{turns, follow, control}
	// An asynq server fetches one task per round trip from a single loop,
	// which caps a busy server below what its workers could run. Work
	// concurrency is split over several servers, each with its own fetch
	// loop; the first few poll an idle queue at PollInterval, the spares
	// slowly.
	fast := min(maxFastFetchers, max(1, m.cfg.WorkConcurrency/slotsPerFastFetcher))
	for i, n := range FetchSplit(m.cfg.WorkConcurrency) {
		work := base
		if i >= fast {
			work.TaskCheckInterval = max(m.cfg.PollInterval, spareFetcherPoll)
			// Moving due retries into the queue is the fast loops' job
			// already; a spare checks seldom, as a backstop.
			work.DelayedTaskCheckInterval = spareForwardInterval
		}
		work.Concurrency = n
		work.Queues = map[string]int{m.Queue(QueueWork): 1}
		configs = append(configs, work)
	}
	w := &Worker{m: m, rec: m.NewReconciler()}
	for _, cfg := range configs {
		w.servers = append(w.servers, asynq.NewServerFromRedisClient(pipedScripts{m.rdb, m.store.ap}, cfg))
	}
	w.mux = mux
	return w
}

// Start runs the servers and the reconciler.
func (w *Worker) Start(ctx context.Context) error {
	for _, s := range w.servers {
		if err := s.Start(w.mux); err != nil {
			return err
		}
	}
	w.rec.Start(ctx)
	return nil
}

// Shutdown stops taking tasks, lets running ones finish within the
// shutdown timeout (the rest go back to their queue), and stops the
// reconciler.
func (w *Worker) Shutdown() {
	var wg sync.WaitGroup
	for _, s := range w.servers {
		wg.Go(s.Shutdown)
	}
	wg.Wait()
	w.rec.Stop()
}

// asynqLogger sends asynq's logs to slog.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }
