// Package pipeline is the one batching writer every bgjobs process sends its
// Redis commands through. Commands issued at the same moment by many
// goroutines (API handlers, workers, asynq's own scripts) share one pipeline
// per round trip: with nothing else in flight a command goes out at once,
// alone, so an idle system pays no latency; under load, whatever queues
// while one pipeline is on the wire goes in the next. Round trips, not
// Redis work, bound a job queue on a small machine.
//
// It has two lanes with different guarantees:
//
//   - Do and Script: the caller waits for the replies and reads its own
//     commands' results and errors. Several pipelines may be in flight.
//   - Add: fire and forget, in the order added, one pipeline at a time.
//     For writes that follow a state change but need not share its round
//     trip (events, bookkeeping): losing them in a crash must be harmless.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Op queues commands on a pipeline.
type Op func(ctx context.Context, p redis.Pipeliner)

// ErrStopped is returned by Do once the writer has stopped.
var ErrStopped = errors.New("pipeline writer stopped")

const (
	// syncLoops pipelines of the waited lane may be in flight at once.
	syncLoops = 4
	// syncMax caps the requests sent in one waited pipeline.
	syncMax = 128
	// asyncMax caps the ops sent in one fire-and-forget pipeline.
	asyncMax = 256
)

// Writer batches commands into pipelines. Start it before use and Stop it
// when done: Stop sends what Add queued and waits for every loop.
type Writer struct {
	rdb redis.UniversalClient
	log *slog.Logger

	sync  chan *request
	async chan Op
	wg    sync.WaitGroup

	mu      sync.RWMutex
	started bool
	stopped bool
	// replicas and replicaWait: see Replicas.
	replicas    int
	replicaWait time.Duration
	// waker holds empty fetches (FetchWaits).
	waker waker
	// tellers: messages to and from other processes (Tell, Heard).
	tellers tellers
}

// ErrNotReplicated fails the commands of a waited pipeline whose writes did
// not reach the replicas Replicas asks for in time. The writes stand on the
// master; a repeat (with its idempotency key) finds them.
var ErrNotReplicated = errors.New("not confirmed by enough replicas in time")

// Replicas makes every waited pipeline end with WAIT n timeout, so its
// writes count as done only once n replicas have them. Call it before
// Start; 0 (the default) waits for none.
func (w *Writer) Replicas(n int, timeout time.Duration) {
	w.replicas, w.replicaWait = n, timeout
}

// confirm ends p with WAIT when replicas are asked for, and returns the
// check to run on the pipeline's commands once they are back.
func (w *Writer) confirm(ctx context.Context, p redis.Pipeliner) func([]redis.Cmder) {
	if w.replicas <= 0 {
		return func([]redis.Cmder) {}
	}
	wait := p.Do(ctx, "wait", w.replicas, w.replicaWait.Milliseconds())
	return func(cmds []redis.Cmder) {
		acked, err := wait.Int64()
		if err == nil && acked >= int64(w.replicas) {
			return
		}
		err = fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, acked, w.replicas, w.replicaWait)
		for _, c := range cmds {
			if c != wait && c.Err() == nil {
				c.SetErr(err)
			}
		}
	}
}

type request struct {
	queue Op
	done  chan struct{}
}

// New returns a writer on rdb; log defaults to slog.Default().
func New(rdb redis.UniversalClient, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	return &Writer{rdb: rdb, log: log, sync: make(chan *request, 4*syncMax), async: make(chan Op, 4*asyncMax), tellers: newTellers()}
}

// Start runs the writer's loops until Stop. ctx is not used to stop them:
// queued writes must be sent, so only Stop ends the writer.
func (w *Writer) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil
	}
	w.started = true
	for range syncLoops {
		w.wg.Go(w.syncLoop)
	}
	w.wg.Go(w.asyncLoop)
	return nil
}

// Stop refuses new work, sends what is queued, and waits for the loops.
func (w *Writer) Stop() {
	w.mu.Lock()
	if !w.started || w.stopped {
		w.stopped = true
		w.mu.Unlock()
		return
	}
	w.stopped = true
	close(w.sync)
	close(w.async)
	w.mu.Unlock()
	w.wg.Wait()
}

// Do runs the commands queue adds, in a pipeline shared with concurrent
// callers, and returns once their replies are in the commands. If ctx ends
// first, Do returns ctx.Err() and the commands may still run.
func (w *Writer) Do(ctx context.Context, queue Op) error {
	r := &request{queue: queue, done: make(chan struct{})}
	if err := w.send(ctx, r); err != nil {
		return err
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Writer) send(ctx context.Context, r *request) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.stopped || !w.started {
		return ErrStopped
	}
	select {
	case w.sync <- r:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Script runs s with keys and args through the shared pipeline. A server
// that has not seen the script yet (a fresh or restarted Redis) answers
// NOSCRIPT inside the pipeline; the call then goes out alone with Run,
// which loads it.
func (w *Writer) Script(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	return w.ScriptThen(ctx, s, keys, args, nil)
}

// ScriptThen is Script with then's commands just behind the script in the
// same pipeline, on the same connection, so they see its writes (a read of
// the row it changed). After a NOSCRIPT, then's commands follow the loaded
// script in a round trip of their own.
func (w *Writer) ScriptThen(ctx context.Context, s *redis.Script, keys []string, args []any, then Op) *redis.Cmd {
	var cmd *redis.Cmd
	if err := w.Do(ctx, func(ctx context.Context, p redis.Pipeliner) {
		cmd = s.EvalSha(ctx, p, keys, args...)
		if then != nil {
			then(ctx, p)
		}
	}); err != nil {
		return ErrCmd(ctx, err)
	}
	if err := cmd.Err(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return cmd
	}
	if w.replicas <= 0 {
		cmd = s.Run(ctx, w.rdb, keys, args...)
	} else {
		// With its body, and confirmed like any waited pipeline.
		var check func([]redis.Cmder)
		cmds, _ := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = s.Eval(ctx, p, keys, args...)
			check = w.confirm(ctx, p)
			return nil
		})
		check(cmds)
	}
	if cmd.Err() == nil && then != nil {
		if err := w.Do(ctx, then); err != nil {
			return ErrCmd(ctx, err)
		}
	}
	return cmd
}

// Add queues op on the fire-and-forget lane; after Stop it is dropped.
func (w *Writer) Add(op Op) { w.add(op) }

// add is Add, reporting whether op was queued.
func (w *Writer) add(op Op) bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.stopped || !w.started {
		return false
	}
	w.async <- op
	return true
}

func (w *Writer) syncLoop() {
	for first := range w.sync {
		batch := gather(w.sync, first, syncMax)
		ctx := context.Background()
		// Per-command errors land in each command; Exec's own error is the
		// first of them, so it is not needed here.
		var check func([]redis.Cmder)
		cmds, _ := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range batch {
				r.queue(ctx, p)
			}
			check = w.confirm(ctx, p)
			return nil
		})
		check(cmds)
		for _, r := range batch {
			close(r.done)
		}
	}
}

func (w *Writer) asyncLoop() {
	for op := range w.async {
		batch := gather(w.async, op, asyncMax)
		ctx := context.Background()
		if _, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, op := range batch {
				op(ctx, p)
			}
			return nil
		}); err != nil {
			w.log.Warn("follow-up writes", slog.Int("count", len(batch)), slog.Any("err", err))
		}
	}
}

// gather returns first and whatever else is already queued on ch, up to
// max: what waited while the last pipeline was on the wire.
func gather[T any](ch <-chan T, first T, max int) []T {
	batch := []T{first}
	for len(batch) < max {
		select {
		case next, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, next)
		default:
			return batch
		}
	}
	return batch
}

// ErrCmd is a command that failed before it was sent.
func ErrCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}
